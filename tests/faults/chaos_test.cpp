// SPDX-License-Identifier: Apache-2.0
// Chaos: four contender processes take one zklock::mutex in a loop, each with a short session,
// while the test pauses (SIGSTOP), expires or kills whoever holds it. Every grant, loss, release
// and fenced write is logged; chaos_checker.hpp then proves that fencing tokens strictly increase,
// no two live holders overlap, no accepted fenced write goes backwards and nothing is left under
// the lock node. The checker has teeth: the same harness run with a lock that also "holds" when
// second in line must fail it, and hand-made logs show each check firing.
//
// The binary re-executes itself as the contenders (`--zklock-chaos-child`, see main()). The fenced
// store is a thread of the test process serving a UNIX socket: it accepts a write only if its
// token is at least the highest it accepted, and logs each decision. ZKLOCK_FAULT_SCALE (default 1)
// stretches session timeouts and the run's duration on a slow machine.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iostream>
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
#include <tuple>
#include <utility>
#include <vector>
#include "chaos_checker.hpp"
#include "chaos_harness.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using namespace chaos::harness;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int writes_per_hold = 2;

using zkt::fault_scale;
using zkt::scaled;

/// The contenders' session timeout.
milliseconds session_timeout() { return scaled(1500ms); }

// ---------------------------------------------------------------------------------------------
// Child side: `<self> --zklock-chaos-child PARENT_PID contender WHO LOCK LOG SOCKET TIMEOUT_MS
// real|second-in-line SEED`. Stops when its stdin becomes readable (the parent closed it).


/// A deliberately broken lock for the checker's teeth: zklock's own queue, except that the
/// contender second in line believes it holds the lock too (a semaphore of two leases behind
/// zklock::mutex's interface).
class second_in_line_mutex {
 public:
  second_in_line_mutex(zklock::session& s, std::string path) : leases_(s, std::move(path), 2) {}

  void lock() { leases_.acquire(); }  // THE BUG: first or second in line counts as held
  void unlock() noexcept {
    std::error_code ec;
    leases_.release(ec);
  }
  std::int64_t fencing_token() const { return leases_.fencing_token(); }
  std::stop_token lost_token() const { return leases_.lost_token(); }
  bool still_owned() const noexcept { return leases_.still_owned(); }

 private:
  zklock::counting_semaphore leases_;
};

/// The semaphore of the permits chaos: N = 4, and process `who` takes 1 + who % 3 permits at once
/// (2, 3, 1, 2, 3, ...: one lease of many permits each, acquire(k)).
constexpr std::ptrdiff_t chaos_leases = 4;
std::ptrdiff_t chaos_permits(int who) { return 1 + who % 3; }

/// A contender taking its permits of one semaphore at once, behind the interface contend() uses.
class permits_lock {
 public:
  permits_lock(zklock::session& s, std::string path, std::ptrdiff_t k) : sem_(s, std::move(path), chaos_leases), k_(k) {}
  void lock() { sem_.acquire(k_); }
  void unlock() noexcept {
    std::error_code ec;
    sem_.release(ec);
  }
  std::int64_t fencing_token() const { return sem_.fencing_token(); }
  std::stop_token lost_token() const { return sem_.lost_token(); }
  bool still_owned() const noexcept { return sem_.still_owned(); }

 private:
  zklock::counting_semaphore sem_;
  std::ptrdiff_t k_;
};

struct contender_args {
  int who = 0;
  std::string lock, log, socket;
  milliseconds timeout{1500};
  bool broken = false;
  bool permits = false;  // takes chaos_permits(who) of a semaphore's chaos_leases
  std::uint64_t seed = 0;
};


