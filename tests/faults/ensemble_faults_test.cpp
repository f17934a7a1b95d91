// SPDX-License-Identifier: Apache-2.0
// Waiters ride through ensemble faults (issue 13, item 5): on a private 3-node ensemble, contender
// processes of every lock type (zklock::mutex; zklock::shared_mutex readers and writers;
// zklock::counting_semaphore of 2 leases) take their lock in a loop with short sessions and long
// acquire deadlines, while the ensemble goes through one fault: a rolling restart of all three
// members, the leader killed (and restarted), or the leader or a follower paused (SIGSTOP) longer
// than the session timeout. The contenders give a session up after 250 ms of disconnection (loss_tolerance), less
// than an election's gap, so that every fault ends sessions, most of them of waiters.
//
// A fourth lock is revoked while the faults run: its two mutex contenders end each hold with a
// guarded write (session::commit_if_held: a sequential node holding the hold's fencing token),
// one letting go early when asked (revocation_token()), the other ignoring requests (so it is
// forced, and writes after it lost the lock), while a revoker process revokes the lock every few
// hundred milliseconds with a short grace (zklock::revoke: asked, then forced).
//
// Proved for each fault: sessions ended and waiters queued again (acquire_stats::requeues); no
// acquire failed while its deadline had time left; no two live holds overlap
// against the lock's rule (chaos_checker.hpp); every hold whose session ended while it was held
// was told through lost_token(); no node is left under the lock paths; the guarded writes that
// committed did so in the order of their holds' tokens (a holder that had lost its lock, to expiry
// or to a forced revocation, never committed after its successor), and some were refused.
//
// The binary re-executes itself as the contenders (chaos_harness.hpp). Contender logs are the
// chaos logs, plus NOTE lines the checker ignores and this test reads:
//   NOTE who FAIL LEFT_MS what...   an acquire threw or timed out, LEFT_MS before its deadline
//   NOTE who STATE t                the session listener heard STATE (SUSPENDED, EXPIRED, ...)
//   NOTE who UNTOLD token           a hold outlived its session and lost_token() never fired
//   NOTE who REQUEUES n             the process's re-queues, at its end
//   NOTE who GUARDED token ok|refused|unknown   a guarded write of hold `token` committed, was
//                                   refused (the hold was gone), or its outcome is unknown
//   NOTE who REVOKED outcomes...    what one revoke() did
// ZKLOCK_FAULT_SCALE (default 1) stretches the session timeout, the ticks and every bound.
#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>
#include "chaos_checker.hpp"
#include "chaos_harness.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using namespace chaos::harness;
using std::chrono::milliseconds;
using std::chrono::steady_clock;
using zkt::scaled;

/// The contenders' session timeout: short, so that faults cost sessions.
milliseconds session_timeout() { return scaled(4000ms); }
/// How long a contender's session may stay suspended before zklock gives it up (expired). Shorter
/// than the default (a quarter of the timeout, 1 s) and than an election's gap (~0.4-0.6 s here),
/// so that every fault, not only the pause, ends sessions of waiters and holders.
milliseconds loss_tolerance() { return scaled(250ms); }
/// Each acquire's deadline: long enough to ride through any of the faults below.
milliseconds acquire_deadline() { return scaled(40s); }
constexpr std::ptrdiff_t semaphore_leases = 2;

// ---- child side: `contender WHO KIND LOCK LOG SEED` --------------------------------------------

std::atomic<std::size_t> requeues{0};

/// Returns: `s.requeues` where acquire_stats has it (it came with re-queueing), else 0.
template <class Stats>
std::size_t requeues_of(const Stats& s) {
  if constexpr (requires { s.requeues; })
    return s.requeues;
  else
    return 0;
}

/// Counts the re-queues of every acquire of this process.
struct requeue_hooks {
  static constexpr bool enabled = true;
  static void on_acquire(const zklock::acquire_stats& s) noexcept { requeues += requeues_of(s); }
  static void on_release(const zklock::release_stats&) noexcept {}
};
// zklock::mutex, shared_mutex and counting_semaphore with the hooks above.
struct requeue_policies : zklock::default_policies {
  using hooks = requeue_hooks;
};
using mutex = zklock::basic_mutex<requeue_policies>;
using shared_mutex = zklock::basic_shared_mutex<requeue_policies>;
using semaphore = zklock::basic_counting_semaphore<requeue_policies>;

