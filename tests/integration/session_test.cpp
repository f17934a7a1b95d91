// SPDX-License-Identifier: Apache-2.0
// zklock::session on a real server: connect, chroot, digest auth, state listeners, expiry and
// re-establishment, on_live_session (work done again on the next session), bad input, log routing
// and close.
#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <future>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <vector>
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zklock::session_state;
using steady = std::chrono::steady_clock;

// ---- helpers ---------------------------------------------------------------------------------------

/// Records the states a session reports (listeners run on another thread) and lets a test wait
/// for a pattern without sleeping. Declare it before the session it listens to.
class state_log {
 public:
  zklock::state_listener listener() {
    return [this](session_state s) {
      {
        std::lock_guard lk{mu_};
        states_.push_back(s);
      }
      cv_.notify_all();
    };
  }

  /// Returns: whether `pred(states)` became true within `timeout`.
  bool wait(const std::function<bool(const std::vector<session_state>&)>& pred, std::chrono::milliseconds timeout) {
    std::unique_lock lk{mu_};
    return cv_.wait_for(lk, timeout, [&] { return pred(states_); });
  }

  std::vector<session_state> states() const {
    std::lock_guard lk{mu_};
    return states_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<session_state> states_;
};

/// Returns: whether `want` occurs in `seen` in this order (other states may come in between).
bool in_order(const std::vector<session_state>& seen, std::initializer_list<session_state> want) {
  auto w = want.begin();
  for (session_state s : seen)
    if (w != want.end() && s == *w) ++w;
  return w == want.end();
}

std::string describe(const std::vector<session_state>& v) {
  std::string out;
  for (session_state s : v) out += std::string{out.empty() ? "" : ", "} + zklock::to_string(s);
  return "[" + out + "]";
}

using zkt::expect_error;

/// Shows control characters and NUL of a test input.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (static_cast<unsigned char>(c) < 0x20) {
      out += "\\x" + std::to_string(static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return "\"" + out + "\"";
}

/// Redirects file descriptor 2 to a temporary file until finish().
class stderr_capture {
 public:
  stderr_capture() {
    char name[] = "/tmp/zklock-session-test-stderr-XXXXXX";
    const int fd = ::mkstemp(name);
    if (fd < 0) throw std::runtime_error("mkstemp failed");
    path_ = name;
    std::fflush(stderr);
    saved_ = ::dup(2);
    ::dup2(fd, 2);
    ::close(fd);
  }
  stderr_capture(const stderr_capture&) = delete;
  stderr_capture& operator=(const stderr_capture&) = delete;
  ~stderr_capture() { finish(); }

  /// Effects: restores fd 2. Returns: what was written to it meanwhile.
  std::string finish() {
    if (saved_ < 0) return text_;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
    const int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd >= 0) {
      char buf[4096];
      for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) text_.append(buf, static_cast<std::size_t>(n));
      ::close(fd);
    }
    ::unlink(path_.c_str());
    return text_;
  }

 private:
  std::string path_;
  int saved_ = -1;
  std::string text_;
};

/// Generous bound for anything that waits on the server: turns a hang into a failure.
constexpr auto patience = 30s;

/// Effects: runs `f` on another thread; if it has not returned within 4 x `patience` (a
/// deadlock), says so and aborts the test program, which would otherwise hang.
void run_bounded(const char* what, const std::function<void()>& f) {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  std::thread t{[&] {
    try {
      f();
    } catch (const std::exception& e) {
      ADD_FAILURE() << what << ": unexpected exception " << e.what();
    }
    {
      std::lock_guard lk{mu};
      done = true;
    }
    cv.notify_all();
  }};
  std::unique_lock lk{mu};
  if (!cv.wait_for(lk, 4 * patience, [&] { return done; })) {
    std::fprintf(stderr, "%s did not return within %lld s: deadlock\n", what,
                 static_cast<long long>(std::chrono::seconds{4 * patience}.count()));
    std::abort();
  }
  lk.unlock();
  t.join();
}

// ---- connect -----------------------------------------------------------------------------------------

void expect_established(const zklock::session& s) {
  EXPECT_EQ(s.state(), session_state::connected);
  EXPECT_NE(s.id(), 0);
  EXPECT_EQ(s.generation(), 1u);
  EXPECT_GT(s.negotiated_timeout(), 0ms);
}

TEST(SessionConnect, FromAConnectString) {
  zklock::session s{zkt::connect()};
  expect_established(s);
  EXPECT_EQ(s.options().connect, zkt::connect());
  EXPECT_TRUE(s.wait_for(session_state::connected, 0ms));
}

TEST(SessionConnect, FromOptions) {
  const auto o = zkt::options(4000ms);
  zklock::session s{o};
  expect_established(s);
  EXPECT_LE(s.negotiated_timeout(), 4000ms);  // the test server's bounds allow what we asked
  EXPECT_EQ(s.options().session_timeout, 4000ms);
  zklock::session other{o};
  EXPECT_NE(other.id(), s.id());
}

