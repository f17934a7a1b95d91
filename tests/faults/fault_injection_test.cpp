// SPDX-License-Identifier: Apache-2.0
// Safety under injected faults: a holder process SIGKILLed, a holder paused while its session is
// expired (fencing), a create whose reply is lost (protected creation), the ensemble's leader
// killed during contention, the quorum lost for longer than the session timeout, and a holder cut
// off by a TCP proxy. Each test runs its own server or ensemble. Every session timeout and fault
// duration is multiplied by ZKLOCK_FAULT_SCALE (default 1.0) for slow machines. The binary
// re-executes itself as the holder process of the first two tests (see main() at the bottom).
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zookeeper/zookeeper.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "async_probe.hpp"
#include "child_process.hpp"
#include "posix_io.hpp"
#include "scratch_dir.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr std::string_view child_flag = "--zklock-fault-child";

// ---- timing -------------------------------------------------------------------------------------

using zkt::fault_scale;
using zkt::scaled;

long long ms_between(steady_clock::time_point a, steady_clock::time_point b) {
  return std::chrono::duration_cast<milliseconds>(b - a).count();
}

/// Effects: prints a measurement (and records it in the XML report); `unit` "ms" or "".
void report(const std::string& key, long long value, std::string_view unit = "ms") {
  std::printf("[ measured ] %s = %lld%s%.*s (scale %.2f)\n", key.c_str(), value, unit.empty() ? "" : " ",
              static_cast<int>(unit.size()), unit.data(), fault_scale());
  std::fflush(stdout);
  ::testing::Test::RecordProperty(key, std::to_string(value));
}

/// A blocking lock() that gives up (throws lock_timeout) instead of hanging a broken test, owned by
/// the object so that the test thread may inspect or release what a helper thread acquired.
struct bounded_policies : zklock::default_policies {
  using reentrancy = zklock::reentrancy_counted_owner;
  using timeout = zklock::timeout_throw_after<300'000>;
};
using bounded_mutex = zklock::basic_mutex<bounded_policies>;

// ---- small system helpers (tests/support) --------------------------------------------------------

using zkt::describe;
using zkt::from_hex;
using zkt::line_reader;
using zkt::throw_errno;
using zkt::to_hex;
using zkt::write_all;
using process = zkt::child_process;

/// Returns: this test binary running ROLE ARGS... as a child (see child_main), with pipes to its
/// stdin and from its stdout.
std::unique_ptr<process> spawn_self(const std::vector<std::string>& role_args) {
  return std::make_unique<process>(process::self(child_flag, role_args));
}

/// Returns: options for a helper process whose stdin and stdout are /dev/null.
zkt::spawn_options quiet() {
  zkt::spawn_options o;
  o.in = o.out = zkt::stream::null;
  return o;
}

std::string tools_dir() {
  const char* t = std::getenv("ZKLOCK_TOOLS");
  return t && *t ? t : ZKLOCK_SOURCE_DIR "/tools";
}

/// A fresh directory under the system temp dir, removed with its contents.
struct temp_dir : zkt::scratch_dir {
  temp_dir() : scratch_dir("zklock-faults") {}
};

// ---- TCP ----------------------------------------------------------------------------------------

/// Returns: the client ports of a connect string "127.0.0.1:p1,127.0.0.1:p2,...", in node order.
std::vector<int> ports_of(const std::string& connect) {
  std::vector<int> out;
  std::stringstream in{connect};
  for (std::string hp; std::getline(in, hp, ',');) out.push_back(std::stoi(hp.substr(hp.rfind(':') + 1)));
  return out;
}

/// Returns: the session ids connected to the server at `port` (from `cons`).
std::vector<std::int64_t> sessions_at(int port) {
  std::vector<std::int64_t> out;
  const std::string cons = zkt::four_letter(port, "cons");
  for (std::size_t pos = 0; (pos = cons.find("sid=0x", pos)) != std::string::npos;) {
    pos += 6;
    out.push_back(static_cast<std::int64_t>(std::strtoull(cons.c_str() + pos, nullptr, 16)));
  }
  return out;
}

// ---- a raw ZooKeeper handle (what the server really has, and session hijacking) -------------------

extern "C" void fault_quiet_log(const char*) {}

extern "C" void fault_raw_watcher(zhandle_t*, int type, int state, const char*, void* ctx);

/// A C-client handle outside zklock. With `id`, it takes over that session (used to expire it).
class raw_client {
 public:
  explicit raw_client(const std::string& connect, const clientid_t* id = nullptr) {
    zh_ = zookeeper_init2(connect.c_str(), &fault_raw_watcher, 10'000, id, this, 0, &fault_quiet_log);
    if (!zh_) throw std::runtime_error("zookeeper_init2 failed for " + connect);
  }
  ~raw_client() { zookeeper_close(zh_); }  // joins the client's threads: no callback after this
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  /// Returns: whether the handle connected (or learnt that its session expired) within `limit`.
  bool await_answer(milliseconds limit) {
    std::unique_lock lk{mu_};
    return cv_.wait_for(lk, limit, [&] { return state_ == ZOO_CONNECTED_STATE || state_ == ZOO_EXPIRED_SESSION_STATE; });
  }

  /// Returns: the children of `path` (empty if it is missing), or nullopt if the call failed. On
  /// an ensemble the member this handle talks to first catches up with the leader (a "sync"), so
  /// the answer includes every write any session saw acknowledged before.
  std::optional<std::vector<std::string>> children(const std::string& path) {
    if (!zkt::sync_handle(zh_)) return std::nullopt;
    String_vector kids{};
    const int rc = zoo_get_children(zh_, path.c_str(), 0, &kids);
    if (rc == ZNONODE) return std::vector<std::string>{};
    if (rc != ZOK) return std::nullopt;
    std::vector<std::string> out;
    for (int i = 0; i < kids.count; ++i) out.emplace_back(kids.data[i]);
    deallocate_String_vector(&kids);
    return out;
  }

  void on_state(int state) {
    {
      std::lock_guard lk{mu_};
      state_ = state;
    }
    cv_.notify_all();
  }

 private:
  zhandle_t* zh_ = nullptr;
  std::mutex mu_;
  std::condition_variable cv_;
  int state_ = 0;
};

extern "C" void fault_raw_watcher(zhandle_t*, int type, int state, const char*, void* ctx) {
  if (type == ZOO_SESSION_EVENT && ctx) static_cast<raw_client*>(ctx)->on_state(state);
}

/// Effects: ends session `sid` on the server: a second handle takes it over with its password,
/// then closes it. Only safe against a client that cannot answer (its process stopped): a live
/// one would take its session back. Returns: whether the second handle got an answer.
bool expire_session(const std::string& connect, std::int64_t sid, const std::string& password) {
  clientid_t id{};
  id.client_id = sid;
  std::memcpy(id.passwd, password.data(), std::min(password.size(), sizeof id.passwd));
  raw_client hijack{connect, &id};
  return hijack.await_answer(30s);  // then the destructor's close ends the session
}

/// Returns: the children of `path`, asking again (for at most `limit`) while the ensemble does not answer.
std::vector<std::string> children_retry(raw_client& c, const std::string& path, milliseconds limit = 30s) {
  const auto until = steady_clock::now() + limit;
  for (;;) {
    if (auto kids = c.children(path)) return *kids;
    if (steady_clock::now() > until) throw std::runtime_error("no answer listing " + path);
    std::this_thread::sleep_for(20ms);  // retry interval while the ensemble recovers
  }
}

// ---- the TCP proxy (tools/zkproxy.py) -------------------------------------------------------------

/// tools/zkproxy.py in front of one server, controlled over its control port.
class zk_proxy {
 public:
  explicit zk_proxy(const std::string& target) {
    const auto ready = (dir_.path / "ready").string();
    proc_ = std::make_unique<process>(
        std::vector<std::string>{"python3", tools_dir() + "/zkproxy.py", "--listen", "0", "--target", target, "--ctrl",
                                 "0", "--ready-file", ready, "--owner", std::to_string(::getpid())},
        quiet());
    const auto until = steady_clock::now() + 30s;
    while (!std::filesystem::exists(ready)) {
      if (proc_->exited() || steady_clock::now() > until) throw std::runtime_error("zkproxy.py did not start");
      std::this_thread::sleep_for(5ms);  // polling for another process's ready file
    }
    std::ifstream in{ready};
    int ctrl = 0;
    in >> port_ >> ctrl;
    ctrl_ = zkt::dial("127.0.0.1", std::to_string(ctrl), 10s);
    if (ctrl_ < 0) throw std::runtime_error("cannot reach zkproxy.py's control port");
    replies_.reset(ctrl_);
  }
  ~zk_proxy() {
    if (ctrl_ >= 0) ::close(ctrl_);
    proc_->signal(SIGTERM);
    if (!proc_->wait(10s)) proc_->signal(SIGKILL);  // the destructor reaps it
  }
  zk_proxy(const zk_proxy&) = delete;
  zk_proxy& operator=(const zk_proxy&) = delete;

  /// Returns: the connect string that goes through the proxy.
  std::string connect() const { return "127.0.0.1:" + std::to_string(port_); }