template <class Lock>
void contend(zklock::session& s, Lock& m, const contender_args& a, const event_log& log, store_client& store) {
  std::mt19937_64 rng{a.seed};
  std::uniform_int_distribution<int> work_ms{5, 40};
  const std::string who = std::to_string(a.who);
  while (!stop_requested()) {
    log.line("ACQUIRE " + who + " " + std::to_string(mono_ns()));
    try {
      m.lock();
    } catch (const std::system_error& e) {  // e.g. the session expired while we waited
      log.line("NOTE " + who + " lock() failed: " + e.what());
      (void)s.wait_for(zklock::session_state::connected, 15s);  // re-established by itself
      continue;
    }
    const std::int64_t token = m.fencing_token();
    log.line("GRANT " + who + " " + std::to_string(token) + " " + std::to_string(mono_ns()) + " " +
             std::to_string(s.id()) + " " + to_hex(zkt::session_password(s)));
    {
      std::stop_callback on_loss{m.lost_token(), lost_logger{&log, a.who, token}};
      for (int i = 0; i < writes_per_hold; ++i) {
        std::this_thread::sleep_for(milliseconds{work_ms(rng)});  // stands for work under the lock
        if (!m.still_owned()) break;
        if (!store.write(a.who, token)) break;  // fenced out: a newer holder wrote already
      }
      log.line("RELEASE " + who + " " + std::to_string(token) + " " + std::to_string(mono_ns()));
    }
    m.unlock();
  }
}

int role_contender(const std::vector<std::string>& v) {
  contender_args a;
  a.who = std::stoi(v.at(0));
  a.lock = v.at(1);
  a.log = v.at(2);
  a.socket = v.at(3);
  a.timeout = milliseconds{std::stol(v.at(4))};
  a.broken = v.at(5) == "second-in-line";
  a.permits = v.at(5) == "permits";
  a.seed = std::stoull(v.at(6));
  const char* c = std::getenv("ZKLOCK_TEST_ZK");
  if (!c || !*c) throw std::runtime_error("ZKLOCK_TEST_ZK is not set");
  zklock::session_options o;
  o.connect = c;
  o.session_timeout = a.timeout;
  o.connect_timeout = 15s;
  zklock::session s{o};
  event_log log{a.log};
  store_client store{a.socket};
  if (a.broken) {
    second_in_line_mutex m{s, a.lock};
    contend(s, m, a, log, store);
  } else if (a.permits) {
    permits_lock m{s, a.lock, chaos_permits(a.who)};
    contend(s, m, a, log, store);
  } else {
    zklock::mutex m{s, a.lock};
    contend(s, m, a, log, store);
  }
  return 0;
}

int child_main(int argc, char** argv) {
  return chaos::harness::child_main(argc, argv, {{"contender", role_contender}});
}

// ---------------------------------------------------------------------------------------------
// Parent side.


/// The last GRANT of a contender log that no RELEASE or LOST has ended yet.
struct open_grant {
  std::int64_t token = 0;
  std::int64_t session = 0;
  std::string password;
};

std::optional<open_grant> holding(const std::string& log) {
  std::optional<open_grant> g;
  for (const auto& line : read_lines(log)) {
    char tag[16] = {};
    long long who = 0, token = 0, t = 0, sid = 0;
    char pw[64] = {};
    const int n = std::sscanf(line.c_str(), "%15s %lld %lld %lld %lld %63s", tag, &who, &token, &t, &sid, pw);
    if (n >= 6 && std::string_view{tag} == "GRANT") {
      g = open_grant{token, sid, from_hex(pw)};
    } else if (n >= 3 && g && g->token == token &&
               (std::string_view{tag} == "RELEASE" || std::string_view{tag} == "LOST")) {
      g.reset();
    }
  }
  return g;
}

/// Returns: whether a child of `lock` belongs to session `sid` (the server's view).
bool session_has_node(const std::string& lock, std::int64_t sid) {
  for (const auto& k : zkt::children(lock)) {
    const auto st = zkt::stat_node(lock + "/" + k);
    if (st.exists && st.ephemeral_owner == sid) return true;
  }
  return false;
}