// ---- chroot --------------------------------------------------------------------------------------------

TEST(SessionChroot, EveryPathIsUnderTheChroot) {
  const auto root = zkt::unique_path("chroot");
  zkt::create_path(root);
  ASSERT_TRUE(zkt::exists(root));
  auto o = zkt::options();
  o.connect = zkt::connect() + root;
  zklock::session s{o};
  EXPECT_EQ(s.state(), session_state::connected);
  zklock::mutex m{s, "/locks/a"};
  m.lock();
  const auto kids = zkt::children(root + "/locks/a");  // the observer has no chroot
  ASSERT_EQ(kids.size(), 1u);
  EXPECT_EQ(kids[0].rfind("_c_", 0), 0u) << kids[0];
  m.unlock();
  EXPECT_TRUE(zkt::children(root + "/locks/a").empty());
}

// The connect-string constructor takes a chroot too.
TEST(SessionChroot, FromAConnectString) {
  const auto root = zkt::unique_path("chroot-string");
  zkt::create_path(root);
  zklock::session s{zkt::connect() + root};
  EXPECT_EQ(s.state(), session_state::connected);
  zklock::mutex m{s, "/locks/b"};
  m.lock();
  EXPECT_EQ(zkt::children(root + "/locks/b").size(), 1u);
  EXPECT_FALSE(zkt::exists("/locks/b"));
  m.unlock();
  EXPECT_TRUE(zkt::children(root + "/locks/b").empty());
  EXPECT_THROW(zklock::session{zkt::connect() + zkt::unique_path("no-such-chroot")}, std::system_error);
}

TEST(SessionChroot, MissingChrootIsRefused) {
  auto o = zkt::options();
  o.connect = zkt::connect() + zkt::unique_path("no-such-chroot");
  expect_error([&] { zklock::session s{o}; }, zklock::errc::chroot_missing, "missing chroot");
}

// ---- digest auth --------------------------------------------------------------------------------------------

TEST(SessionAuth, DigestCredentialsAreSentAndEnforced) {
  zkt::create_path("/zklock-test");
  const auto node = zkt::unique_path("acl");
  zkt::digest_client alice_raw{"alice", "secret"};
  ASSERT_EQ(alice_raw.create_private(node), 0);
  {
    zkt::digest_client bob_raw{"bob", "secret"};
    ASSERT_FALSE(bob_raw.children(node)) << "the node's ACL does not keep bob out";
  }

  {  // alice may create under her node
    auto o = zkt::options();
    o.auth = {zklock::digest("alice", "secret")};
    zklock::session s{o};
    zklock::mutex m{s, node};
    m.lock();
    const auto kids = alice_raw.children(node);
    ASSERT_TRUE(kids);
    EXPECT_EQ(kids->size(), 1u);
    m.unlock();
    EXPECT_EQ(alice_raw.children(node), std::vector<std::string>{});
  }

  auto bob = zkt::options();
  bob.auth = {zklock::digest("bob", "secret")};
  auto nobody = zkt::options();
  for (const auto* o : {&bob, &nobody}) {
    const std::string who = o->auth.empty() ? "no auth" : "bob";
    zklock::session s{*o};
    for (const std::string& path : {node, node + "/deeper"}) {
      zklock::mutex m{s, path};
      expect_error([&] { m.lock(); }, zklock::errc::no_auth, who + " lock() on " + path);
      expect_error([&] { (void)m.try_lock(); }, zklock::errc::no_auth, who + " try_lock() on " + path);
      EXPECT_FALSE(m.owns_lock());
    }
    EXPECT_EQ(s.state(), session_state::connected) << who;
  }
  EXPECT_EQ(alice_raw.children(node), std::vector<std::string>{}) << "a refused attempt left a node behind";
  alice_raw.remove_tree(node);
}

TEST(SessionAuth, UnknownSchemeFailsTheConstructor) {
  auto o = zkt::options();
  o.auth = {zklock::auth_info{"bogus", "x"}};
  expect_error([&] { zklock::session s{o}; }, zklock::errc::auth_failed, "scheme bogus");
}

TEST(SessionAuth, DigestChecksTheUserName) {
  const auto a = zklock::digest("alice", "p:w");
  EXPECT_EQ(a.scheme, "digest");
  EXPECT_EQ(a.credential, "alice:p:w");
  EXPECT_THROW((void)zklock::digest("", "x"), std::invalid_argument);
  EXPECT_THROW((void)zklock::digest("a:b", "x"), std::invalid_argument);
}

// ---- state listeners, expiry, re-establishment -------------------------------------------------------------