/// What a contender does with its lock: one acquire within `d` (true: granted), the fencing token
/// (0: none; readers and leases have none), the hold's loss signal, the release.
struct lock_ops {
  std::function<bool(milliseconds d)> acquire;
  std::function<std::int64_t()> token;
  std::function<std::stop_token()> lost;
  std::function<void()> release;
  std::function<std::stop_token()> revoked{};        ///< ends the work early too (none: never)
  std::function<void(std::int64_t token)> write{};   ///< after the work, before the release
  bool heedless = false;  ///< works on through a loss (as a paused holder would), then writes
};

std::string one_line(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  return s;
}

void contend(zklock::session& s, const lock_ops& ops, int who_n, const event_log& log, std::uint64_t seed) {
  std::mt19937_64 rng{seed};
  std::uniform_int_distribution<int> work_ms{200, 800};  // most outlive loss_tolerance()
  const std::string who = std::to_string(who_n);
  std::int64_t holds = 0;
  while (!stop_requested()) {
    log.line("ACQUIRE " + who + " " + std::to_string(mono_ns()));
    const auto deadline = steady_clock::now() + acquire_deadline();
    std::string failure;
    try {
      if (!ops.acquire(acquire_deadline())) failure = "timed out";
    } catch (const std::system_error& e) {
      if (ops.revoked && e.code() == zklock::errc::contender_deleted) {
        // Revoked (forced) as the holder before its acquire had seen the grant: no failure.
        log.line("NOTE " + who + " REVOKED_BEFORE_GRANT");
        continue;
      }
      failure = e.what();
    }
    if (!failure.empty()) {
      const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
      log.line("NOTE " + who + " FAIL " + std::to_string(left.count()) + " " + one_line(failure));
      (void)s.wait_for(zklock::session_state::connected, 15s);  // re-established by itself
      continue;
    }
    const std::int64_t tok = ops.token() ? ops.token() : ++holds;  // a reader's or a lease's: a count
    const std::int64_t sid = s.id();
    log.line("GRANT " + who + " " + std::to_string(tok) + " " + std::to_string(mono_ns()) + " " + std::to_string(sid));
    {
      const std::stop_token lost = ops.lost();
      std::stop_callback on_loss{lost, lost_logger{&log, who_n, tok}};
      {  // stands for work under the lock, which stops when the hold is lost (or is asked for)
        std::stop_source stop_work;
        std::stop_callback on_lost{ops.heedless ? std::stop_token{} : lost, [&] { stop_work.request_stop(); }};
        std::optional<std::stop_callback<std::function<void()>>> on_asked;
        if (ops.revoked) on_asked.emplace(ops.revoked(), [&] { stop_work.request_stop(); });
        std::mutex mu;
        std::condition_variable_any cv;
        std::unique_lock lk{mu};
        (void)cv.wait_for(lk, stop_work.get_token(), milliseconds{work_ms(rng)}, [] { return false; });
      }
      if (ops.write) ops.write(tok);
      if (s.id() != sid || s.state() == zklock::session_state::expired) {
        // The session ended under the hold: lost_token() must say so (the signal comes on the
        // session's thread, at the latest when the new session appears).
        const auto limit = steady_clock::now() + 5s;
        while (!lost.stop_requested() && steady_clock::now() < limit) std::this_thread::sleep_for(1ms);  // polling
        if (!lost.stop_requested()) log.line("NOTE " + who + " UNTOLD " + std::to_string(tok));
      }
      log.line("RELEASE " + who + " " + std::to_string(tok) + " " + std::to_string(mono_ns()));
    }
    ops.release();
  }
  log.line("NOTE " + who + " REQUEUES " + std::to_string(requeues.load()));
}