/// Returns: the EXPIRE events of `injector` whose contender did not hold the lock again in a new
/// session (the next GRANT after the expiry must name another session id).
std::vector<std::string> unrecovered_expiries(const std::vector<std::string>& injector,
                                              const std::vector<std::string>& logs) {
  std::vector<std::tuple<int, std::int64_t, std::int64_t>> grants;  // who, t, session
  for (const auto& log : logs)
    for (const auto& line : read_lines(log)) {
      char tag[16] = {};
      int who = 0;
      long long token = 0, t = 0, sid = 0;
      if (std::sscanf(line.c_str(), "%15s %d %lld %lld %lld", tag, &who, &token, &t, &sid) == 5 &&
          std::string_view{tag} == "GRANT")
        grants.emplace_back(who, t, sid);
    }
  std::sort(grants.begin(), grants.end(), [](const auto& a, const auto& b) { return std::get<1>(a) < std::get<1>(b); });
  std::vector<std::string> out;
  for (const auto& line : injector) {
    int who = 0;
    long long t = 0;
    if (std::sscanf(line.c_str(), "EXPIRE %d %lld", &who, &t) != 2) continue;
    std::optional<std::int64_t> before, after;
    for (const auto& [w, gt, sid] : grants) {
      if (w != who) continue;
      if (gt < t) before = sid;
      else if (!after) after = sid;
    }
    if (!after || after == before) out.push_back(line + (after ? " (held again in the expired session)" : " (never held again)"));
  }
  return out;
}

enum class lock_kind { real, second_in_line, permits };

struct run_result {
  chaos::report report;
  std::map<int, std::size_t> grants_by_who;  ///< each process's grants
  std::vector<std::string> problems;       ///< harness trouble: children that failed, timeouts
  std::vector<std::string> not_recovered;  ///< expiries not followed by a hold in a new session
  std::string log_dir;                     ///< kept when ZKLOCK_CHAOS_KEEP_LOGS is set
};