TEST(SessionExpiry, ListenerSeesExpiryThenANewSession) {
  state_log log;
  zklock::session s{zkt::options()};
  s.add_state_listener(log.listener());
  const auto first_id = s.id();
  const auto path = zkt::unique_path("expiry");
  zklock::mutex m{s, path};
  m.lock();
  ASSERT_EQ(zkt::children(path).size(), 1u);

  ASSERT_TRUE(zkt::expire(s)) << describe(log.states());
  const bool reestablished = log.wait(
      [](const auto& v) {
        return in_order(v, {session_state::expired, session_state::connecting, session_state::connected});
      },
      patience);
  ASSERT_TRUE(reestablished) << describe(log.states());
  const auto seen = log.states();
  EXPECT_FALSE(in_order(seen, {session_state::closed})) << describe(seen);
  EXPECT_EQ(s.state(), session_state::connected);
  EXPECT_EQ(s.generation(), 2u);
  EXPECT_NE(s.id(), first_id);
  EXPECT_NE(s.id(), 0);
  EXPECT_TRUE(zkt::children(path).empty()) << "the expired session's node survived";

  m.unlock();  // the hold went with the old session: nothing to delete
  m.lock();
  EXPECT_EQ(zkt::children(path).size(), 1u);
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(SessionExpiry, WithoutAutomaticReestablishmentItStaysExpired) {
  auto o = zkt::options();
  o.reestablish_after_expiry = false;
  zklock::session s{o};
  const auto first_id = s.id();
  s.reestablish();  // alive: does nothing
  EXPECT_EQ(s.generation(), 1u);
  EXPECT_EQ(s.id(), first_id);

  ASSERT_TRUE(zkt::expire(s));
  ASSERT_TRUE(s.wait_for(session_state::expired, patience));
  EXPECT_EQ(s.state(), session_state::expired);
  EXPECT_EQ(s.generation(), 1u);
  const auto path = zkt::unique_path("expired");
  zklock::mutex m{s, path};
  expect_error([&] { m.lock(); }, zklock::errc::session_expired, "lock() on an expired session");
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(s.state(), session_state::expired);

  s.reestablish();
  EXPECT_EQ(s.state(), session_state::connected);
  EXPECT_EQ(s.generation(), 2u);
  EXPECT_NE(s.id(), first_id);
  m.lock();
  EXPECT_EQ(zkt::children(path).size(), 1u);
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

/// A wake-up policy whose waiter, the first time one is made after arm(), holds up the acquire
/// making it until go(): an attempt makes its waiter right after its create and listing, before it
/// watches the contenders ahead, so a test can end the session exactly there.
struct paused_wakeup {
  static constexpr bool fresh_per_wait = false;
  class waiter final : public zklock::wake_target {
   public:
    waiter() {
      std::unique_lock lk{gate().mu};
      if (!std::exchange(gate().armed, false)) return;
      gate().paused = true;
      gate().cv.notify_all();
      gate().cv.wait(lk, [] { return gate().open; });
    }
    void wake() noexcept override { inner_.wake(); }
    void reset() { inner_.reset(); }
    bool wait_until(std::chrono::steady_clock::time_point d) { return inner_.wait_until(d); }

   private:
    zklock::wake_condition_variable::waiter inner_;
  };
  /// Effects: the next waiter made pauses its acquire.
  static void arm() {
    std::lock_guard lk{gate().mu};
    gate().armed = true;
    gate().paused = gate().open = false;
  }
  /// Returns: whether an acquire paused within `limit`.
  static bool await_paused(std::chrono::milliseconds limit) {
    std::unique_lock lk{gate().mu};
    return gate().cv.wait_for(lk, limit, [] { return gate().paused; });
  }
  /// Effects: lets the paused acquire (if any) go on; no later one pauses.
  static void go() {
    {
      std::lock_guard lk{gate().mu};
      gate().armed = false;
      gate().open = true;
    }
    gate().cv.notify_all();
  }

 private:
  struct gate_state {
    std::mutex mu;
    std::condition_variable cv;
    bool armed = false, paused = false, open = false;
  };
  static gate_state& gate() {
    static gate_state g;
    return g;
  }
};

// A waiter whose session ends between its listing and its watches (held there until the next
// session is connected) queues again on the next session. It must not arm its watches on the new
// session's handle: it would wait there, unseen by the queue, for contenders ahead of a node that
// went with the old session (it did, until bba099f; seen as a rare CI failure of the CLI's
// CliFaults.WaiterWhoseSessionExpiresQueuesAgainAndRunsCommand).
TEST(SessionExpiry, AWaiterWhoseSessionEndsBeforeItWatchesQueuesAgainOnTheNext) {
  const auto path = zkt::unique_path("expiry-before-watch");
  zklock::session holder_s{zkt::options()};
  zklock::mutex holder{holder_s, path};
  holder.lock();
  zklock::session s{zkt::options()};
  zklock::basic_mutex<zklock::policies_with<paused_wakeup>> m{s, path};
  const auto first = s.generation();
  paused_wakeup::arm();
  std::atomic<int> got{-1};
  std::thread waiter{[&] {
    try {
      const bool locked = m.try_lock_for(4 * patience);
      if (locked) m.unlock();  // (by the thread that holds it, as for std::mutex)
      got = locked ? 1 : 0;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "try_lock_for threw: %s\n", e.what());
      got = 2;
    }
  }};
  // No ASSERT until the thread is joined: each step runs only if the one before it worked.
  const bool paused = paused_wakeup::await_paused(patience);
  EXPECT_TRUE(paused) << "the acquire never made its waiter";
  const bool queued = paused && zkt::children(path).size() == 2;
  EXPECT_TRUE(queued) << "not queued behind the holder when its waiter was made";
  const bool expired = queued && zkt::expire(s);
  EXPECT_TRUE(expired);
  const bool next = expired && s.wait_for(session_state::connected, patience) && s.generation() > first;
  EXPECT_TRUE(next) << "no next session";
  paused_wakeup::go();
  bool again = false;
  if (next) {
    const auto until = steady::now() + patience;
    while (!again && steady::now() < until) {
      for (const auto& kid : zkt::children(path))
        if (zkt::stat_node(path + "/" + kid).ephemeral_owner == static_cast<std::int64_t>(s.id())) again = true;
      if (!again) std::this_thread::sleep_for(10ms);  // polling the server, not a synchronisation
    }
  }
  EXPECT_TRUE(again) << "the waiter did not queue again on its next session";
  holder.unlock();
  waiter.join();
  EXPECT_EQ(got.load(), 1);
  std::string left;
  for (const auto& kid : zkt::children(path))
    left += kid + " (session " + std::to_string(zkt::stat_node(path + "/" + kid).ephemeral_owner) + ") ";
  EXPECT_EQ(left, "") << "holder " << holder_s.id() << ", waiter " << s.id();
}

// ---- on_live_session: the same work again on the next session ----------------------------------------------

/// Throws: std::system_error(errc::session_expired), as a call does whose session ended under it.
[[noreturn]] void session_ended(const char* what) {
  throw std::system_error(zklock::make_error_code(zklock::errc::session_expired), what);
}

// The work runs again once the next session is connected, and its value is returned; the generation
// it saw first is the one that ended.
TEST(OnLiveSession, RunsTheWorkAgainOnTheNextSession) {
  zklock::session s{zkt::options()};
  std::vector<std::uint64_t> generations;
  const auto got = zklock::on_live_session(s, {steady::now() + patience}, [&] {
    generations.push_back(s.generation());
    if (generations.size() == 1) {
      if (!zkt::expire(s)) throw std::runtime_error("could not expire the session");
      session_ended("the first look");
    }
    return s.generation();
  });
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(*got, 2u);
  EXPECT_EQ(generations, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(s.state(), session_state::connected);
}

// Any other failure is the work's own: thrown at once, not run again; a value comes back as it is.
TEST(OnLiveSession, OtherErrorsAndValuesPassThrough) {
  zklock::session s{zkt::options()};
  int calls = 0;
  expect_error(
      [&] {
        (void)zklock::on_live_session(s, {}, [&]() -> int {
          ++calls;
          throw std::system_error(zklock::errc::no_node, "the work's own failure");
        });
      },
      zklock::errc::no_node, "on_live_session(work that fails)");
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(zklock::on_live_session(s, {}, [] { return std::string{"value"}; }), std::optional<std::string>{"value"});
}

// No next session before the deadline (this one never ended): the work's own session_expired.
TEST(OnLiveSession, RethrowsTheExpiryWhenNoNextSessionComesInTime) {
  zklock::session s{zkt::options()};
  try {
    (void)zklock::on_live_session(s, {steady::now() + 50ms}, []() -> int { session_ended("the work's expiry"); });
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(zklock::errc::session_expired)) << e.what();
    EXPECT_NE(std::string_view{e.what()}.find("the work's expiry"), std::string_view::npos) << e.what();
  }
}

// None will come: re-establishment is off, or the session was closed.
TEST(OnLiveSession, FailsWhenNoNextSessionWillCome) {
  auto o = zkt::options();
  o.reestablish_after_expiry = false;
  zklock::session s{o};
  int calls = 0;
  expect_error(
      [&] {
        (void)zklock::on_live_session(s, {steady::now() + patience}, [&]() -> int {
          ++calls;
          if (!zkt::expire(s)) throw std::runtime_error("could not expire the session");
          session_ended("the work");
        });
      },
      zklock::errc::session_expired, "on_live_session without re-establishment");
  EXPECT_EQ(calls, 1);

  zklock::session t{zkt::options()};
  expect_error(
      [&] {
        (void)zklock::on_live_session(t, {steady::now() + patience}, [&]() -> int {
          t.close();
          session_ended("the work");
        });
      },
      zklock::errc::session_closed, "on_live_session on a session closed under the work");
}

// A stop request ends the wait for the next session: nullopt, and the work does not run again.
TEST(OnLiveSession, StopWhileWaitingForTheNextSessionGivesNullopt) {
  zklock::session s{zkt::options()};
  std::stop_source stop;
  std::thread stopper;
  int calls = 0;
  const auto got = zklock::on_live_session(s, {steady::time_point::max(), stop.get_token()}, [&]() -> int {
    ++calls;
    // This session never ends: the wait for the next one lasts until the stop request.
    stopper = std::thread{[&] { stop.request_stop(); }};
    session_ended("the work");
  });
  stopper.join();
  EXPECT_FALSE(got.has_value());
  EXPECT_EQ(calls, 1);

  std::stop_source stopped;
  stopped.request_stop();
  EXPECT_FALSE(zklock::on_live_session(s, {steady::time_point::max(), stopped.get_token()}, []() -> int {
                 session_ended("the work");
               }).has_value())
      << "stopped already when the session ended under the work";
}

// credentials() is what a second handle needs to join the session: only the right password ends it
// from outside; without a live session there are none.
TEST(SessionCredentials, LetASecondHandleEndTheSession) {
  auto o = zkt::options();
  o.reestablish_after_expiry = false;
  zklock::session s{o};
  const zklock::session_credentials c = s.credentials();
  EXPECT_NE(c.id, 0);
  EXPECT_EQ(c.id, s.id());
  EXPECT_EQ(c.password.size(), 16u);

  // A wrong password: the server refuses the second handle (it is told "expired"), ours lives on.
  std::string wrong = c.password;
  wrong[0] = static_cast<char>(wrong[0] ^ 0x5a);
  ASSERT_TRUE(zkt::expire_session(c.id, wrong));
  s.flush();
  EXPECT_EQ(s.state(), session_state::connected);
  EXPECT_EQ(s.id(), c.id);

  // The right one: the second handle joins the session and closes it.
  ASSERT_TRUE(zkt::expire_session(c.id, c.password));
  ASSERT_TRUE(s.wait_for(session_state::expired, patience));
  expect_error([&] { (void)s.credentials(); }, zklock::errc::session_expired, "credentials() once expired");

  s.close();
  expect_error([&] { (void)s.credentials(); }, zklock::errc::session_closed, "credentials() after close()");
}

TEST(SessionListeners, RemovedListenersAreNotCalledAndThrowingOnesDoNoHarm) {
  state_log kept;
  std::atomic<int> removed_calls{0};
  std::atomic<int> throwing_calls{0};
  zklock::session s{zkt::options()};
  // Listeners run in the order they were added: the throwing one comes first.
  const auto thrower = s.add_state_listener([&](session_state) {
    ++throwing_calls;
    throw std::runtime_error("a listener failed");
  });
  const auto removed = s.add_state_listener([&](session_state) { ++removed_calls; });
  const auto kept_id = s.add_state_listener(kept.listener());
  EXPECT_NE(thrower, removed);
  EXPECT_NE(removed, kept_id);
  s.remove_state_listener(removed);

  ASSERT_TRUE(zkt::expire(s));
  const bool reestablished = kept.wait(
      [](const auto& v) {
        return in_order(v, {session_state::expired, session_state::connecting, session_state::connected});
      },
      patience);
  ASSERT_TRUE(reestablished) << describe(kept.states());
  EXPECT_EQ(removed_calls.load(), 0);
  EXPECT_GE(throwing_calls.load(), 3);  // expired, connecting, connected at least

  // The session works after its listener threw.
  EXPECT_EQ(s.state(), session_state::connected);
  const auto path = zkt::unique_path("after-throw");
  zklock::mutex m{s, path};
  m.lock();
  EXPECT_EQ(zkt::children(path).size(), 1u);
  m.unlock();

  // Removal also stops the call made by close().
  const auto before_close = kept.states().size();
  s.remove_state_listener(kept_id);
  s.close();
  EXPECT_EQ(kept.states().size(), before_close) << describe(kept.states());
  EXPECT_EQ(removed_calls.load(), 0);
}

// A listener may call the session back: these two run under run_bounded, as a deadlock there
// would otherwise hang the whole program.
TEST(SessionListeners, ListenersMayAddAndRemoveListeners) {
  run_bounded("ListenersMayAddAndRemoveListeners", [] {
    state_log added_log;
    std::atomic<int> self_removing_calls{0};
    std::atomic<int> closing_calls{0};
    std::atomic<std::uint64_t> self_id{0};
    std::atomic<std::uint64_t> closing_id{0};
    zklock::session s{zkt::options()};
    // On the session's thread: remove itself and add another.
    self_id = s.add_state_listener([&](session_state) {
      ++self_removing_calls;
      s.remove_state_listener(self_id);
      s.add_state_listener(added_log.listener());
    });
    ASSERT_TRUE(zkt::expire(s));
    const bool reestablished = added_log.wait(
        [](const auto& v) { return in_order(v, {session_state::connecting, session_state::connected}); }, patience);
    ASSERT_TRUE(reestablished) << describe(added_log.states());
    EXPECT_EQ(self_removing_calls.load(), 1);

    // On the thread that calls close().
    closing_id = s.add_state_listener([&](session_state st) {
      ++closing_calls;
      EXPECT_EQ(st, session_state::closed);
      s.remove_state_listener(closing_id);
    });
    s.close();
    EXPECT_EQ(closing_calls.load(), 1);
    EXPECT_EQ(s.state(), session_state::closed);
    EXPECT_TRUE(in_order(added_log.states(), {session_state::connected, session_state::closed}))
        << describe(added_log.states());
  });
}

TEST(SessionListeners, AListenerMayCloseTheSession) {
  run_bounded("AListenerMayCloseTheSession", [] {
    state_log log;
    auto s = std::make_unique<zklock::session>(zkt::options());
    s->add_state_listener(log.listener());
    s->add_state_listener([&](session_state st) {
      if (st == session_state::expired) s->close();
    });
    ASSERT_TRUE(zkt::expire(*s));
    ASSERT_TRUE(s->wait_for(session_state::closed, patience)) << describe(log.states());
    EXPECT_EQ(s->generation(), 1u) << "a closed session was re-established";
    zklock::mutex m{*s, zkt::unique_path("closed-by-listener")};
    expect_error([&] { m.lock(); }, zklock::errc::session_closed, "lock() after a listener closed the session");
    EXPECT_EQ(s->state(), session_state::closed);
    s.reset();  // joins the session's thread, which ran close()
    const auto seen = log.states();
    EXPECT_TRUE(in_order(seen, {session_state::expired, session_state::closed})) << describe(seen);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), session_state::closed) << "a state after closed: " << describe(seen);
  });
}