int role_contender(const std::vector<std::string>& v) {
  const int who = std::stoi(v.at(0));
  const std::string kind = v.at(1), lock = v.at(2);
  const std::uint64_t seed = std::stoull(v.at(4));
  const char* c = std::getenv("ZKLOCK_TEST_ZK");
  if (!c || !*c) throw std::runtime_error("ZKLOCK_TEST_ZK is not set");
  zklock::session_options o;
  o.connect = c;
  o.session_timeout = session_timeout();
  o.loss_tolerance = loss_tolerance();
  o.connect_timeout = 15s;
  zklock::session s{o};
  event_log log{v.at(3)};
  const auto listener = s.add_state_listener([&](zklock::session_state st) {
    static constexpr const char* names[] = {"CONNECTING", "CONNECTED", "SUSPENDED", "EXPIRED", "CLOSED"};
    log.line("NOTE " + std::to_string(who) + " " + names[static_cast<int>(st)] + " " + std::to_string(mono_ns()));
  });
  if (kind == "mutex") {
    mutex m{s, lock};
    contend(s, {[&](milliseconds d) { return m.try_lock_for(d); }, [&] { return m.fencing_token(); },
                [&] { return m.lost_token(); }, [&] { m.unlock(); }},
            who, log, seed);
  } else if (kind == "reader" || kind == "writer") {
    shared_mutex m{s, lock};
    if (kind == "reader")
      contend(s, {[&](milliseconds d) { return m.try_lock_shared_for(d); }, [] { return std::int64_t{0}; },
                  [&] { return m.lost_token(); }, [&] { m.unlock_shared(); }},
              who, log, seed);
    else
      contend(s, {[&](milliseconds d) { return m.try_lock_for(d); }, [&] { return m.fencing_token(); },
                  [&] { return m.lost_token(); }, [&] { m.unlock(); }},
              who, log, seed);
  } else if (kind == "guarded" || kind == "guarded-stubborn") {
    mutex m{s, lock};
    // The stubborn one ignores requests and works on through its loss: the revoker forces it, and
    // its guarded write comes after its successor may have written.
    if (kind == "guarded-stubborn") m.set_on_revoke(zklock::on_revoke::ignore);
    const std::string writes = lock + "-writes";
    lock_ops ops{[&](milliseconds d) { return m.try_lock_for(d); }, [&] { return m.fencing_token(); },
                 [&] { return m.lost_token(); }, [&] { m.unlock(); }};
    ops.revoked = [&] { return m.revocation_token(); };
    ops.heedless = kind == "guarded-stubborn";
    ops.write = [&](std::int64_t tok) {
      std::string outcome = "ok";
      try {
        s.commit_if_held(m.fence(), {zklock::op::create(writes + "/w-", std::to_string(tok),
                                                        zklock::create_mode::persistent_sequential)});
      } catch (const std::system_error& e) {
        outcome = e.code() == zklock::errc::connection_loss ? "unknown" : "refused";
      }
      log.line("NOTE " + std::to_string(who) + " GUARDED " + std::to_string(tok) + " " + outcome);
    };
    contend(s, ops, who, log, seed);
  } else if (kind == "revoker") {
    std::mt19937_64 rng{seed};
    std::uniform_int_distribution<int> pause_ms{300, 900};
    while (!stop_requested()) {
      std::this_thread::sleep_for(milliseconds{pause_ms(rng)});  // pacing, not a synchronisation
      std::string line = "NOTE " + std::to_string(who) + " REVOKED";
      try {
        for (const auto& r : zklock::revoke(s, lock, {.grace = scaled(150ms)}))
          line += std::string{" "} + zklock::to_string(r.outcome);
      } catch (const std::system_error& e) {
        line += " error " + one_line(e.what());
        (void)s.wait_for(zklock::session_state::connected, 15s);
      }
      log.line(line);
    }
  } else if (kind == "semaphore") {
    semaphore m{s, lock, semaphore_leases};
    contend(s, {[&](milliseconds d) { return m.try_acquire_for(d); }, [] { return std::int64_t{0}; },
                [&] { return m.lost_token(); }, [&] { m.release(); }},
            who, log, seed);
  } else {
    throw std::invalid_argument("unknown lock kind " + kind);
  }
  s.remove_state_listener(listener);
  return 0;
}

// ---- parent side ------------------------------------------------------------------------------

/// One lock of the run and its contender processes.
struct lock_group {
  std::string name;  ///< "mutex", "shared_mutex", "semaphore"
  std::string path;
  chaos::sharing rule;
  std::vector<int> who;
};

struct contender {
  int who;
  std::string kind, log;
  std::unique_ptr<child_process> proc;
};

/// What one run amounted to.
struct run_result {
  std::vector<std::string> problems;  ///< every broken promise, one line each
  std::map<std::string, chaos::report> reports;
  std::size_t grants = 0, requeues = 0, expiries = 0, lost_signals = 0, failures_out_of_time = 0;
  std::string summary() const {
    return std::to_string(grants) + " grants, " + std::to_string(expiries) + " session expiries, " +
           std::to_string(requeues) + " re-queues, " + std::to_string(lost_signals) + " lost_token() signals, " +
           std::to_string(failures_out_of_time) + " acquires out of time, " + std::to_string(problems.size()) +
           " problems";
  }
};