  /// Effects: sends `cmd` ("cut", "blackhole", "holdnew", "heal", "held OP"). Returns: the proxy's answer.
  std::string command(const std::string& cmd) {
    const std::string line = cmd + "\n";
    if (::send(ctrl_, line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
      throw_errno("zkproxy control");
    return replies_.next(10s).value_or("(no answer)");
  }

 private:
  temp_dir dir_;
  std::unique_ptr<process> proc_;
  int port_ = 0;
  int ctrl_ = -1;
  line_reader replies_;
};

// ---- loss signals ---------------------------------------------------------------------------------

/// Records when a stop token fires.
class loss_clock {
 public:
  explicit loss_clock(std::stop_token t) : cb_(std::move(t), fire{this}) {}
  bool wait(milliseconds limit) {
    std::unique_lock lk{mu_};
    return cv_.wait_for(lk, limit, [&] { return at_.has_value(); });
  }
  bool fired() const {
    std::lock_guard lk{mu_};
    return at_.has_value();
  }
  /// Returns: when it fired (precondition: fired()).
  steady_clock::time_point at() const {
    std::lock_guard lk{mu_};
    return at_.value();
  }

 private:
  struct fire {
    loss_clock* p;
    void operator()() const noexcept {
      {
        std::lock_guard lk{p->mu_};
        p->at_ = steady_clock::now();
      }
      p->cv_.notify_all();
    }
  };
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<steady_clock::time_point> at_;
  std::stop_callback<fire> cb_;  // last: may fire while constructed
};

/// The outcome of a lock() run on a helper thread.
struct grant {
  bool held = false;
  steady_clock::time_point at{};
  std::string error;
};

/// Effects: runs m.lock() on a new thread. Returns: its outcome, when it has one.
template <class Mutex>
std::future<grant> lock_async(Mutex& m) {
  return std::async(std::launch::async, [&m] {
    grant g;
    try {
      m.lock();
      g.held = true;
    } catch (const std::exception& e) {
      g.error = e.what();
    }
    g.at = steady_clock::now();
    return g;
  });
}

/// Kills a process when the scope ends: a test that fails early must not leave a helper thread
/// waiting (in a lock() that throws only after minutes) for a holder that would never go.
struct kill_at_exit {
  process& p;
  ~kill_at_exit() { p.kill_quietly(); }
};

/// Returns: whether the server lists `n` children of `path` within `limit` (a queued contender is one).
bool await_children(const std::string& path, std::size_t n, milliseconds limit = 30s) {
  const auto until = steady_clock::now() + limit;
  while (zkt::children(path).size() != n) {
    if (steady_clock::now() > until) return false;
    std::this_thread::sleep_for(2ms);  // polling the server, not a synchronisation
  }
  return true;
}

zklock::session_options opts(const std::string& connect, milliseconds session_timeout) {
  zklock::session_options o;
  o.connect = connect;
  o.session_timeout = session_timeout;
  o.connect_timeout = 15s;
  return o;
}

/// A fenced store (the resource the lock protects): accepts a write only with a fencing token at
/// least as high as the highest it has seen.
class fenced_store {
 public:
  bool write(std::int64_t token, const std::string& value) {
    std::lock_guard lk{mu_};
    if (token < highest_) return false;
    highest_ = token;
    value_ = value;
    return true;
  }
  std::string value() const {
    std::lock_guard lk{mu_};
    return value_;
  }

 private:
  mutable std::mutex mu_;
  std::int64_t highest_ = 0;
  std::string value_;
};

// ---------------------------------------------------------------------------------------------------
// Child side: `<self> --zklock-fault-child PARENT_PID ROLE ARGS...`, one report line each on stdout.

std::mutex g_say_mu;
void say(const std::string& line) {
  std::lock_guard lk{g_say_mu};
  write_all(STDOUT_FILENO, line + "\n");
}

// hold CONNECT LOCK TIMEOUT_MS: takes a zklock::mutex, says "held TOKEN SID PASSWORD_HEX", says
// "lost" when its lost_token() fires. Commands on stdin: "write VALUE" is answered "write TOKEN
// VALUE" (a write to the fenced store with the token of its hold, whether or not it still holds:
// like a process paused between its check and its write); "guarded NODE VALUE" sets NODE to VALUE
// with a guarded write of its hold (session::commit_if_held), answered "guarded ok" or "guarded
// refused CODE"; "plain NODE VALUE" sets it without the guard (on the next session if this one
// ended), answered "plain ok" or "plain refused CODE"; "owned" is answered "owned 0|1". Ends on
// end of file.
int role_hold(const std::vector<std::string>& a) {
  zklock::session s{opts(a.at(0), milliseconds{std::stoll(a.at(2))})};
  zklock::mutex m{s, a.at(1)};
  m.lock();
  const std::int64_t token = m.fencing_token();
  const zklock::fence fence = m.fence();
  const auto lost = m.lost_token();
  std::stop_callback report_loss{lost, [] { say("lost"); }};
  say("held " + std::to_string(token) + " " + std::to_string(s.id()) + " " + to_hex(zkt::session_password(s)));
  line_reader in{STDIN_FILENO};
  while (const auto cmd = in.next(24h)) {
    if (cmd->starts_with("write ")) say("write " + std::to_string(token) + " " + cmd->substr(6));
    else if (*cmd == "owned") say(std::string{"owned "} + (m.still_owned() ? "1" : "0"));
    else if (cmd->starts_with("plain ")) {
      const auto sp = cmd->find(' ', 6);
      for (int attempt = 0;; ++attempt) {
        try {
          s.set(cmd->substr(6, sp - 6), cmd->substr(sp + 1));
          say("plain ok");
        } catch (const std::system_error& e) {
          if (e.code() == zklock::errc::session_expired && attempt == 0 &&
              s.wait_for(zklock::session_state::connected, 30s))
            continue;  // its next session writes it
          say("plain refused " + e.code().message());
        }
        break;
      }
    } else if (cmd->starts_with("guarded ")) {
      const auto sp = cmd->find(' ', 8);
      try {
        s.commit_if_held(fence, {zklock::op::set(cmd->substr(8, sp - 8), cmd->substr(sp + 1))});
        say("guarded ok");
      } catch (const std::system_error& e) {
        say("guarded refused " + e.code().message());
      }
    }
  }
  m.unlock();
  return 0;
}

int child_main(int argc, char** argv) {
  return zkt::child_main(argc, argv, "zklock fault child", {{"hold", role_hold}});
}

/// What a holder child said first: "held TOKEN SID PASSWORD_HEX".
struct child_hold {
  std::int64_t token = 0;
  std::int64_t sid = 0;
  std::string password;
};

std::optional<child_hold> parse_held(const std::optional<std::string>& line) {
  if (!line) return std::nullopt;
  std::istringstream in{*line};
  std::string word, hex;
  child_hold h;
  if (!(in >> word >> h.token >> h.sid >> hex) || word != "held") return std::nullopt;
  h.password = from_hex(hex);
  return h;
}

// ---------------------------------------------------------------------------------------------------
// 1. A holder process SIGKILLed: a waiter in another process gets the lock once the holder's
// session times out, never before the kill.
TEST(FaultInjection, KilledHolderPassesTheLockAfterTheSessionTimeout) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("fi-kill");
  const auto timeout = scaled(2000ms);
  auto holder = spawn_self({"hold", zk.connect(), path, std::to_string(timeout.count())});
  const auto held = parse_held(holder->read_line(60s));
  ASSERT_TRUE(held) << "the holder did not report its hold";

  zklock::session s{opts(zk.connect(), scaled(4000ms))};
  bounded_mutex m{s, path};
  const bool taken_while_held = m.try_lock();
  EXPECT_FALSE(taken_while_held) << "try_lock succeeded while another process held the lock";
  if (taken_while_held) m.unlock();

  auto waiter = lock_async(m);
  const kill_at_exit cleanup{*holder};
  ASSERT_TRUE(await_children(path, 2)) << "the waiter did not queue";
  ASSERT_EQ(waiter.wait_for(0s), std::future_status::timeout) << "granted while the holder lives";

  const auto killed_at = steady_clock::now();
  holder->signal(SIGKILL);
  const auto st = holder->wait(30s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(WIFSIGNALED(*st) && WTERMSIG(*st) == SIGKILL) << describe(*st);

  ASSERT_EQ(waiter.wait_for(timeout + scaled(30s)), std::future_status::ready) << "never granted";
  const grant g = waiter.get();
  ASSERT_TRUE(g.held) << g.error;
  const auto after_kill = ms_between(killed_at, g.at);
  report("kill_to_grant", after_kill);
  EXPECT_GT(after_kill, 0) << "granted before the holder was killed";
  // The server keeps a killed client's session for its timeout (less at most the ping interval,
  // a third of it): a grant much sooner would mean the lock passed on while the session lived.
  // The client pings after a third of the timeout without traffic, so the server heard from it at
  // most T/3 before the kill and expires it T after that: not before 2T/3 (T/2 leaves room for
  // the server's tick rounding). And about the session timeout, not much later.
  EXPECT_GE(after_kill, timeout.count() / 2) << "granted long before the holder's session could expire";
  EXPECT_LE(after_kill, (timeout + scaled(3s)).count()) << "the lock took too long to pass on";
  EXPECT_GT(m.fencing_token(), held->token);
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

// 2. A holder paused (SIGSTOP) while its session is expired: after SIGCONT its lost_token() fires,
// the waiter has the lock meanwhile, the old holder's write with its old fencing token is
// rejected by a fenced store that has seen the new holder's token, and its guarded write of state
// kept in ZooKeeper (session::commit_if_held) is refused by the server, leaving the new holder's.
TEST(FaultInjection, PausedHolderExpiredLosesTheLockAndItsFencedAndGuardedWritesAreRejected) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("fi-pause");
  const auto timeout = scaled(4000ms);
  auto holder = spawn_self({"hold", zk.connect(), path, std::to_string(timeout.count())});
  const auto held = parse_held(holder->read_line(60s));
  ASSERT_TRUE(held) << "the holder did not report its hold";
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  const std::string holder_node = kids[0];
  EXPECT_EQ(zkt::stat_node(path + "/" + holder_node).ephemeral_owner, held->sid);

  fenced_store store;
  auto apply = [&store](const std::optional<std::string>& line) -> std::optional<bool> {
    std::istringstream in{line.value_or("")};
    std::string word, value;
    std::int64_t token = 0;
    if (!(in >> word >> token >> value) || word != "write") return std::nullopt;
    return store.write(token, value);
  };
  holder->send("write from-holder-1");
  EXPECT_EQ(apply(holder->read_line(30s)), std::optional<bool>{true}) << "the live holder's write";
  const std::string config = path + "-config";  // state kept in ZooKeeper, written with guarded writes
  zkt::create_path(config);
  holder->send("guarded " + config + " from-holder-1");
  EXPECT_EQ(holder->read_line(30s), std::optional<std::string>{"guarded ok"});

  zklock::session s{opts(zk.connect(), scaled(4000ms))};
  bounded_mutex m{s, path};
  auto waiter = lock_async(m);
  const kill_at_exit cleanup{*holder};
  ASSERT_TRUE(await_children(path, 2)) << "the waiter did not queue";

  holder->signal(SIGSTOP);
  ASSERT_TRUE(holder->await_state('T', 10s)) << "the holder did not stop";
  const auto expiring_at = steady_clock::now();
  ASSERT_TRUE(expire_session(zk.connect(), held->sid, held->password)) << "could not take over the session";

  ASSERT_EQ(waiter.wait_for(scaled(30s)), std::future_status::ready) << "the waiter never got the lock";
  const grant g = waiter.get();
  ASSERT_TRUE(g.held) << g.error;
  report("expiry_to_grant", ms_between(expiring_at, g.at));
  const std::int64_t new_token = m.fencing_token();
  EXPECT_GT(new_token, held->token);
  EXPECT_TRUE(store.write(new_token, "from-new-holder"));
  s.commit_if_held(m.fence(), {zklock::op::set(config, "from-new-holder")});
  const auto kids_now = zkt::children(path);
  EXPECT_EQ(std::count(kids_now.begin(), kids_now.end(), holder_node), 0) << "the expired holder's node is still there";

  // The old holder wakes up and goes on with its write, then learns of the loss.
  const auto resumed_at = steady_clock::now();
  holder->signal(SIGCONT);
  holder->send("write from-stale-holder");
  bool wrote = false, lost = false;
  while (!(wrote && lost)) {
    const auto line = holder->read_line(timeout + scaled(10s));
    ASSERT_TRUE(line) << "the paused holder did not report " << (wrote ? "its loss" : "its write");
    if (*line == "lost") {
      lost = true;
      report("resume_to_lost", ms_between(resumed_at, steady_clock::now()));
    } else {
      const auto accepted = apply(line);
      ASSERT_TRUE(accepted.has_value()) << "unexpected line from the holder: " << *line;
      EXPECT_FALSE(*accepted) << "the fenced store accepted a write with the expired holder's token";
      wrote = true;
    }
  }
  EXPECT_EQ(store.value(), "from-new-holder");
  // Its guarded write of the state kept in ZooKeeper is refused by the server itself: no token to check.
  holder->send("guarded " + config + " from-stale-holder");
  const auto guarded = holder->read_line(timeout + scaled(10s));
  ASSERT_TRUE(guarded) << "the paused holder did not report its guarded write";
  EXPECT_TRUE(guarded->starts_with("guarded refused ")) << *guarded;
  EXPECT_EQ(zkt::stat_node(config).data, "from-new-holder");
  // What the guard prevented: the same write without it lands over the new holder's.
  holder->send("plain " + config + " from-stale-unguarded");
  EXPECT_EQ(holder->read_line(timeout + scaled(30s)), std::optional<std::string>{"plain ok"});
  EXPECT_EQ(zkt::stat_node(config).data, "from-stale-unguarded");
  holder->send("owned");
  EXPECT_EQ(holder->read_line(30s), std::optional<std::string>{"owned 0"});
  holder->close_stdin();
  const auto st = holder->wait(30s);
  ASSERT_TRUE(st.has_value()) << "the old holder did not exit";
  EXPECT_TRUE(WIFEXITED(*st) && WEXITSTATUS(*st) == 0) << describe(*st);
  EXPECT_TRUE(m.still_owned());
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

// The default unlock() while the connection is down: it returns at once (never throws, never
// waits for the network) and the session sends the delete once it is connected again. The
// session survives, so the node can only have gone through that delete.
TEST(FaultInjection, UnlockWhileDisconnectedIsSentOnceReconnected) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-sync-delete");
  zkt::create_path(path);
  const auto timeout = scaled(6000ms);
  auto o = opts(proxy.connect(), timeout);
  o.loss_tolerance = timeout;  // stay suspended through the cut rather than give the session up
  zklock::session s{o};
  const auto id = s.id();
  bounded_mutex m{s, path};
  ASSERT_TRUE(m.try_lock());
  const auto node = zkt::children(path);
  ASSERT_EQ(node.size(), 1u);
  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  ASSERT_TRUE(s.wait_for(zklock::session_state::suspended, scaled(30s))) << "the client never noticed";
  m.unlock();  // suspended: queued for later
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(zkt::children(path), node) << "nothing can have reached the server yet";
  EXPECT_EQ(proxy.command("cut"), "ok cut");
  EXPECT_EQ(proxy.command("heal"), "ok normal");
  ASSERT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));
  zklock::session other_s{opts(zk.connect(), timeout)};
  bounded_mutex other{other_s, path};
  ASSERT_TRUE(other.try_lock_for(timeout / 2)) << "the queued delete was not sent after reconnecting";
  EXPECT_EQ(s.id(), id);
  EXPECT_EQ(s.generation(), 1u) << "the session should have survived: its node went by our delete";
  other.unlock();
  other_s.close();
  EXPECT_TRUE(zkt::children(path).empty());
}

// Watch contexts outlive their waits. Waiters on one session give up while the connection is
// blackholed: their watch removals and deletes are sent but never answered, so the C client keeps
// their watchers. Then the connection is cut (the requests fail, the waits return) and their lock
// objects are freed. The client calls those watchers again on every session event (the reconnect
// below), and the server fires the old exists watch when the holder releases: neither may touch
// the freed waiters (the asan preset would report it) or wake anything. The abandoned nodes are
// deleted once the session is back, and the session goes on working.
TEST(FaultInjection, WatchersOfAbandonedWaitsSurviveSessionEvents) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-abandoned");
  zkt::create_path(path);
  const auto timeout = scaled(12000ms);
  zklock::session hs{opts(zk.connect(), timeout)};
  bounded_mutex holder{hs, path};
  ASSERT_TRUE(holder.try_lock());
  auto o = opts(proxy.connect(), timeout);
  o.loss_tolerance = timeout;  // stay suspended through the cut rather than give the session up
  zklock::session s{o};
  constexpr int waiters = 4;
  const auto wait = scaled(1500ms);
  {
    std::vector<std::jthread> threads;
    std::vector<std::unique_ptr<zkt::combo<zklock::watch_predecessor, zklock::wake_latch>::mutex>> ms;
    std::vector<std::unique_ptr<zkt::combo<zklock::watch_children, zklock::wake_condition_variable>::mutex>> cs;
    for (int i = 0; i < waiters; ++i) {
      ms.push_back(std::make_unique<zkt::combo<zklock::watch_predecessor, zklock::wake_latch>::mutex>(s, path));
      cs.push_back(std::make_unique<zkt::combo<zklock::watch_children, zklock::wake_condition_variable>::mutex>(s, path));
    }
    for (int i = 0; i < waiters; ++i) {
      const auto idx = static_cast<std::size_t>(i);
      threads.emplace_back([&, idx] { EXPECT_FALSE(ms[idx]->try_lock_for(wait)); });
      threads.emplace_back([&, idx] { EXPECT_FALSE(cs[idx]->try_lock_for(wait)); });
    }
    ASSERT_TRUE(zkt::await_children(path, 1u + 2 * waiters));
    ASSERT_TRUE(zkt::await_watch(path, s));
    ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
    // The fault's second step, once every wait has given up and sent its clean-up into the
    // blackhole: the proxy counts the deletes it holds back (op code 2), one for each waiter node
    // still on the server (a wait that gave up before the blackhole had its delete answered). A
    // waiter caught in the middle of a request (a children watch waiter re-listing after the last
    // join) gives up only when the client notices the silence (2/3 of the timeout): then cut at
    // once, which leaves the client a third of the timeout to get its session back.
    auto every_cleanup_sent = [&] {
      const auto standing = zkt::children(path).size() - 1;  // the holder's node stays
      return proxy.command("held 2") == "ok " + std::to_string(standing);
    };
    const auto limit = steady_clock::now() + timeout;
    while (!every_cleanup_sent() && s.state() == zklock::session_state::connected) {
      ASSERT_LT(steady_clock::now(), limit) << "the client never noticed the blackhole";
      std::this_thread::sleep_for(5ms);  // polling the proxy's count and the session's state
    }
    EXPECT_EQ(proxy.command("cut"), "ok cut");
    threads.clear();  // the unanswered requests fail with the connection: every wait returns
  }  // ... and every lock object is freed
  ASSERT_TRUE(s.wait_for(zklock::session_state::suspended, scaled(30s))) << "the client never noticed";
  EXPECT_EQ(proxy.command("heal"), "ok normal");
  ASSERT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));  // session events: watchers called
  EXPECT_EQ(s.generation(), 1u);
  s.flush();
  EXPECT_TRUE(zkt::await_children(path, 1u)) << "the abandoned nodes were not deleted after reconnecting";
  holder.unlock();  // fires whatever exists watch the server still had on the holder's node
  bounded_mutex again{s, path};
  ASSERT_TRUE(again.try_lock_for(timeout));
  again.unlock();
  s.flush();
  EXPECT_TRUE(zkt::children(path).empty());
}