// close() while the session's thread is still busy with an earlier change (a slow listener): the
// changes queued behind it, here the expiry, reach the listeners before `closed` (they were
// dropped: a listener counting expiries missed this one).
TEST(SessionListeners, ChangesQueuedWhenCloseIsCalledAreDeliveredBeforeClosed) {
  run_bounded("ChangesQueuedWhenCloseIsCalledAreDeliveredBeforeClosed", [] {
    state_log log;
    zklock::session s{zkt::options()};
    s.add_state_listener(log.listener());
    std::mutex mu;
    std::condition_variable cv;
    bool go = false;
    s.add_state_listener([&](session_state st) {  // holds the session's thread on the first suspension
      if (st != session_state::suspended) return;
      std::unique_lock lk{mu};
      cv.wait(lk, [&] { return go; });
    });
    // Expired from outside (no helper that adds or removes listeners: that would wait for ours).
    ASSERT_TRUE(zkt::expire_session(s.id(), s.credentials().password));
    ASSERT_TRUE(s.wait_for(session_state::expired, patience)) << describe(log.states());
    std::thread closer{[&] { s.close(); }};
    // Once close() has begun (operations fail with session_closed), let the session's thread go.
    bool closing = false;
    for (const auto until = steady::now() + patience; !closing && steady::now() < until;) {
      try {
        s.flush();
      } catch (const std::system_error& e) {
        closing = e.code() == zklock::make_error_code(zklock::errc::session_closed);
      }
      if (!closing) std::this_thread::sleep_for(1ms);  // polling
    }
    {
      std::lock_guard lk{mu};
      go = true;
    }
    cv.notify_all();
    closer.join();
    ASSERT_TRUE(closing) << "close() never began";
    const auto seen = log.states();
    EXPECT_TRUE(in_order(seen, {session_state::suspended, session_state::expired, session_state::closed}))
        << describe(seen);
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), session_state::closed) << describe(seen);
  });
}