/// The run: the ensemble, the locks and their contenders; `fault` is the test.
class ensemble_run {
 public:
  ensemble_run() : zk_{3, static_cast<int>(scaled(200ms).count())} {
    dir_.keep = std::getenv("ZKLOCK_CHAOS_KEEP_LOGS") != nullptr;
    const std::string base = zkt::unique_path("ensemble");
    groups_ = {{"mutex", base + "-mutex", {}, {}},
               {"shared_mutex", base + "-rw", {}, {}},
               {"semaphore", base + "-sem", {static_cast<std::size_t>(semaphore_leases), {}}, {}},
               {"guarded", base + "-guarded", {}, {}}};
    writes_ = base + "-guarded-writes";
    zkt::create_path(writes_);
    std::mt19937_64 rng{std::random_device{}()};
    auto spawn = [&](lock_group& g, const std::string& kind) {
      const int who = static_cast<int>(kids_.size()) + 1;
      const std::string log = (dir_.path / ("contender-" + std::to_string(who) + ".log")).string();
      kids_.push_back({who, kind, log,
                       std::make_unique<child_process>(std::vector<std::string>{
                           "contender", std::to_string(who), kind, g.path, log, std::to_string(rng())})});
      if (kind == "revoker") {  // holds nothing: not one of the lock's contenders
        revokers_.push_back(who);
        return;
      }
      g.who.push_back(who);
      if (kind == "reader") g.rule.readers.insert(who);
    };
    for (int i = 0; i < 3; ++i) spawn(groups_[0], "mutex");
    for (int i = 0; i < 2; ++i) spawn(groups_[1], "reader");
    for (int i = 0; i < 2; ++i) spawn(groups_[1], "writer");
    for (int i = 0; i < 3; ++i) spawn(groups_[2], "semaphore");
    spawn(groups_[3], "guarded");
    spawn(groups_[3], "guarded-stubborn");
    spawn(groups_[3], "revoker");
    std::cout << "ensemble " << zk_.connect() << "; " << kids_.size() << " contenders, session timeout "
              << session_timeout().count() << " ms, acquire deadline " << acquire_deadline().count() << " ms, logs "
              << dir_.path.string() << std::endl;
  }

  zkt::private_server& zk() { return zk_; }

  /// Effects: waits until every lock was granted `n` more times since this call (polling the
  /// logs). Returns: whether that happened within `limit`.
  bool await_progress(std::size_t n, milliseconds limit) {
    const std::int64_t since = mono_ns();
    const auto until = steady_clock::now() + limit;
    for (;;) {
      bool all = true;
      for (const auto& g : groups_) {
        std::size_t grants = 0;
        for (int who : g.who)
          for (const auto& line : read_lines(kids_[static_cast<std::size_t>(who - 1)].log))
            if (const auto e = chaos::parse_line(line); e && e->k == chaos::kind::grant && e->t > since) ++grants;
        all = all && grants >= n;
      }
      if (all) return true;
      if (steady_clock::now() > until) return false;
      std::this_thread::sleep_for(50ms);  // polling the logs
    }
  }