/// Runs the chaos harness for `duration`: 4 contenders with `kind` locks, faults injected into
/// the holder, a quiet tail (no faults) for recovery, a clean shutdown, then the checker.
run_result run_chaos(lock_kind kind, milliseconds duration) {
  constexpr int procs = 4;
  enum class action { short_pause, long_pause, expire, kill };
  run_result out;
  zkt::private_server zk{1, 100};
  temp_dir dir;
  dir.keep = std::getenv("ZKLOCK_CHAOS_KEEP_LOGS") != nullptr;
  out.log_dir = dir.path.string();
  const std::string lock = zkt::unique_path("chaos");
  const milliseconds timeout = session_timeout();
  const std::uint64_t seed = std::random_device{}();
  std::mt19937_64 rng{seed};
  std::cout << "chaos run: "
            << (kind == lock_kind::real              ? "zklock::mutex"
                : kind == lock_kind::permits ? "zklock::counting_semaphore of 4, acquire(1..3)"
                                             : "second-in-line lock")
            << ", session timeout " << timeout.count() << " ms, " << duration.count() << " ms, seed " << seed
            << ", lock " << lock << std::endl;

  fenced_store store{(dir.path / "store.sock").string()};
  struct kid {
    int who;
    std::string log;
    std::unique_ptr<child_process> proc;
  };
  std::vector<kid> kids;
  std::vector<std::string> logs;
  std::vector<std::string> injector;  // the fault injector's own events
  int next_who = 1;
  auto spawn = [&] {
    const int who = next_who++;
    const std::string log = (dir.path / ("contender-" + std::to_string(who) + ".log")).string();
    logs.push_back(log);
    kids.push_back({who, log,
                    std::make_unique<child_process>(std::vector<std::string>{
                        "contender", std::to_string(who), lock, log, store.socket_path(),
                        std::to_string(timeout.count()),
                        kind == lock_kind::real ? "real" : kind == lock_kind::permits ? "permits" : "second-in-line",
                        std::to_string(rng())})});
  };
  for (int i = 0; i < procs; ++i) spawn();

  auto at = [](int who, std::int64_t t) { return std::to_string(who) + " " + std::to_string(t); };
  auto ms_between = [&](double lo, double hi) {
    return milliseconds{static_cast<std::int64_t>(std::uniform_real_distribution<double>{lo, hi}(rng) *
                                                  static_cast<double>(timeout.count()))};
  };
  const auto start = steady_clock::now();
  const auto chaos_until = start + duration - 3 * timeout;  // then a quiet tail: recovery
  std::vector<action> bag;
  while (steady_clock::now() < chaos_until) {
    std::this_thread::sleep_for(ms_between(0.15, 0.5));  // pacing of the chaos loop
    // The current holder: the latest open grant among the live contenders.
    kid* victim = nullptr;
    std::optional<open_grant> grant;
    for (auto& k : kids)
      if (auto g = holding(k.log); g && (!grant || g->token > grant->token)) {
        grant = g;
        victim = &k;
      }
    if (!victim) continue;
    if (bag.empty()) {
      bag = {action::short_pause, action::long_pause, action::expire, action::kill};
      std::shuffle(bag.begin(), bag.end(), rng);
    }
    const action a = bag.back();
    if (!victim->proc->stop()) {
      const auto st = victim->proc->wait(0ms);
      out.problems.push_back("contender " + std::to_string(victim->who) + " died on its own: " +
                             (st ? describe(*st) : std::string{"?"}));
      kids.erase(kids.begin() + (victim - kids.data()));
      spawn();
      continue;
    }
    const std::int64_t stopped = mono_ns();
    const auto still = holding(victim->log);
    if (!still || still->token != grant->token) {  // it moved on before the stop landed
      victim->proc->resume();
      injector.push_back("PAUSE " + at(victim->who, stopped) + " " + std::to_string(mono_ns()) + " kept");
      continue;
    }
    bag.pop_back();
    switch (a) {
      case action::kill: {
        victim->proc->kill();
        injector.push_back("KILL " + at(victim->who, mono_ns()));
        kids.erase(kids.begin() + (victim - kids.data()));
        spawn();
        break;
      }
      case action::short_pause:
      case action::long_pause:
      case action::expire: {
        bool expired = false;
        if (a == action::short_pause) {
          std::this_thread::sleep_for(ms_between(0.2, 0.4));  // the fault: well within the timeout
        } else if (a == action::long_pause) {
          std::this_thread::sleep_for(ms_between(1.3, 2.0));  // the fault: longer than the timeout
          const auto limit = steady_clock::now() + 3 * timeout + 5s;  // the server expires it by itself
          while (session_has_node(lock, still->session) && steady_clock::now() < limit)
            std::this_thread::sleep_for(10ms);  // polling the server
        } else {
          expired = zkt::expire_session(still->session, still->password, 10s);
          if (!expired) out.problems.push_back("could not expire session " + std::to_string(still->session));
        }
        const bool lost = !session_has_node(lock, still->session);  // the server's view, while stopped
        const std::int64_t expired_at = mono_ns();
        victim->proc->resume();
        injector.push_back("PAUSE " + at(victim->who, stopped) + " " + std::to_string(mono_ns()) +
                           (lost ? " lost" : " kept"));
        if (expired) injector.push_back("EXPIRE " + at(victim->who, expired_at));
        break;
      }
    }
  }
  std::this_thread::sleep_until(start + duration);  // the quiet tail

  // Clean shutdown: each contender finishes its round and exits.
  for (auto& k : kids) k.proc->finish();
  for (auto& k : kids) {
    const auto st = k.proc->wait(60s);
    if (!st)
      out.problems.push_back("contender " + std::to_string(k.who) + " did not finish within 60 s");
    else if (!WIFEXITED(*st) || WEXITSTATUS(*st) != 0)
      out.problems.push_back("contender " + std::to_string(k.who) + ": " + describe(*st));
  }
  kids.clear();
  // A killed contender's node outlives it by a session timeout at most.
  const auto limit = steady_clock::now() + 3 * timeout + 5s;
  while (!zkt::children(lock).empty() && steady_clock::now() < limit) std::this_thread::sleep_for(10ms);  // polling
  const auto leftovers = zkt::children(lock);

  std::vector<std::string> events = injector;
  for (const auto& l : logs) {
    auto lines = read_lines(l);
    events.insert(events.end(), lines.begin(), lines.end());
  }
  const auto decisions = store.stop();
  if (dir.keep) {
    write_lines(dir.path / "injector.log", injector);
    write_lines(dir.path / "store.log", decisions);
  }
  chaos::sharing rule;
  if (kind == lock_kind::permits) {
    rule.leases = static_cast<std::size_t>(chaos_leases);
    for (int who = 1; who < next_who; ++who) rule.permits[who] = static_cast<std::size_t>(chaos_permits(who));
  }
  out.report = chaos::check(events, decisions, leftovers, rule);
  for (const auto& l : logs)
    for (const auto& line : read_lines(l)) {
      int who = 0;
      if (std::sscanf(line.c_str(), "GRANT %d", &who) == 1) ++out.grants_by_who[who];
    }
  out.not_recovered = unrecovered_expiries(injector, logs);
  std::cout << "chaos result: " << out.report.summary() << std::endl;
  return out;
}