// The loss clock keeps time while the session is busy. A holder's session also has waiters on
// another lock when a silent partition starts; their clean-up deletes fail when the client gives
// the connection up and go to the session's worker, which must not wait on the network with them
// (it did: a synchronous delete blocked it through one reconnect attempt after another, and the
// holder heard of its loss after twice the session timeout, in about one run in eight). The loss
// must be reported before the server may expire the session.
TEST(FaultInjection, LossIsReportedInTimeWhileTheSessionHasDeletesToRetry) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-busy");
  zkt::create_path(path);
  const auto timeout = scaled(4000ms);
  zklock::session other{opts(zk.connect(), timeout)};
  bounded_mutex b_holder{other, path + "-b"};
  ASSERT_TRUE(b_holder.try_lock());
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    zklock::session s{opts(proxy.connect(), timeout)};
    bounded_mutex a{s, path + "-a"};
    // (After round 0, the stale node of the previous round's given-up session may still stand
    // until the reaper closes that session or the server expires it.)
    ASSERT_TRUE(a.try_lock_for(2 * timeout));
    std::atomic<long long> lost_after{-1};
    std::atomic<steady_clock::time_point> cut_at{};  // read by the callback, on the session's thread
    std::stop_callback on_loss{a.lost_token(), [&] { lost_after = ms_between(cut_at.load(), steady_clock::now()); }};
    std::vector<std::unique_ptr<zklock::mutex>> waiters;
    for (int i = 0; i < 4; ++i) waiters.push_back(std::make_unique<zklock::mutex>(s, path + "-b"));
    {
      std::vector<std::jthread> threads;
      for (auto& w : waiters)
        threads.emplace_back([&w, wait = timeout / 4] {
          try {
            EXPECT_FALSE(w->try_lock_for(wait));
          } catch (const std::system_error& e) {  // the session was given up meanwhile
            EXPECT_EQ(e.code(), std::error_code{zklock::errc::session_expired}) << e.what();
          }
        });
      ASSERT_TRUE(zkt::await_children(path + "-b", 5u));
      cut_at = steady_clock::now();
      ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
    }
    const auto limit = steady_clock::now() + 3 * timeout;
    while (lost_after.load() < 0 && steady_clock::now() < limit) std::this_thread::sleep_for(5ms);  // polling
    report("partition_to_holder_loss", lost_after.load());
    EXPECT_GE(lost_after.load(), 0) << "the holder never heard of its loss";
    EXPECT_LT(lost_after.load(), timeout.count()) << "reported after the server may have expired the session";
    EXPECT_EQ(proxy.command("heal"), "ok normal");
  }
  b_holder.unlock();
}