// ---- bad input -------------------------------------------------------------------------------------------------

TEST(SessionBadInput, MalformedInputIsRejectedAtOnce) {
  const std::string good = zkt::connect();
  const std::vector<std::string> connects = {
      "",
      "127.0.0.1",
      "127.0.0.1:",
      "127.0.0.1:abc",
      "127.0.0.1:0",
      "127.0.0.1:99999",
      "127.0.0.1:65536",
      "127.0.0.1:-1",
      ":2181",
      "127.0.0.1:2181,",
      "127.0.0.1:2181,,127.0.0.1:2182",
      "127.0.0.1 :2181",
      "[::1]2181",
      good + "/",
      good + "//x",
      good + "/a/../b",
      good + "/a/./b",
      good + std::string{"/a\0b", 4},
      good + "/a\nb",
      good + "/zookeeper",
      good + "/zookeeper/quota",
  };
  for (const auto& c : connects) {
    SCOPED_TRACE("connect " + printable(c));
    const auto t0 = steady::now();
    EXPECT_THROW({ zklock::session s{std::string_view{c}}; }, std::invalid_argument);
    auto o = zkt::options();
    o.connect = c;
    o.connect_timeout = 2s;  // a missing check fails in 2 s rather than hanging
    EXPECT_THROW({ zklock::session s{o}; }, std::invalid_argument);
    EXPECT_LT(steady::now() - t0, 1s);
  }

  struct bad_option {
    const char* what;
    std::function<void(zklock::session_options&)> apply;
  };
  const std::vector<bad_option> options = {
      {"session_timeout 0", [](auto& o) { o.session_timeout = 0ms; }},
      {"session_timeout -5 ms", [](auto& o) { o.session_timeout = -5ms; }},
      {"session_timeout 25 h", [](auto& o) { o.session_timeout = 25h; }},
      {"connect_timeout 0", [](auto& o) { o.connect_timeout = 0ms; }},
      {"connect_timeout -1 ms", [](auto& o) { o.connect_timeout = -1ms; }},
      {"empty auth scheme", [](auto& o) { o.auth = {zklock::auth_info{"", "x"}}; }},
      {"NUL in the credential", [](auto& o) { o.auth = {zklock::auth_info{"digest", std::string{"u:p\0w", 5}}}; }},
      {"NUL in the scheme", [](auto& o) { o.auth = {zklock::auth_info{std::string{"dig\0est", 7}, "u:p"}}; }},
      {"1 MiB credential", [](auto& o) { o.auth = {zklock::digest("u", std::string(1 << 20, 'p'))}; }},
      {"negative loss_tolerance", [](auto& o) { o.loss_tolerance = -1ms; }},
      {"negative look_ahead_round_trip", [](auto& o) { o.look_ahead_round_trip = -1us; }},
  };
  for (const auto& b : options) {
    SCOPED_TRACE(b.what);
    auto o = zkt::options();
    b.apply(o);
    const auto t0 = steady::now();
    EXPECT_THROW({ zklock::session s{o}; }, std::invalid_argument);
    EXPECT_LT(steady::now() - t0, 1s);
  }
}