// ---- the checker on hand-made logs -----------------------------------------------------------

std::string t(std::int64_t ms) { return std::to_string(ms * 1'000'000); }
std::string ev(std::string_view tag, int who, std::int64_t token, std::int64_t ms) {
  return std::string{tag} + " " + std::to_string(who) + " " + std::to_string(token) + " " + t(ms);
}

/// A clean run: 1 holds, 2 holds, 1 is paused (session kept) while holding, 3 is killed holding.
std::vector<std::string> clean_events() {
  return {"ACQUIRE 1 " + t(0),          ev("GRANT", 1, 100, 1) + " 7 00ff",
          "ACQUIRE 2 " + t(0),          ev("RELEASE", 1, 100, 10),
          "ACQUIRE 1 " + t(11),         ev("GRANT", 2, 101, 12),
          ev("RELEASE", 2, 101, 20),    ev("GRANT", 1, 102, 21),
          "PAUSE 1 " + t(22) + " " + t(25) + " kept",
          ev("RELEASE", 1, 102, 30),    "ACQUIRE 3 " + t(0),
          ev("GRANT", 3, 103, 31),      "KILL 3 " + t(40),
          "NOTE 2 lock() failed: whatever", ev("GRANT", 4, 104, 2000),
          ev("RELEASE", 4, 104, 2010)};
}
std::vector<std::string> clean_store() {
  return {ev("ACCEPT", 1, 100, 5), ev("ACCEPT", 2, 101, 15), ev("ACCEPT", 1, 102, 23), ev("ACCEPT", 1, 102, 24),
          ev("ACCEPT", 4, 104, 2005)};
}

TEST(ChaosChecker, CleanLogPasses) {
  const auto r = chaos::check(clean_events(), clean_store(), {});
  EXPECT_TRUE(r.ok()) << r.text();
  EXPECT_EQ(r.grants, 5u);
  EXPECT_EQ(r.live_grants, 5u);
  EXPECT_EQ(r.kills, 1u);
  EXPECT_EQ(r.pauses_kept, 1u);
  EXPECT_EQ(r.accepted, 5u);
}

TEST(ChaosChecker, OverlappingHoldersFail) {
  auto e = clean_events();
  e.push_back(ev("GRANT", 5, 105, 2005));  // while 4 holds (2000..2010)
  e.push_back(ev("RELEASE", 5, 105, 2020));
  const auto r = chaos::check(e, clean_store(), {});
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(r.has("overlap")) << r.text();
  EXPECT_EQ(r.overlaps, 1u);
}

TEST(ChaosChecker, AHoldEndsAtItsLossAndAtAKill) {
  // 1 is told of its loss at 10; 2 is granted at 11: fine. 3 is killed at 30; 4 granted at 31.
  const std::vector<std::string> e{ev("GRANT", 1, 1, 0), ev("LOST", 1, 1, 10), ev("GRANT", 2, 2, 11),
                                   ev("RELEASE", 2, 2, 20), ev("RELEASE", 1, 1, 25), ev("GRANT", 3, 3, 21),
                                   "KILL 3 " + t(30), ev("GRANT", 4, 4, 31), ev("RELEASE", 4, 4, 40)};
  const auto r = chaos::check(e, {}, {});
  EXPECT_TRUE(r.ok()) << r.text();
  EXPECT_EQ(r.lost_signals, 1u);
  // Told of the loss only after the next grant: overlap.
  const std::vector<std::string> late{ev("GRANT", 1, 1, 0), ev("GRANT", 2, 2, 11), ev("LOST", 1, 1, 12),
                                      ev("RELEASE", 2, 2, 20)};
  EXPECT_TRUE(chaos::check(late, {}, {}).has("overlap"));
}