// 3b. A background release (session_options::background_release) whose delete never reaches the
// server: the proxy holds every byte while unlock() sends it, the client gives the connection up
// (outcome unknown), then the proxy drops what it held and heals. Once the session is connected
// again it deletes the node anew; without that retry the node would stay for the session's life
// and block the queue.
TEST(FaultInjection, BackgroundDeleteLostInAPartitionIsRetried) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-bg-delete");
  zkt::create_path(path);
  const auto timeout = scaled(6000ms);
  auto o = opts(proxy.connect(), timeout);
  o.background_release = true;
  o.loss_tolerance = timeout;  // stay suspended through the cut rather than give the session up
  zklock::session s{o};
  bounded_mutex m{s, path};
  ASSERT_TRUE(m.try_lock());
  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  m.unlock();  // the delete is held by the proxy
  EXPECT_EQ(s.state(), zklock::session_state::connected) << "unlock() waited for the reply";
  const bool suspended = s.wait_for(zklock::session_state::suspended, scaled(30s));
  EXPECT_EQ(proxy.command("cut"), "ok cut");  // drops the held delete with its connection
  EXPECT_EQ(proxy.command("heal"), "ok normal");
  ASSERT_TRUE(suspended) << "the client never noticed the partition";
  ASSERT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));
  EXPECT_EQ(s.generation(), 1u) << "the session should have survived the partition";
  zklock::session other_s{opts(zk.connect(), timeout)};
  bounded_mutex other{other_s, path};
  ASSERT_TRUE(other.try_lock_for(timeout)) << "the lost delete was not retried";
  other.unlock();
  other_s.close();
  EXPECT_TRUE(zkt::children(path).empty());
}

// 3c. A long contended hold released in the background while round trips count as far
// (settle_before_requeue): the session's next acquire of that lock queues only once the delete is
// answered, so that its create does not share the wire and the server with the handoff's delete.
// The proxy holds every byte of the session while it releases and tries again. Far: the delete
// arrives, the try ends at its deadline, then the session acquires another lock; one connection
// keeps its requests in order, so once that create has arrived, any create of the try would have
// arrived before it, and none did. Near: the create of a lock() arrives right behind the delete.
/// Returns: the paths of the creates (create2) the proxy holds.
std::vector<std::string> held_creates(zk_proxy& proxy) {
  std::istringstream in{proxy.command("paths 15")};
  std::string word;
  in >> word;  // "ok"
  std::vector<std::string> paths;
  while (in >> word) paths.push_back(word);
  return paths;
}

/// Returns: how many of `paths` are under `lock_path`.
long under(const std::vector<std::string>& paths, const std::string& lock_path) {
  return std::count_if(paths.begin(), paths.end(), [&](const std::string& p) { return p.starts_with(lock_path + "/"); });
}

enum class again { far_blocking, far_async, near };