TEST(SessionBadInput, NobodyListeningIsAConnectTimeout) {
  auto o = zkt::options();
  o.connect = "127.0.0.1:" + std::to_string(zkt::free_port());
  o.connect_timeout = 300ms;
  const auto t0 = steady::now();
  expect_error([&] { zklock::session s{o}; }, zklock::errc::connect_timeout, o.connect);
  EXPECT_GE(steady::now() - t0, o.connect_timeout) << "gave up before connect_timeout";
  EXPECT_LT(steady::now() - t0, 10s);
}

// ---- log routing ------------------------------------------------------------------------------------------------

TEST(SessionLog, SilentByDefaultAndRoutedToAHandler) {
  std::atomic<int> lines{0};
  std::mutex mu;
  std::vector<std::string> sample;
  struct reset {
    ~reset() { zklock::set_log_handler({}); }
  } reset_at_exit;
  zkt::default_client_log_level();  // INFO: the client has things to say at connect and close

  zklock::set_log_handler({});
  {
    stderr_capture err;
    {
      zklock::session s{zkt::options()};
      EXPECT_EQ(s.state(), session_state::connected);
      s.close();
    }
    EXPECT_EQ(err.finish(), "");
  }

  zklock::set_log_handler([&](std::string_view line) {
    ++lines;
    std::lock_guard lk{mu};
    if (sample.size() < 100) sample.emplace_back(line);
  });
  {
    stderr_capture err;
    {
      zklock::session s{zkt::options()};
      EXPECT_EQ(s.state(), session_state::connected);
    }
    EXPECT_EQ(err.finish(), "");
  }
  zklock::set_log_handler({});
  EXPECT_GT(lines.load(), 0);
  std::lock_guard lk{mu};
  bool names_server = false;
  for (const auto& l : sample) names_server = names_server || l.find(zkt::connect()) != std::string::npos;
  EXPECT_TRUE(names_server) << "no line mentions " << zkt::connect();
}