TEST(ChaosChecker, APauseThatCostTheSessionEndsTheLiveTime) {
  // 1 holds from 0, is stopped 5..3000 and its session expires; 2 holds from 2000; 1 resumes
  // and only then hears of its loss (3001): no overlap of live time. Its late write is fenced.
  const std::vector<std::string> e{ev("GRANT", 1, 1, 0), "PAUSE 1 " + t(5) + " " + t(3000) + " lost",
                                   ev("GRANT", 2, 2, 2000), ev("LOST", 1, 1, 3001), ev("RELEASE", 1, 1, 3002),
                                   ev("RELEASE", 2, 2, 3010)};
  const std::vector<std::string> s{ev("ACCEPT", 2, 2, 2001), ev("REJECT", 1, 1, 3000)};
  const auto r = chaos::check(e, s, {});
  EXPECT_TRUE(r.ok()) << r.text();
  EXPECT_EQ(r.pauses_lost, 1u);
  EXPECT_EQ(r.rejected, 1u);
  // The same with a pause the session survived is an overlap: the pause excuses nothing.
  auto kept = e;
  kept[1] = "PAUSE 1 " + t(5) + " " + t(3000) + " kept";
  EXPECT_TRUE(chaos::check(kept, s, {}).has("overlap"));
}

TEST(ChaosChecker, AGrantAfterALossyPauseDuringTheAcquireIsTainted) {
  // 1 asks at 0, is stopped 1..3000 inside lock() and loses its session; 2 holds 2000..2500;
  // 1's lock() returns at 3001 with its old token: no live time, not an ordering violation.
  const std::vector<std::string> e{"ACQUIRE 1 " + t(0), "PAUSE 1 " + t(1) + " " + t(3000) + " lost",
                                   ev("GRANT", 2, 6, 2000), ev("RELEASE", 2, 6, 2500), ev("GRANT", 1, 5, 3001),
                                   ev("LOST", 1, 5, 3002), ev("RELEASE", 1, 5, 3003)};
  const auto r = chaos::check(e, {}, {});
  EXPECT_TRUE(r.ok()) << r.text();
  EXPECT_EQ(r.tainted_grants, 1u);
}

TEST(ChaosChecker, TokensThatDoNotIncreaseFail) {
  const std::vector<std::string> e{ev("GRANT", 1, 7, 0), ev("RELEASE", 1, 7, 10), ev("GRANT", 2, 7, 11),
                                   ev("RELEASE", 2, 7, 20), ev("GRANT", 3, 5, 21), ev("RELEASE", 3, 5, 30)};
  const auto r = chaos::check(e, {}, {});
  EXPECT_TRUE(r.has("tokens")) << r.text();
  EXPECT_EQ(std::count_if(r.violations.begin(), r.violations.end(),
                          [](const std::string& v) { return v.starts_with("tokens"); }),
            2);
}

TEST(ChaosChecker, AWriteThatGoesBackwardsFails) {
  auto s = clean_store();
  s.push_back(ev("ACCEPT", 2, 101, 2100));  // accepted after 104
  const auto r = chaos::check(clean_events(), s, {});
  EXPECT_TRUE(r.has("goes backwards")) << r.text();
}

TEST(ChaosChecker, UndeservedRejectionsForgedTokensLeftoversAndGarbageFail) {
  auto s = clean_store();
  s.insert(s.begin() + 1, ev("REJECT", 2, 101, 14));  // 101 > 100: was not stale
  EXPECT_TRUE(chaos::check(clean_events(), s, {}).has("not stale"));
  EXPECT_TRUE(chaos::check(clean_events(), {ev("ACCEPT", 3, 999, 35)}, {}).has("never granted"));
  EXPECT_TRUE(chaos::check(clean_events(), clean_store(), {"_c_x-lock-0000000007"}).has("leftovers"));
  auto e = clean_events();
  e.push_back("GRANT 1 notanumber 5");
  EXPECT_TRUE(chaos::check(e, clean_store(), {}).has("malformed"));
  EXPECT_TRUE(chaos::check(clean_events(), {"BAD W x"}, {}).has("malformed"));
}