void release_then_queue_again_behind_a_blackhole(again how) {
  const bool far = how != again::near;
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-settle");
  const auto marker_path = path + "-marker";
  zkt::create_path(path);
  zkt::create_path(marker_path);
  // Long enough that the client keeps its blackholed connection (it gives it up after two thirds of
  // the timeout without an answer) until the marker's create is on it, even on a loaded machine.
  const auto timeout = scaled(30000ms);
  auto o = opts(proxy.connect(), timeout);
  o.background_release = true;
  o.loss_tolerance = timeout;
  o.look_ahead_round_trip = far ? std::chrono::microseconds::zero() : std::chrono::microseconds::max();
  zklock::session s{o};
  bounded_mutex m{s, path};
  bounded_mutex marker{s, marker_path};
  zklock::session holder_s{opts(zk.connect(), timeout)};
  bounded_mutex holder{holder_s, path};

  const auto measuring_since = steady_clock::now();  // before this session's first read
  marker.lock();  // its first use asks the server more than a create: get that done now
  marker.unlock();
  holder.lock();
  auto waiter = lock_async(m);  // contended: its grant comes after a wait
  // Its node is there, and it watches: it listed the holder ahead and waits. (Its node alone is not
  // enough: on a loaded server its listing may come after the holder's release, and then it holds
  // without a wait, and its release does not settle.)
  ASSERT_TRUE(zkt::await_children(path, 2));
  ASSERT_TRUE(zkt::await_watch(path, s)) << "the waiter never watched";
  holder.unlock();
  ASSERT_EQ(waiter.wait_for(scaled(30s)), std::future_status::ready);
  const grant granted = waiter.get();
  ASSERT_TRUE(granted.held);
  // The hold itself. The session settles only after a hold at least as long as its measured round
  // trip (settle_before_requeue), and every read it measured so far came after measuring_since: on
  // a loaded machine one can take far longer than a loopback round trip, never longer than that.
  std::this_thread::sleep_for(std::max<steady_clock::duration>(100ms, granted.at - measuring_since));

  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  m.unlock();  // in the background: the delete waits in the proxy, unanswered
  const auto until = steady_clock::now() + scaled(15s);  // well before the client gives up (20 s)
  while (proxy.command("held 2") != "ok 1" && steady_clock::now() < until)
    std::this_thread::sleep_for(2ms);  // polling the proxy for the delete's arrival
  ASSERT_EQ(proxy.command("held 2"), "ok 1") << "the release's delete never reached the proxy";
  if (far) {
    if (how == again::far_blocking) {
      EXPECT_FALSE(m.try_lock_for(scaled(300ms))) << "granted while the session's bytes were held";
    } else {  // the asynchronous acquire waits for the release the same way
      // (shared: a completion that comes after a failed assertion must not reach a dead promise)
      auto outcome = std::make_shared<std::promise<std::error_code>>();
      m.async_lock(zklock::wait_context{steady_clock::now() + scaled(300ms)},
                   [outcome](std::error_code ec, zklock::lock_hold) { outcome->set_value(ec); });
      auto done = outcome->get_future();
      ASSERT_EQ(done.wait_for(scaled(30s)), std::future_status::ready)
          << "the acquire's deadline passed long ago (the proxy holds " << proxy.command("held 15")
          << " create2 of this session)";
      EXPECT_EQ(done.get(), make_error_code(zklock::errc::lock_timeout));
    }
    const auto marker_started = steady_clock::now();
    auto marked = lock_async(marker);  // its create follows anything the try sent
    std::vector<std::string> creates;
    while (under(creates = held_creates(proxy), marker_path) == 0 && steady_clock::now() < until)
      std::this_thread::sleep_for(2ms);  // polling the proxy for the marker's arrival
    // What the proxy and the session saw, should the marker's create not have arrived.
    std::string seen = "after " + std::to_string((steady_clock::now() - marker_started) / 1ms) +
                       " ms: the proxy holds " + proxy.command("held 15") + " create2, " +
                       proxy.command("held 14") + " multi, " + proxy.command("held 1") + " create, " +
                       proxy.command("held 11") + " ping; new connections waiting: " +
                       proxy.command("waiting") + "; session state " +
                       std::to_string(static_cast<int>(s.state())) + "; the marker's lock() ";
    if (marked.wait_for(0s) != std::future_status::ready) {
      seen += "is still waiting";
    } else {
      const grant g = marked.get();
      seen += g.held ? "returned holding" : "failed: " + g.error;
      marked = std::async(std::launch::deferred, [g] { return g; });
    }
    EXPECT_EQ(proxy.command("heal"), "ok normal");
    ASSERT_EQ(under(creates, marker_path), 1) << "the marker's create never reached the proxy (" << seen << ")";
    EXPECT_EQ(under(creates, path), 0) << "the try created its node before the release's delete was answered";
    ASSERT_EQ(marked.wait_for(scaled(30s)), std::future_status::ready);
    ASSERT_TRUE(marked.get().held);
    marker.unlock();
    EXPECT_TRUE(m.try_lock_for(scaled(30s)));  // once the delete is answered it queues at once
  } else {
    auto again = lock_async(m);
    std::vector<std::string> creates;
    while (under(creates = held_creates(proxy), path) == 0 && steady_clock::now() < until)
      std::this_thread::sleep_for(2ms);  // polling the proxy for the create's arrival
    EXPECT_EQ(proxy.command("heal"), "ok normal");
    EXPECT_EQ(under(creates, path), 1) << "with near round trips the create should follow the delete at once";
    ASSERT_EQ(again.wait_for(scaled(30s)), std::future_status::ready);
    ASSERT_TRUE(again.get().held);
  }
  m.unlock();
  EXPECT_TRUE(zkt::await_children(path, 0)) << "a node of the release or of the acquire stayed behind";
}

TEST(FaultInjection, AFarSessionQueuesAgainOnlyOnceItsReleaseIsAnswered) {
  release_then_queue_again_behind_a_blackhole(again::far_blocking);
}

TEST(FaultInjection, AFarSessionsAsyncAcquireQueuesAgainOnlyOnceItsReleaseIsAnswered) {
  release_then_queue_again_behind_a_blackhole(again::far_async);
}

TEST(FaultInjection, ANearSessionQueuesAgainRightBehindItsRelease) { release_then_queue_again_behind_a_blackhole(again::near); }

// A waiter does not wait for the replies of its watches on the contenders ahead (their events, and
// a reply that finds a node gone, wake it). One whose wait ends while such a reply is still on its
// way drops the watch before the reply arms it: once the reply comes, no watch of the ended try may
// stay on the server (the drop's removal goes out behind the watch's request; should the client not
// send it, the reply's completion removes the watch). The proxy holds the session's requests from
// its first watch on (getData, op code 4; or SetWatches, 101, where zklock's C client arms the
// waiter's watches by one request) until the try has ended.
TEST(FaultInjection, AWatchDroppedBeforeItsReplyCameIsRemovedWhenItComes) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-dropped-watch");
  zkt::create_path(path);
  auto watches = [&] { return zkt::mntr(zk.connect())["zk_watch_count"]; };
  zklock::session holder_s{opts(zk.connect(), scaled(30s))};
  bounded_mutex holder{holder_s, path};
  holder.lock();
  auto o = opts(proxy.connect(), scaled(30s));
  o.background_release = true;  // the try's delete waits in the proxy too: not for its reply
  zklock::session s{o};
  bounded_mutex m{s, path};
  const double before = watches();

  const std::string op = zkt::watches_in_one_request ? "101" : "4";
  ASSERT_EQ(proxy.command("holdop " + op), "ok holdop");
  EXPECT_FALSE(m.try_lock_for(scaled(300ms)));
  // Its own node's watch and the holder's: both were sent (by one request, or one each), neither
  // answered when the try ended.
  EXPECT_EQ(proxy.command("held " + op), zkt::watches_in_one_request ? "ok 1" : "ok 2");
  EXPECT_EQ(proxy.command("heal"), "ok normal");
  // The try's delete follows its watches: once its node is gone, the server has armed them both.
  EXPECT_TRUE(await_children(path, 1)) << "the try's node stayed";
  const auto until = steady_clock::now() + scaled(30s);
  while (watches() != before && steady_clock::now() < until)
    std::this_thread::sleep_for(5ms);  // polling the server for the removal
  EXPECT_EQ(watches(), before) << "the watch of the ended try stayed on the server";
  holder.unlock();
  EXPECT_TRUE(m.try_lock_for(scaled(30s)));  // the session still works
  m.unlock();
  EXPECT_TRUE(await_children(path, 0));
}

// 3. A create whose reply never arrives. The server is paused, then lock() sends its create, which
// waits in the server's socket; the client gives the connection up (outcome unknown). A proxy in
// front of the server holds the client's reconnect while the server resumes and executes the
// orphaned create: the node exists, ours, while the client does not know it. Once the proxy heals,
// lock() finds and adopts exactly that node (protected creation), and unlock leaves nothing.
TEST(FaultInjection, CreateWhoseReplyIsLostIsAdoptedExactlyOnce) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-orphan");
  zkt::create_path(path);  // persistent: the create must not fail for a missing parent
  const auto timeout = scaled(6000ms);
  zklock::session s{opts(proxy.connect(), timeout)};
  bounded_mutex m{s, path};
  ASSERT_TRUE(m.try_lock());  // a round trip right before the pause: the session's clocks start now
  m.unlock();
  // Hold the client's reconnection from now on, while its current connection still carries the
  // create to the server. (Blackholing only once the client noticed the stall raced with the
  // reconnection: a reconnect that reached the server first made it drop the old connection and
  // the create unread.)
  ASSERT_EQ(proxy.command("holdnew"), "ok holdnew");

  zk.pause();
  const auto paused_at = steady_clock::now();
  auto locker = lock_async(m);
  const bool suspended = s.wait_for(zklock::session_state::suspended, timeout);
  const auto suspended_at = steady_clock::now();
  zk.resume();  // the server runs what it had received
  ASSERT_TRUE(suspended) << "the client never noticed the stalled server";
  report("pause_to_suspended", ms_between(paused_at, suspended_at));

  std::vector<std::string> kids;
  const auto until = steady_clock::now() + timeout / 3;  // the session outlives it
  while ((kids = zkt::children(path)).empty() && steady_clock::now() < until)
    std::this_thread::sleep_for(2ms);  // polling the server, not a synchronisation
  const bool orphan_seen = kids.size() == 1;
  const bool still_waiting = locker.wait_for(0s) == std::future_status::timeout;
  const auto orphan = orphan_seen ? zkt::stat_node(path + "/" + kids[0]) : zkt::node_stat{};
  EXPECT_EQ(proxy.command("heal"), "ok normal");

  ASSERT_TRUE(orphan_seen) << "the server did not execute the create sent while it was paused (" << kids.size()
                           << " nodes)";
  EXPECT_TRUE(still_waiting) << "lock() returned before the client could have learnt the create's outcome";
  EXPECT_EQ(orphan.ephemeral_owner, s.id()) << "the orphan belongs to another session";

  ASSERT_EQ(locker.wait_for(scaled(30s)), std::future_status::ready) << "lock() did not return after the heal";
  const grant g = locker.get();
  ASSERT_TRUE(g.held) << g.error;
  EXPECT_EQ(s.generation(), 1u) << "the session should have survived the stall";
  const auto after = zkt::children(path);
  ASSERT_EQ(after.size(), 1u) << "a second contender node was created";
  EXPECT_EQ(after[0], kids[0]) << "lock() did not adopt the node its lost create had made";
  EXPECT_EQ(zkt::stat_node(path + "/" + after[0]).ephemeral_owner, s.id());
  EXPECT_EQ(m.fencing_token(), orphan.czxid);
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty()) << "unlock left a node behind";
}