  /// Effects: ends the contenders (each finishes its round), waits for the lock nodes to empty,
  /// and checks everything. Returns: the result.
  run_result finish() {
    run_result r;
    for (auto& k : kids_) k.proc->finish();
    for (auto& k : kids_) {
      const auto st = k.proc->wait(scaled(60s));
      if (!st)
        r.problems.push_back("contender " + std::to_string(k.who) + " did not finish in time");
      else if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0)
        r.problems.push_back("contender " + std::to_string(k.who) + " (" + k.kind + "): " + describe(*st));
    }
    for (const auto& g : groups_) {
      // Every contender ended cleanly, so its nodes are gone (or go with its closed session).
      const auto until = steady_clock::now() + 3 * session_timeout();
      while (!zkt::children(g.path).empty() && steady_clock::now() < until) std::this_thread::sleep_for(10ms);  // polling
      std::vector<std::string> events;
      for (int who : g.who) {
        const auto& k = kids_[static_cast<std::size_t>(who - 1)];
        const auto lines = read_lines(k.log);
        events.insert(events.end(), lines.begin(), lines.end());
        check_notes(k, lines, r);
      }
      if (g.name == "guarded") {
        // Forced revocations end holds on the server before their holders hear of it, so the
        // holders' own view of their holds overlaps by design: what this lock proves is that the
        // guarded writes never did (check_guarded_writes), and that nothing is left behind.
        if (const auto left = zkt::children(g.path); !left.empty())
          r.problems.push_back("guarded: " + std::to_string(left.size()) + " nodes left under " + g.path);
        continue;
      }
      auto rep = chaos::check(events, {}, zkt::children(g.path), g.rule);
      for (const auto& v : rep.violations) r.problems.push_back(g.name + ": " + v);
      r.grants += rep.grants;
      r.lost_signals += rep.lost_signals;
      std::cout << g.name << ": " << rep.summary() << std::endl;
      r.reports.emplace(g.name, std::move(rep));
    }
    check_guarded_writes(r);
    std::cout << "ensemble result: " << r.summary() << std::endl;
    return r;
  }

 private:
  /// Effects: checks the guarded writes of the revoked lock: the committed ones (the sequential
  /// nodes under writes_, in commit order) carry non-decreasing hold tokens, so that no holder
  /// committed after a later holder had; and counts what the contenders and the revoker told.
  void check_guarded_writes(run_result& r) const {
    auto nodes = zkt::children(writes_);
    std::sort(nodes.begin(), nodes.end());  // one prefix: the sequence numbers' order, the commits'
    std::int64_t last = 0;
    for (const auto& n : nodes) {
      const std::int64_t tok = std::stoll(zkt::stat_node(writes_ + "/" + n).data);
      if (tok < last)
        r.problems.push_back("guarded: " + n + " committed with hold token " + std::to_string(tok) + " after a write of hold " +
                             std::to_string(last) + ": a holder that had lost its lock committed");
      last = std::max(last, tok);
    }
    std::map<std::string, std::size_t> seen;
    for (const auto& k : kids_) {
      if (!k.kind.starts_with("guarded") && k.kind != "revoker") continue;
      for (const auto& line : read_lines(k.log)) {
        char tag[8] = {}, what[16] = {}, rest[16] = {};
        long long who = 0, tok = 0;
        if (std::sscanf(line.c_str(), "%7s %lld %15s %lld %15s", tag, &who, what, &tok, rest) == 5 &&
            std::string_view{what} == "GUARDED")
          ++seen[std::string{"guarded write "} + rest];
        if (std::string_view{line}.find(" REVOKED") != std::string_view::npos)
          for (const char* o : {"released", "forced", "error"})
            if (line.find(o) != std::string::npos) ++seen[std::string{"revocations "} + o];
      }
    }
    std::cout << "guarded: " << nodes.size() << " writes committed in token order";
    for (const auto& [what, n] : seen) std::cout << ", " << what << " " << n;
    std::cout << std::endl;
    const std::size_t ok = seen["guarded write ok"], unknown = seen["guarded write unknown"];
    if (nodes.size() < ok || nodes.size() > ok + unknown)  // an unknown outcome may have committed
      r.problems.push_back("guarded: " + std::to_string(ok) + " writes reported committed (" + std::to_string(unknown) +
                           " unknown), " + std::to_string(nodes.size()) + " on the server");
    if (nodes.empty()) r.problems.push_back("guarded: no guarded write committed at all");
  }

  /// Effects: reads the NOTE lines of contender `k` into `r`; a hold (GRANT to RELEASE) that spans
  /// an EXPIRED of its process without a LOST first is a problem, as is an UNTOLD line.
  static void check_notes(const contender& k, const std::vector<std::string>& lines, run_result& r) {
    std::optional<std::int64_t> held;  // the token of the open hold
    bool told = false;
    for (const auto& line : lines) {
      char tag[16] = {}, what[16] = {};
      long long a = 0, b = 0;
      const int n = std::sscanf(line.c_str(), "%15s %lld %15s %lld", tag, &a, what, &b);
      const std::string_view t{tag}, w{what};
      if (t == "GRANT") {
        if (const auto e = chaos::parse_line(line)) held = e->token;
        told = false;
      } else if (t == "LOST") {
        told = true;
      } else if (t == "RELEASE") {
        held.reset();
      } else if (t == "NOTE" && n == 4 && w == "FAIL") {
        if (b > 0)
          r.problems.push_back("contender " + std::to_string(k.who) + " (" + k.kind + "): an acquire failed " +
                               std::to_string(b) + " ms before its deadline: " + line);
        else
          ++r.failures_out_of_time;
      } else if (t == "NOTE" && n >= 3 && w == "EXPIRED") {
        ++r.expiries;
        if (held && !told)
          r.problems.push_back("contender " + std::to_string(k.who) + " (" + k.kind + "): its session expired under hold " +
                               std::to_string(*held) + ", and lost_token() had not fired");
      } else if (t == "NOTE" && n >= 3 && w == "UNTOLD") {
        r.problems.push_back("contender " + std::to_string(k.who) + " (" + k.kind + "): " + line +
                             ": a hold outlived its session and lost_token() never fired");
      } else if (t == "NOTE" && n == 4 && w == "REQUEUES") {
        r.requeues += static_cast<std::size_t>(b);
      }
    }
  }

  temp_dir dir_;
  zkt::private_server zk_;
  std::vector<lock_group> groups_;
  std::vector<contender> kids_;
  std::vector<int> revokers_;  // contenders that only revoke the guarded lock
  std::string writes_;         // the guarded writes' nodes
};