TEST(ChaosChecker, ReadersShareAWriterHoldsAlone) {
  const chaos::sharing rw{1, {1, 2}};  // 1 and 2 read, 3 and 4 write
  // Readers overlap each other; the writers come one at a time, between them; the readers'
  // tokens need not follow the grant order.
  const std::vector<std::string> e{ev("GRANT", 1, 9, 0),     ev("GRANT", 2, 8, 1),     ev("RELEASE", 1, 9, 10),
                                   ev("RELEASE", 2, 8, 11),  ev("GRANT", 3, 20, 12),   ev("RELEASE", 3, 20, 20),
                                   ev("GRANT", 4, 21, 21),   ev("RELEASE", 4, 21, 30), ev("GRANT", 1, 5, 31),
                                   ev("RELEASE", 1, 5, 40)};
  const auto r = chaos::check(e, {}, {}, rw);
  EXPECT_TRUE(r.ok()) << r.text();
  // A writer granted while a reader holds, a reader granted while a writer holds.
  auto w = e;
  w[4] = ev("GRANT", 3, 20, 5);
  EXPECT_TRUE(chaos::check(w, {}, {}, rw).has("a writer")) << chaos::check(w, {}, {}, rw).text();
  auto rd = e;
  rd[8] = ev("GRANT", 1, 5, 25);
  EXPECT_TRUE(chaos::check(rd, {}, {}, rw).has("a reader under a writer"));
  // The writers' tokens must still increase.
  auto tok = e;
  tok[6] = ev("GRANT", 4, 19, 21);
  tok[7] = ev("RELEASE", 4, 19, 30);
  EXPECT_TRUE(chaos::check(tok, {}, {}, rw).has("tokens"));
}

TEST(ChaosChecker, ASemaphoreHoldsNoMoreThanItsLeases) {
  const chaos::sharing two{2, {}};
  const std::vector<std::string> e{ev("GRANT", 1, 3, 0), ev("GRANT", 2, 2, 1), ev("RELEASE", 1, 3, 10),
                                   ev("GRANT", 3, 1, 11), ev("RELEASE", 2, 2, 20), ev("RELEASE", 3, 1, 21)};
  EXPECT_TRUE(chaos::check(e, {}, {}, two).ok()) << chaos::check(e, {}, {}, two).text();
  auto three = e;
  three[3] = ev("GRANT", 3, 1, 5);  // while 1 and 2 hold both leases
  const auto r = chaos::check(three, {}, {}, two);
  EXPECT_TRUE(r.has("holds of 2 leases were live")) << r.text();
  EXPECT_EQ(r.overlaps, 1u);
  // The same log as a mutex overlaps.
  EXPECT_TRUE(chaos::check(e, {}, {}).has("overlap"));
}

TEST(ChaosChecker, LeasesOfManyPermitsCountTheirPermits) {
  chaos::sharing four{4, {}, {{1, 3}, {2, 1}, {3, 2}}};  // process 1 takes 3 permits, 2 one, 3 two
  const std::vector<std::string> e{ev("GRANT", 1, 3, 0), ev("GRANT", 2, 4, 1), ev("RELEASE", 2, 4, 5),
                                   ev("RELEASE", 1, 3, 10), ev("GRANT", 3, 5, 11), ev("RELEASE", 3, 5, 20)};
  EXPECT_TRUE(chaos::check(e, {}, {}, four).ok()) << chaos::check(e, {}, {}, four).text();
  auto over = e;
  over[4] = ev("GRANT", 3, 5, 6);  // 2 permits while process 1 still holds 3
  const auto r = chaos::check(over, {}, {}, four);
  EXPECT_TRUE(r.has("(5 permits with its own)")) << r.text();
  EXPECT_EQ(r.overlaps, 1u);
}

// ---- the real thing ---------------------------------------------------------------------------