// 3c. An acquire that spans the give-up of its session. The client is disconnected (the proxy cuts,
// then holds new connections), and lock() sends its create and listing into the held reconnection.
// The session stays suspended past its loss tolerance, so zklock gives it up; only then does the
// proxy let the held connection through. The old handle takes its session back (the server never
// expired it), and the create and the listing are answered, on the session given up: a node of
// that session must be nobody's grant. lock() queues again on the next session and returns a hold
// of the live session, its node owned by it and its loss signal quiet.
TEST(FaultInjection, AnAcquireSpanningAGiveUpIsGrantedOnTheLiveSessionOnly) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-span-give-up");
  zkt::create_path(path);
  const auto timeout = scaled(6000ms);
  auto o = opts(proxy.connect(), timeout);
  // Given up after the client reconnects into the held connection (it waits up to a second or so
  // before it tries), long before that reconnection would time out (2/3 of the timeout).
  o.loss_tolerance = scaled(1500ms);
  zklock::session s{o};
  const auto first_id = s.id();
  // The give-up is seen by a listener: `expired` lasts only until the worker opens the next handle,
  // which a wait_for(expired) woken late (a loaded machine) can miss.
  struct seen {
    std::mutex mu;
    std::condition_variable cv;
    bool expired = false;
  };
  const auto given_up = std::make_shared<seen>();
  s.add_state_listener([given_up](zklock::session_state st) {
    if (st != zklock::session_state::expired) return;
    std::lock_guard l{given_up->mu};
    given_up->expired = true;
    given_up->cv.notify_all();
  });
  bounded_mutex m{s, path};
  ASSERT_EQ(proxy.command("cut"), "ok cut");
  ASSERT_TRUE(s.wait_for(zklock::session_state::suspended, scaled(10s)));
  ASSERT_EQ(proxy.command("holdnew"), "ok holdnew");
  const auto until = steady_clock::now() + scaled(10s);
  while (proxy.command("waiting") == "ok 0" && steady_clock::now() < until)
    std::this_thread::sleep_for(2ms);  // polling the proxy for the client's next connection
  ASSERT_NE(proxy.command("waiting"), "ok 0") << "the client did not try to reconnect";
  auto locker = lock_async(m);  // its create and listing wait for the held connection
  {
    std::unique_lock l{given_up->mu};
    ASSERT_TRUE(given_up->cv.wait_for(l, scaled(10s), [&] { return given_up->expired; }))
        << "the session was not given up";
  }
  EXPECT_EQ(locker.wait_for(0s), std::future_status::timeout) << "lock() returned before the heal";
  ASSERT_EQ(proxy.command("heal"), "ok normal");
  ASSERT_EQ(locker.wait_for(scaled(30s)), std::future_status::ready) << "lock() did not return after the heal";
  const grant g = locker.get();
  ASSERT_TRUE(g.held) << g.error;
  EXPECT_FALSE(m.lost_token().stop_requested()) << "lock() returned a hold already lost with the given-up session";
  EXPECT_NE(s.id(), first_id) << "the old session should have been replaced";
  const auto kids = zkt::children(path);
  std::int64_t owner = -1;
  for (const auto& k : kids)
    if (const auto st = zkt::stat_node(path + "/" + k); st.exists && st.czxid == m.fencing_token()) owner = st.ephemeral_owner;
  EXPECT_EQ(owner, s.id()) << "the granted node is not the live session's (0x" << std::hex << first_id
                           << " was given up)";
  m.unlock();
  s.flush();
  EXPECT_TRUE(zkt::children(path).empty()) << "a node was left behind";
}

// 3b. Protected creation adopts a node only if our session owns it. lock()'s create is held back
// by the proxy, so its outcome will be unknown; meanwhile another session creates a node with the
// very name prefix (the attempt's unique id) read off the held request: a forgery, since a real
// clash needs a uuid collision. The proxy then drops the connection with the create unsent, and
// lock(), reconnected, finds a node with its id that is not its own: it must not adopt it, but
// create its own and queue behind it.
TEST(FaultInjection, LostCreateDoesNotAdoptAnotherSessionsNodeWithItsId) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-forged");
  zkt::create_path(path);
  const auto timeout = scaled(6000ms);
  zklock::session s{opts(proxy.connect(), timeout)};
  bounded_mutex m{s, path};
  ASSERT_TRUE(m.try_lock());  // the ACL check is done: lock() sends its create first
  m.unlock();

  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  auto locker = lock_async(m);
  constexpr int create2_op = 15;  // ZooKeeper's op code of the create that lock() sends
  std::string held;  // "ok PREFIX": the create's path, the lock path plus our name prefix
  const auto limit = steady_clock::now() + timeout / 2;
  while ((held = proxy.command("paths " + std::to_string(create2_op))) == "ok" && steady_clock::now() < limit)
    std::this_thread::sleep_for(2ms);  // polling the proxy's record of what it holds back
  ASSERT_TRUE(held.starts_with("ok " + path + "/")) << held;
  const std::string prefix = held.substr(3);
  ASSERT_EQ(prefix.find(' '), std::string::npos) << "more than one create: " << held;

  zkt::raw_client forger;
  const auto forged = forger.create_ephemeral_sequential(prefix);
  ASSERT_TRUE(forged.has_value());
  EXPECT_EQ(proxy.command("cut"), "ok cut");  // the held create goes with its connection, unsent
  EXPECT_EQ(proxy.command("heal"), "ok normal");

  ASSERT_TRUE(zkt::await_children(path, 2)) << "lock() did not queue a node of its own";
  const auto kids = zkt::children(path);
  std::string mine;
  for (const auto& k : kids)
    if (path + "/" + k != *forged) mine = path + "/" + k;
  ASSERT_FALSE(mine.empty());
  EXPECT_TRUE(mine.starts_with(prefix)) << "the new node should carry the same attempt id: " << mine;
  EXPECT_EQ(zkt::stat_node(mine).ephemeral_owner, s.id());
  EXPECT_EQ(zkt::stat_node(*forged).ephemeral_owner, forger.id()) << "the forged node changed hands";
  EXPECT_EQ(locker.wait_for(0s), std::future_status::timeout) << "granted while the forged node precedes ours";

  ASSERT_EQ(forger.remove(*forged), ZOK);
  ASSERT_EQ(locker.wait_for(scaled(30s)), std::future_status::ready) << "lock() did not return after the forgery went";
  const grant g = locker.get();
  ASSERT_TRUE(g.held) << g.error;
  EXPECT_EQ(s.generation(), 1u) << "the session should have survived the cut";
  EXPECT_EQ(m.fencing_token(), zkt::stat_node(mine).czxid) << "the token is not our own node's";
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty()) << "unlock left a node behind";
}