/// The checks every fault test makes of its run; `sessions_end`: the fault must end sessions.
void expect_rode_through(const run_result& r, bool sessions_end = true) {
  for (const auto& p : r.problems) ADD_FAILURE() << p;
  EXPECT_EQ(r.failures_out_of_time, 0u) << "acquires timed out although the deadline outlasts the fault";
  if (!sessions_end) return;
  // The fault did what it is for: sessions ended, and waiters queued again on the new ones.
  EXPECT_GE(r.expiries, 1u) << r.summary();
  EXPECT_GE(r.requeues, 1u) << r.summary();
}

/// Progress between faults: every lock granted this often, within this bound.
constexpr std::size_t progress_grants = 3;
milliseconds progress_limit() { return scaled(30s); }

// (a) Each member in turn is killed (SIGKILL) and started again, every lock granted again in
// between: the clients of each member move to another, and the leader's turn forces an election.
TEST(EnsembleFaults, RollingRestartOfAllThreeMembers) {
  ensemble_run run;
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress before the fault";
  for (int member = 1; member <= 3; ++member) {
    run.zk().kill(member);
    ASSERT_TRUE(run.await_progress(1, progress_limit())) << "no progress with member " << member << " down";
    run.zk().restart(member);
    ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress after restarting " << member;
  }
  expect_rode_through(run.finish());
}

// (b) The leader is killed: an election; it is restarted later, and rejoins as a follower.
TEST(EnsembleFaults, LeaderKilledAndRestarted) {
  ensemble_run run;
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress before the fault";
  const int leader = run.zk().kill_leader();
  std::cout << "killed the leader, member " << leader << std::endl;
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress after the leader's death";
  run.zk().restart(leader);
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress after its restart";
  expect_rode_through(run.finish());
}

// (c) The leader is stopped (SIGSTOP) for one and a half session timeouts: the followers elect
// another after syncLimit ticks (their clients are disconnected meanwhile), the leader's own
// clients hear nothing until they give up on it; resumed, it finds itself deposed and rejoins.
TEST(EnsembleFaults, LeaderPausedLongerThanTheSessionTimeout) {
  ensemble_run run;
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress before the fault";
  const int leader = run.zk().leader();
  run.zk().pause(leader);
  std::cout << "paused the leader, member " << leader << std::endl;
  std::this_thread::sleep_for(session_timeout() * 3 / 2);  // the fault's length, not a synchronisation
  run.zk().resume(leader);
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress after the pause";
  expect_rode_through(run.finish());
}

// (c') A follower, the one that serves the most contenders, is stopped as long: its clients hear
// nothing for 2/3 of their timeout, then move to another member, within the loss tolerance as a
// rule (so sessions need not end here), while the other two members keep the quorum.
TEST(EnsembleFaults, FollowerPausedLongerThanTheSessionTimeout) {
  ensemble_run run;
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress before the fault";
  const int leader = run.zk().leader();
  int busiest = 0;
  for (int m = 1; m <= 3; ++m)
    if (m != leader && (busiest == 0 || run.zk().connections(m) > run.zk().connections(busiest))) busiest = m;
  const long long served = run.zk().connections(busiest);
  run.zk().pause(busiest);
  std::cout << "paused follower " << busiest << " (" << served << " connections)" << std::endl;
  std::this_thread::sleep_for(session_timeout() * 3 / 2);  // the fault's length, not a synchronisation
  run.zk().resume(busiest);
  ASSERT_TRUE(run.await_progress(progress_grants, progress_limit())) << "no progress after the pause";
  expect_rode_through(run.finish(), false);
}

}  // namespace

// This binary is also the contender: `--zklock-chaos-child ...` runs a role instead of the tests.
int main(int argc, char** argv) {
  if (argc > 1 && std::string_view{argv[1]} == child_flag)
    return chaos::harness::child_main(argc, argv, {{"contender", role_contender}});
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