// ---- close ---------------------------------------------------------------------------------------------------------

TEST(SessionClose, ClosedSessionRefusesEverything) {
  state_log log;
  zklock::session s{zkt::options()};
  s.add_state_listener(log.listener());
  const auto path = zkt::unique_path("closed");
  zklock::mutex held{s, path};
  held.lock();
  ASSERT_EQ(zkt::children(path).size(), 1u);

  s.close();
  EXPECT_EQ(s.state(), session_state::closed);
  EXPECT_TRUE(s.wait_for(session_state::closed, 0ms));
  EXPECT_TRUE(zkt::children(path).empty()) << "close() left the session's node";
  EXPECT_EQ(log.states(), std::vector<session_state>{session_state::closed});

  zklock::mutex m{s, zkt::unique_path("after-close")};
  expect_error([&] { m.lock(); }, zklock::errc::session_closed, "lock() after close()");
  expect_error([&] { (void)m.try_lock(); }, zklock::errc::session_closed, "try_lock() after close()");
  expect_error([&] { s.reestablish(); }, zklock::errc::session_closed, "reestablish() after close()");

  s.close();  // twice is fine
  EXPECT_EQ(s.state(), session_state::closed);
  EXPECT_EQ(log.states(), std::vector<session_state>{session_state::closed});
  held.unlock();  // nothing left to delete; must not throw
}