// About 30 s: four processes contend on one zklock::mutex while the holder is paused (shorter or
// longer than its session timeout), expired or killed (and replaced).
TEST(Chaos, FourProcessesUnderPausesExpiriesAndKillsKeepTheLockSafe) {
  const auto r = run_chaos(lock_kind::real, scaled(30s));
  for (const auto& p : r.problems) ADD_FAILURE() << p;
  EXPECT_TRUE(r.report.ok()) << r.report.text() << "\nlogs: " << r.log_dir;
  // Real chaos happened, and the lock kept working through it.
  EXPECT_GE(r.report.pauses_kept + r.report.pauses_lost, 2u) << r.report.summary();
  EXPECT_GE(r.report.pauses_lost, 1u) << r.report.summary();
  EXPECT_GE(r.report.expiries, 1u) << r.report.summary();
  EXPECT_GE(r.report.kills, 1u) << r.report.summary();
  EXPECT_GE(r.report.grants, 50u) << r.report.summary();
  EXPECT_GE(r.report.accepted, 50u) << r.report.summary();
  // Expired contenders recovered by themselves: a new session, and lock() again.
  for (const auto& e : r.not_recovered) ADD_FAILURE() << "no recovery after " << e;
}

// About 20 s: four processes take 1, 2 or 3 permits at once of one semaphore of 4 (acquire(n))
// under the same faults: never more than 4 permits live, and every size of lease keeps being
// granted (a lease of 3 is not starved by the smaller ones behind it).
// Where it can fail: a wrong grant is a logic error, which the unsanitized preset finds as well as
// any; under the sanitizers the mutex's chaos drives the same fault paths (and the typed
// Semaphore.ManyPermits* test the same code in threads), so this one runs unsanitized only.
TEST(Chaos, ProcessesTakingManyPermitsAtOnceNeverExceedNUnderFaults) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the permits' chaos runs in the unsanitized preset (see above)";
#endif
#endif
  const auto r = run_chaos(lock_kind::permits, scaled(20s));
  for (const auto& p : r.problems) ADD_FAILURE() << p;
  EXPECT_TRUE(r.report.ok()) << r.report.text() << "\nlogs: " << r.log_dir;
  EXPECT_GE(r.report.pauses_lost + r.report.expiries + r.report.kills, 1u) << r.report.summary();
  EXPECT_GE(r.report.grants, 30u) << r.report.summary();
  std::map<std::ptrdiff_t, std::size_t> by_size;
  for (const auto& [who, n] : r.grants_by_who) by_size[chaos_permits(who)] += n;
  for (std::ptrdiff_t k = 1; k <= 3; ++k)
    EXPECT_GE(by_size[k], 3u) << "leases of " << k << " permits were granted " << by_size[k] << " times";
  for (const auto& e : r.not_recovered) ADD_FAILURE() << "no recovery after " << e;
}

// The checker's teeth: the same harness, with contenders whose lock also "holds" when second in
// line, must be caught. Where it can fail: in the checker and the broken lock, both this test's own
// logic; the sanitizers would find nothing here that the mutex's chaos does not drive through the
// same fault paths, so this one runs unsanitized only.
TEST(Chaos, ALockThatGrantsSecondInLineFailsTheChecker) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "the checker's teeth are tested in the unsanitized preset (see above)";
#endif
#endif
  const auto r = run_chaos(lock_kind::second_in_line, scaled(10s));
  for (const auto& p : r.problems) ADD_FAILURE() << p;
  EXPECT_FALSE(r.report.ok()) << "the checker passed a broken lock: " << r.report.summary();
  EXPECT_TRUE(r.report.has("overlap")) << r.report.text();
  std::cout << "broken lock caught: " << r.report.overlaps << " overlapping pairs of holds; first: "
            << (r.report.violations.empty() ? std::string{"-"} : r.report.violations.front()) << std::endl;
}

}  // namespace

// This binary is also the contender: `--zklock-chaos-child ...` runs a role instead of the tests.
int main(int argc, char** argv) {
  if (argc > 1 && std::string_view{argv[1]} == child_flag) return child_main(argc, argv);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