// 4. The leader of a 3-node ensemble killed while several sessions contend for one lock: grants
// resume soon, no hold is reported lost, and never two holders at once.
TEST(FaultInjection, LeaderKilledDuringContentionPausesGrantsBriefly) {
  zkt::private_server zk{3};
  const auto path = zkt::unique_path("fi-leader");
  // Every client of the killed leader, and of the followers while they elect a new one, is
  // disconnected; the default loss tolerance (a quarter of the timeout, from the disconnection)
  // must outlast the election. (With 6 s, an election of 1.5 s on a loaded machine
  // gave every session up: a false loss; with 12 s, one of over 3 s did, in a CI run whose asan
  // build shared the two cores with the three servers; with 20 s, one of 5.7 s did, while the
  // consumer tests compiled beside it.) 60 s is the servers' maximum session timeout: a 15 s
  // tolerance. A normal run does not wait any longer for it (the election takes under a second).
  const auto timeout = 60000ms;
  const auto ports = ports_of(zk.connect());
  ASSERT_EQ(ports.size(), 3u);
  int leader_port = 0;
  for (int p : ports)
    if (zkt::four_letter(p, "srvr").find("Mode: leader") != std::string::npos) leader_port = p;
  ASSERT_NE(leader_port, 0) << "no leader";

  // Contenders on the leader lose their connection with it; the others see a pause. Make sure
  // both kinds take part (the client picks a member at random).
  std::vector<std::unique_ptr<zklock::session>> sessions;
  int on_leader = 0;
  for (int tries = 0; tries < 24 && (sessions.size() < 3 || on_leader == 0 || on_leader == static_cast<int>(sessions.size()));
       ++tries) {
    auto s = std::make_unique<zklock::session>(opts(zk.connect(), timeout));
    const auto there = sessions_at(leader_port);
    const bool leader_side = std::find(there.begin(), there.end(), s->id()) != there.end();
    if (sessions.size() >= 3 && leader_side == (on_leader > 0)) continue;  // not the kind still missing
    on_leader += leader_side ? 1 : 0;
    sessions.push_back(std::move(s));
  }
  ASSERT_GT(on_leader, 0) << "no contender session on the leader";
  report("contenders", static_cast<long long>(sessions.size()), "");
  report("contenders_on_leader", on_leader, "");

  struct shared_state {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<steady_clock::time_point> grants;
    std::vector<std::string> errors;
    std::atomic<int> holders{0}, max_holders{0}, losses{0};
    std::atomic<bool> stop{false};
  } st;
  std::vector<std::thread> threads;
  for (auto& sp : sessions) {
    threads.emplace_back([&st, &path, &timeout, s = sp.get()] {
      try {
        bounded_mutex m{*s, path};
        while (!st.stop.load()) {
          if (!m.try_lock_for(timeout + scaled(30s))) {
            std::lock_guard lk{st.mu};
            st.errors.push_back("no grant within the bound");
            break;
          }
          const int h = ++st.holders;
          int seen = st.max_holders.load();
          while (h > seen && !st.max_holders.compare_exchange_weak(seen, h)) {}
          {
            std::lock_guard lk{st.mu};
            st.grants.push_back(steady_clock::now());
          }
          st.cv.notify_all();
          {
            std::stop_callback on_loss{m.lost_token(), [&st] { ++st.losses; }};
            std::this_thread::yield();  // the critical section
          }
          --st.holders;
          m.unlock();
        }
      } catch (const std::exception& e) {
        std::lock_guard lk{st.mu};
        st.errors.emplace_back(e.what());
      }
      st.cv.notify_all();
    });
  }
  auto grants_reach = [&](std::size_t n, milliseconds limit) {
    std::unique_lock lk{st.mu};
    return st.cv.wait_for(lk, limit, [&] { return st.grants.size() >= n || !st.errors.empty(); }) && st.errors.empty();
  };

  const bool warmed = grants_reach(30, scaled(30s));
  std::size_t before = 0;
  steady_clock::time_point kill_begin{}, kill_end{};
  bool resumed = false;
  if (warmed) {
    kill_begin = steady_clock::now();
    const int killed = zk.kill_leader();
    kill_end = steady_clock::now();
    EXPECT_EQ(ports.at(static_cast<std::size_t>(killed - 1)), leader_port) << "another member was leader by then";
    {
      std::lock_guard lk{st.mu};
      before = st.grants.size();
    }
    resumed = grants_reach(before + 30, scaled(30s));
  }
  st.stop = true;
  for (auto& t : threads) t.join();

  ASSERT_TRUE(warmed) << "contention did not get going";
  for (const auto& e : st.errors) ADD_FAILURE() << "contender: " << e;
  ASSERT_TRUE(resumed) << "grants did not resume after the leader was killed";
  EXPECT_EQ(st.max_holders.load(), 1) << "two holders at once";
  EXPECT_EQ(st.losses.load(), 0) << "a hold was reported lost although every session survived";
  // The longest pause between grants from just before the kill to well after it.
  auto& g = st.grants;
  std::sort(g.begin(), g.end());
  long long gap = 0;
  for (std::size_t i = 1; i < g.size(); ++i)
    if (g[i] >= kill_begin) gap = std::max(gap, ms_between(g[i - 1], g[i]));
  const auto first_after = std::find_if(g.begin(), g.end(), [&](auto t) { return t > kill_end; });
  report("kill_leader_call", ms_between(kill_begin, kill_end));
  report("longest_grant_gap", gap);
  if (first_after != g.end()) report("kill_returned_to_next_grant", ms_between(kill_end, *first_after));
  report("grants", static_cast<long long>(g.size()), "");
  // Measured here: 0.45-0.66 s on a quiet machine (the issue asks for "about 2 s"); the election's
  // own time decides it, so the test only bounds it by the loss tolerance: a longer pause would
  // have given the sessions up (checked next).
  EXPECT_LT(gap, (timeout / 4).count()) << "grants paused as long as the loss tolerance";
  for (auto& sp : sessions) EXPECT_EQ(sp->generation(), 1u) << "a session was lost";
  raw_client observer{zk.connect()};
  EXPECT_TRUE(children_retry(observer, path).empty());
}

// 5. The quorum lost for longer than the session timeout: the holder reports the loss while the
// quorum is still gone; once it is back, the holder's stale node goes away and another client
// acquires.
TEST(FaultInjection, QuorumLostLongerThanTheTimeoutLosesTheLockAndLeavesNoStaleNode) {
  zkt::private_server zk{3};
  const auto path = zkt::unique_path("fi-quorum");
  const auto timeout = scaled(4000ms);
  zklock::session s{opts(zk.connect(), timeout)};
  bounded_mutex m{s, path};
  m.lock();
  loss_clock probe{m.lost_token()};
  raw_client observer{zk.connect()};
  const auto kids = children_retry(observer, path);
  ASSERT_EQ(kids.size(), 1u);
  const std::string stale = kids[0];

  const auto lost_quorum_at = steady_clock::now();
  zk.kill(1);
  zk.kill(2);
  const bool lost_in_time = probe.wait(timeout + scaled(10s));
  const bool lost_before_recovery = probe.fired();  // still no quorum: nothing restarted yet
  if (lost_in_time) report("quorum_lost_to_loss", ms_between(lost_quorum_at, probe.at()));
  zk.restart(1);
  zk.restart(2);
  const auto recovered_at = steady_clock::now();
  ASSERT_TRUE(lost_in_time) << "lost_token() did not fire while the quorum was gone";
  EXPECT_TRUE(lost_before_recovery);
  EXPECT_FALSE(m.still_owned());
  m.unlock();  // quiet on a lost hold

  // A new leader gives every session a fresh timeout, so the given-up session would live (and its
  // node block the queue) for a whole timeout after the recovery: zklock closes it on the server
  // as soon as a member answers again, well before that.
  const auto until = recovered_at + timeout / 2;
  bool gone = false;
  while (!gone && steady_clock::now() < until) {
    const auto now_kids = children_retry(observer, path);
    gone = std::find(now_kids.begin(), now_kids.end(), stale) == now_kids.end();
    if (!gone) std::this_thread::sleep_for(20ms);  // polling the server, not a synchronisation
  }
  ASSERT_TRUE(gone) << "the stale node " << stale << " survived the recovery";
  report("recovery_to_stale_node_gone", ms_between(recovered_at, steady_clock::now()));

  zklock::session other{opts(zk.connect(), timeout)};
  bounded_mutex m2{other, path};
  EXPECT_TRUE(m2.try_lock_for(scaled(30s))) << "another client could not acquire after the recovery";
  m2.unlock();
  EXPECT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));  // re-established by itself
  EXPECT_EQ(s.generation(), 2u);
  EXPECT_TRUE(children_retry(observer, path).empty());
}

// 6. A holder cut off by a silent partition (the proxy forwards nothing): it reports the loss
// within its session timeout, before the server expires it and hands the lock to a waiter, so the
// two never both believe they hold.
TEST(FaultInjection, HolderCutOffByThePartitionReportsLossBeforeTheWaiterAcquires) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto path = zkt::unique_path("fi-partition");
  const auto timeout = scaled(4000ms);
  zklock::session holder_s{opts(proxy.connect(), timeout)};
  bounded_mutex holder{holder_s, path};
  holder.lock();
  loss_clock probe{holder.lost_token()};

  zklock::session waiter_s{opts(zk.connect(), timeout)};
  bounded_mutex waiter{waiter_s, path};
  std::atomic<bool> holder_owned_at_grant{true}, holder_lost_at_grant{false};
  auto waiting = std::async(std::launch::async, [&] {
    grant g;
    try {
      waiter.lock();
      g.held = true;
    } catch (const std::exception& e) {
      g.error = e.what();
    }
    g.at = steady_clock::now();
    holder_owned_at_grant = holder.still_owned();
    holder_lost_at_grant = probe.fired();
    return g;
  });
  struct close_at_exit {
    zklock::session& s;
    ~close_at_exit() { s.close(); }  // a test failing early must not leave the waiter waiting
  } const cleanup{holder_s};
  ASSERT_TRUE(await_children(path, 2)) << "the waiter did not queue";

  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  const auto cut_at = steady_clock::now();
  ASSERT_EQ(waiting.wait_for(timeout + scaled(30s)), std::future_status::ready) << "the waiter never got the lock";
  const grant g = waiting.get();
  ASSERT_TRUE(g.held) << g.error;
  ASSERT_TRUE(probe.fired()) << "the cut-off holder never reported the loss";
  const auto cut_to_loss = ms_between(cut_at, probe.at());
  const auto cut_to_grant = ms_between(cut_at, g.at);
  report("cut_to_holder_loss", cut_to_loss);
  report("cut_to_waiter_grant", cut_to_grant);
  report("holder_loss_to_waiter_grant", ms_between(probe.at(), g.at));
  EXPECT_LE(cut_to_loss, timeout.count()) << "the holder reported the loss after its session timeout";
  EXPECT_LT(probe.at(), g.at) << "the waiter acquired before the cut-off holder knew it had lost the lock";
  EXPECT_TRUE(holder_lost_at_grant) << "both believed they held the lock";
  EXPECT_FALSE(holder_owned_at_grant) << "the holder's still_owned() was true when the waiter acquired";
  EXPECT_GE(cut_to_grant, timeout.count() / 2) << "the server gave the lock away before the holder's session could expire";

  EXPECT_EQ(proxy.command("heal"), "ok normal");
  holder.unlock();  // quiet on a lost hold
  EXPECT_TRUE(holder_s.wait_for(zklock::session_state::connected, scaled(30s)));
  EXPECT_EQ(holder_s.generation(), 2u);
  waiter.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}