/// Returns: the ids of this process's threads (the entries of /proc/self/task).
std::vector<std::string> thread_ids() {
  std::vector<std::string> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d))
      if (e->d_name[0] != '.') ids.emplace_back(e->d_name);
    closedir(d);
  }
  return ids;
}

/// Returns: how many threads this process has.
std::size_t thread_count() { return thread_ids().size(); }

// The check that stands in for LeakSanitizer on the C client's handles (the asan preset suppresses
// the client's own leak on close: tests/support/lsan-zookeeper-close.supp). Every handle runs two
// threads until zookeeper_close joins them, so a handle a session never closes -- on close(), on
// destruction, or when an expired session is replaced -- leaves threads behind.
TEST(SessionClose, AClosedSessionLeavesNoThreadBehind) {
  {  // whatever the process starts once (the test helpers' own handle, any library-wide thread)
    zklock::session warm{zkt::options()};
    (void)zkt::children("/");
  }
  const auto await_threads = [](std::size_t n) {
    const auto deadline = steady::now() + 10s;  // a joined thread leaves /proc a moment after the join
    while (thread_count() != n && steady::now() < deadline) std::this_thread::sleep_for(5ms);
    return thread_count();
  };
  const std::size_t before = await_threads(thread_count());
  {
    zklock::session closed{zkt::options()};
    zklock::mutex m{closed, zkt::unique_path("threads")};
    m.lock();
    closed.close();
    m.unlock();

    zklock::session destroyed{zkt::options()};
    zklock::shared_mutex rw{destroyed, zkt::unique_path("threads")};
    rw.lock_shared();
    rw.unlock_shared();

    state_log log;
    auto o = zkt::options();
    o.reestablish_after_expiry = true;
    zklock::session replaced{o};
    replaced.add_state_listener(log.listener());
    ASSERT_TRUE(zkt::expire(replaced));
    ASSERT_TRUE(log.wait([](const auto& v) { return in_order(v, {session_state::expired, session_state::connected}); },
                         30s))
        << describe(log.states());
    zklock::mutex again{replaced, zkt::unique_path("threads")};
    again.lock();
    again.unlock();
    EXPECT_GT(thread_count(), before) << "three live sessions and no thread of their own?";
  }
  EXPECT_EQ(await_threads(before), before) << "a session's handle was left open";
}

/// Returns: this process's threads, by id, with their names (/proc/self/task/ID/comm).
std::map<std::string, std::string> thread_names() {
  std::map<std::string, std::string> names;
  for (const auto& id : thread_ids()) {
    std::ifstream comm{"/proc/self/task/" + id + "/comm"};
    std::string name;
    if (std::getline(comm, name)) names.emplace(id, name);  // (a thread that just ended has none)
  }
  return names;
}

// Every thread a session starts says whose it is, in ps -L, top -H, perf and gdb: its I/O loop, its
// worker, the hold bounds' timer, and the asynchronous acquires' step, timer and completion threads.
TEST(SessionThreads, EveryThreadASessionStartsIsNamedForIt) {
  (void)zkt::children("/");  // the test helpers' own handle and its threads, before the snapshot
  const auto before = thread_names();
  zklock::session s{zkt::options()};
  zklock::mutex m{s, zkt::unique_path("named")};
  m.set_hold_bounds({.at_most = 1h});  // starts the session's hold timer
  m.lock();
  std::promise<std::error_code> granted;
  zklock::mutex other{s, zkt::unique_path("named-async")};
  other.async_lock([&](std::error_code ec, zklock::lock_hold h) {
    h.unlock();
    granted.set_value(ec);
  });
  auto done = granted.get_future();
  ASSERT_EQ(done.wait_for(60s), std::future_status::ready) << "no completion of the asynchronous acquire";
  EXPECT_FALSE(done.get());
  // A thread names itself as it starts: one just started (a step thread the completion's post
  // woke) may not have yet. Polled, not slept on: /proc is read until every new thread is named.
  const std::set<std::string> expected{"zklock-io", "zklock-worker", "zklock-holds", "zklock-step", "zklock-done"};
  std::set<std::string> started;
  for (const auto until = steady::now() + 10s; steady::now() < until; std::this_thread::sleep_for(1ms)) {
    started.clear();
    for (const auto& [id, name] : thread_names())
      if (!before.contains(id)) started.insert(name);
    if (std::ranges::all_of(started, [](const std::string& n) { return n.starts_with("zklock-"); }) &&
        std::ranges::includes(started, expected))
      break;
  }
  m.unlock();
  for (const auto& name : started) EXPECT_TRUE(name.starts_with("zklock-")) << "a thread named " << name;
  for (const auto& name : expected) EXPECT_TRUE(started.contains(name)) << "no thread named " << name;
}

}  // namespace