// A completion that drops its hold does not hold up the session's other completions for the delete's
// round trip (issue 25): with the connection blackholed, the delete is never answered, yet the
// completion returns while the session is still connected, and the next completion runs. Then the
// delete reaches the server once the connection is back.
TEST(FaultInjection, ACompletionThatDropsItsHoldWaitsForNoReply) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto timeout = scaled(20000ms);
  auto o = opts(proxy.connect(), timeout);
  o.loss_tolerance = timeout;  // stay suspended through the cut rather than give the session up
  zklock::session s{o};
  const auto path = zkt::unique_path("fi-async-drop");
  zklock::mutex m{s, path}, first{s, zkt::unique_path("fi-async-first")}, second{s, zkt::unique_path("fi-async-second")};
  zkt::completion granted;
  m.async_lock(granted.callback());
  ASSERT_TRUE(granted.wait(scaled(30s)));
  ASSERT_EQ(granted.code(), std::error_code{}) << granted.code().message();
  auto hold = std::make_shared<zklock::lock_hold>(std::move(granted.hold()));
  ASSERT_TRUE(hold->owns_lock());
  ASSERT_EQ(zkt::children(path).size(), 1u);

  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  // Two completions that need no server (acquires stopped before the call), on the session's
  // completion thread in turn: the first drops the hold.
  std::stop_source stopped;
  stopped.request_stop();
  std::promise<zklock::session_state> released;
  std::promise<void> next_ran;
  auto f_released = released.get_future();
  auto f_next = next_ran.get_future();
  first.async_lock({.stop = stopped.get_token()}, [&s, &released, hold](std::error_code, zklock::lock_hold) {
    hold->unlock();
    released.set_value(s.state());
  });
  second.async_lock({.stop = stopped.get_token()}, [&next_ran](std::error_code, zklock::lock_hold) { next_ran.set_value(); });
  ASSERT_EQ(f_released.wait_for(scaled(60s)), std::future_status::ready);
  EXPECT_EQ(f_released.get(), zklock::session_state::connected)
      << "the completion waited for its delete's reply until the client gave the connection up";
  ASSERT_EQ(f_next.wait_for(scaled(60s)), std::future_status::ready);
  EXPECT_FALSE(hold->owns_lock());
  EXPECT_EQ(zkt::children(path).size(), 1u) << "the delete cannot have reached the server yet";

  EXPECT_EQ(proxy.command("cut"), "ok cut");
  EXPECT_EQ(proxy.command("heal"), "ok normal");
  ASSERT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));
  EXPECT_TRUE(zkt::await_children(path, 0)) << "the delete was not sent again after reconnecting";
  EXPECT_EQ(s.generation(), 1u) << "the session should have survived: its node went by our delete";
}

// Asynchronous acquires of one session step at once (issue 25): while one acquire's step waits for
// the connection (the proxy cut it, so its requests cannot go out), another's stop request and a
// third's deadline end them at once, with the session still suspended and the stuck one still
// pending. On one thread of steps, both would wait behind the stuck step until the connection came
// back or the session was given up.
TEST(FaultInjection, AnAsyncAcquireStuckBehindADisconnectionDelaysNoOther) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto timeout = scaled(10000ms);
  auto o = opts(proxy.connect(), timeout);
  o.loss_tolerance = timeout;  // stay suspended through the cut rather than give the session up
  zklock::session s{o};
  zklock::session hs{opts(zk.connect(), timeout)};
  const auto stopped_path = zkt::unique_path("fi-async-stopped");
  const auto timed_path = zkt::unique_path("fi-async-timed");
  zklock::mutex stopped_holder{hs, stopped_path}, timed_holder{hs, timed_path};
  stopped_holder.lock();
  timed_holder.lock();

  zklock::mutex stopped_m{s, stopped_path}, timed_m{s, timed_path}, stuck_m{s, zkt::unique_path("fi-async-stuck")};
  zkt::completion stopped, timed, stuck;
  std::stop_source stop;
  stopped_m.async_lock(zklock::wait_context{steady_clock::now() + 10min, stop.get_token()}, stopped.callback());
  timed_m.async_lock(zklock::wait_context{steady_clock::now() + scaled(6000ms)}, timed.callback());
  for (const auto& p : {stopped_path, timed_path}) {  // both wait on a watch, no step running
    ASSERT_TRUE(zkt::await_children(p, 2));
    const auto holder = p + "/" + zkt::children(p).front();
    ASSERT_TRUE(zkt::await_watch(holder, s)) << "no watch on " << holder;
  }
  ASSERT_EQ(proxy.command("cut"), "ok cut");
  ASSERT_TRUE(s.wait_for(zklock::session_state::suspended, scaled(30s))) << "the client never noticed";
  stuck_m.async_lock(stuck.callback());  // no deadline: its first step waits for the connection
  stop.request_stop();

  ASSERT_TRUE(stopped.wait(scaled(30s))) << "the stopped acquire waited behind the stuck one";
  EXPECT_EQ(stopped.code(), std::error_code{zklock::errc::cancelled}) << stopped.code().message();
  EXPECT_EQ(stuck.calls(), 0) << "the connection is cut: the stuck acquire cannot have completed";
  EXPECT_EQ(s.state(), zklock::session_state::suspended) << "completed only once the session was given up";
  ASSERT_TRUE(timed.wait(scaled(30s))) << "the timed acquire waited behind the stuck one";
  EXPECT_EQ(timed.code(), std::error_code{zklock::errc::lock_timeout}) << timed.code().message();
  EXPECT_EQ(stuck.calls(), 0);
  EXPECT_EQ(s.state(), zklock::session_state::suspended) << "completed only once the session was given up";

  EXPECT_EQ(proxy.command("heal"), "ok normal");
  ASSERT_TRUE(stuck.wait(scaled(60s))) << "the stuck acquire never went on after the connection came back";
  EXPECT_EQ(stuck.code(), std::error_code{}) << stuck.code().message();
  EXPECT_TRUE(stuck.hold().owns_lock());
  stuck.hold().unlock();
  stopped_holder.unlock();
  timed_holder.unlock();
  hs.close();
  s.close();
  EXPECT_TRUE(zkt::children(stopped_path).empty());
  EXPECT_TRUE(zkt::children(timed_path).empty());
}

/// Returns: how many threads this process has (the entries of /proc/self/task).
std::size_t thread_count() {
  std::size_t n = 0;
  if (DIR* d = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(d)) n += e->d_name[0] != '.';
    ::closedir(d);
  }
  return n;
}

// Issue 25: a session's asynchronous acquires keep their requests in flight together, each step
// waiting for its reply without a thread of its own. 200 acquires of fresh paths each send their
// first requests (the lock node's create, the contender's transaction with the ACL probe, a multi,
// and the listing) into a silent partition: the proxy holds all 200 transactions at once (a thread
// per waiting step would hold no more requests than it has threads), while the runner has started
// no more threads than its few step threads, its timer and its completion thread. After the heal
// every acquire is granted once.
TEST(FaultInjection, TwoHundredAsyncStepsWaitForTheirRepliesTogetherOnAFewThreads) {
  zkt::private_server zk;
  zk_proxy proxy{zk.connect()};
  const auto timeout = scaled(20000ms);
  auto o = opts(proxy.connect(), timeout);
  o.loss_tolerance = timeout;
  zklock::session s{o};
  const std::string base = zkt::unique_path("fi-async-many");
  constexpr std::size_t n = 200;
  std::vector<std::unique_ptr<zklock::mutex>> locks;
  for (std::size_t i = 0; i < n; ++i) locks.push_back(std::make_unique<zklock::mutex>(s, base + "/p" + std::to_string(i)));
  const std::size_t threads_before = thread_count();  // no runner yet: this session's first acquires

  ASSERT_EQ(proxy.command("blackhole"), "ok blackhole");
  std::vector<zkt::completion> done(n);
  for (std::size_t i = 0; i < n; ++i) locks[i]->async_lock(done[i].callback());
  const auto deadline = steady_clock::now() + scaled(8000ms);
  std::string held;
  std::size_t most_threads = 0;
  while ((held = proxy.command("held 14")) != "ok " + std::to_string(n) && steady_clock::now() < deadline) {
    most_threads = std::max(most_threads, thread_count());
    std::this_thread::sleep_for(5ms);  // polling the proxy's count, bounded by the deadline
  }
  most_threads = std::max(most_threads, thread_count());
  EXPECT_EQ(held, "ok " + std::to_string(n)) << "not every acquire's first request was in flight at once";
  // the runner: up to 4 step threads, its timer thread and its completion thread
  EXPECT_LE(most_threads, threads_before + 6) << "the waiting steps took threads of their own";
  for (const auto& d : done) EXPECT_EQ(d.calls(), 0) << "completed while no reply could come";

  ASSERT_EQ(proxy.command("heal"), "ok normal");
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(done[i].wait(scaled(60s))) << "acquire " << i << " never completed";
    EXPECT_EQ(done[i].code(), std::error_code{}) << done[i].code().message();
    EXPECT_EQ(done[i].calls(), 1);
    EXPECT_TRUE(done[i].hold().owns_lock());
    EXPECT_EQ(zkt::children(base + "/p" + std::to_string(i)).size(), 1u);
    done[i].hold().unlock();
  }
  s.close();
  for (std::size_t i = 0; i < n; ++i) EXPECT_TRUE(zkt::children(base + "/p" + std::to_string(i)).empty());
}

}  // namespace

// This binary is also the holder child: `--zklock-fault-child ...` runs a role instead of the
// tests. (This main() replaces GTest::gtest_main's, which the linker then does not pull in.)
int main(int argc, char** argv) {
  if (argc > 1 && std::string_view{argv[1]} == child_flag) return child_main(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);  // a child that died must fail a test, not kill the binary
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
