// SPDX-License-Identifier: Apache-2.0
// The lost-lock signal: lost_token() fires when ownership can no longer be guaranteed (expiry,
// a disconnection longer than the loss tolerance, our node deleted by someone else), and only then.
// Each test runs its own server, since some pause it. Timeouts are scaled by ZKLOCK_FAULT_SCALE.
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "stop_probe.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// Waits for a loss signal (tests/support/stop_probe.hpp).
using loss_probe = zkt::stop_probe;

using zkt::scaled;

zklock::session_options opts(std::chrono::milliseconds timeout, bool reestablish = true) {
  auto o = zkt::options(scaled(timeout));
  o.reestablish_after_expiry = reestablish;
  return o;
}

TEST(LostLock, ExpiryFiresTheTokenAndAnotherClientAcquires) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-expiry");
  zklock::session holder_s{opts(2000ms)};
  zklock::mutex m{holder_s, path};
  m.lock();
  loss_probe probe{m.lost_token()};
  EXPECT_TRUE(m.still_owned());
  ASSERT_TRUE(zkt::expire(holder_s));
  ASSERT_TRUE(probe.wait(scaled(30s)));
  EXPECT_FALSE(m.still_owned());
  EXPECT_NO_THROW(m.unlock());  // safe and quiet on a lost lock
  zklock::session other{opts(2000ms)};
  zklock::mutex m2{other, path};
  EXPECT_TRUE(m2.try_lock_for(scaled(30s)));
  m2.unlock();
}

TEST(LostLock, NodeDeletedBySomeoneElseFiresTheToken) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-deleted");
  zklock::session s{opts(4000ms)};
  zklock::mutex m{s, path};
  m.lock();
  loss_probe probe{m.lost_token()};
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  EXPECT_FALSE(probe.wait(std::chrono::milliseconds{0}));
  ASSERT_TRUE(zkt::remove(path + "/" + kids[0]));
  ASSERT_TRUE(probe.wait(scaled(30s)));
  EXPECT_FALSE(m.still_owned());
  EXPECT_NO_THROW(m.unlock());
  EXPECT_EQ(s.state(), zklock::session_state::connected);  // the session itself is fine
  EXPECT_TRUE(m.try_lock_for(scaled(30s)));
  m.unlock();
}

TEST(LostLock, OwnUnlockNeverFiresTheToken) {
  zkt::private_server zk;
  zklock::session s{opts(4000ms)};
  zklock::mutex m{s, zkt::unique_path("lost-own-unlock")};
  m.lock();
  const auto token = m.lost_token();
  m.unlock();
  // The release deleted the watched node: make sure the watch event has been delivered by doing a
  // round trip after it on the same session (a session's events arrive in order).
  m.lock();
  m.unlock();
  EXPECT_FALSE(token.stop_requested());
  EXPECT_THROW((void)m.lost_token(), std::system_error);  // not held
}

TEST(LostLock, ServerPausedLongerThanToleranceIsReportedLocallyBeforeItReturns) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-paused");
  zklock::session s{opts(3000ms)};
  zklock::mutex m{s, path};
  m.lock();
  loss_probe probe{m.lost_token()};
  zk.pause();
  const bool fired_while_paused = probe.wait(scaled(30s));
  zk.resume();
  ASSERT_TRUE(fired_while_paused);
  EXPECT_FALSE(m.still_owned());
  EXPECT_NO_THROW(m.unlock());
  // The given-up session's node must not block the queue: it goes (closed or expired), and a new
  // client acquires.
  zklock::session other{opts(3000ms)};
  zklock::mutex m2{other, path};
  EXPECT_TRUE(m2.try_lock_for(scaled(30s)));
  m2.unlock();
  EXPECT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));  // re-established by itself
  EXPECT_EQ(s.generation(), 2u);
}

// A server stall long enough for the client to notice (it suspends at 2/3 of the timeout) but
// shorter than the loss tolerance (default: a quarter of the timeout more) keeps everything: the
// same session, the same node and token, no loss signalled, and listeners see suspended, then
// connected. The server is resumed as soon as the session reports suspended (no fixed sleep).
TEST(LostLock, ServerPausedShorterThanTheTimeoutKeepsSessionAndLock) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-short-pause");
  std::mutex mu;  // before the session: its destructor still tells the listener "closed"
  std::condition_variable heard;
  std::vector<zklock::session_state> seen;
  zklock::session s{opts(6000ms)};
  s.add_state_listener([&](zklock::session_state st) {
    {
      std::lock_guard lk{mu};
      seen.push_back(st);
    }
    heard.notify_all();
  });
  zklock::mutex m{s, path};
  m.lock();
  loss_probe probe{m.lost_token()};
  const auto id = s.id();
  const auto token = m.fencing_token();
  const auto node = zkt::children(path);
  ASSERT_EQ(node.size(), 1u);
  zk.pause();
  const bool suspended = s.wait_for(zklock::session_state::suspended, scaled(30s));
  zk.resume();
  ASSERT_TRUE(suspended) << "the client never noticed the stalled server";
  ASSERT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));
  EXPECT_EQ(zkt::children(path), node) << "our node changed";
  EXPECT_EQ(s.id(), id);
  EXPECT_EQ(s.generation(), 1u);
  EXPECT_FALSE(probe.wait(std::chrono::milliseconds{0})) << "a stall shorter than the tolerance was reported as a loss";
  EXPECT_TRUE(m.still_owned());
  EXPECT_EQ(m.fencing_token(), token);
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
  // The listeners hear `connected` on the session's thread, after the state changed.
  std::unique_lock lk{mu};
  heard.wait_for(lk, scaled(30s), [&] { return seen.size() >= 2; });
  ASSERT_GE(seen.size(), 2u);
  EXPECT_EQ(seen[0], zklock::session_state::suspended);
  EXPECT_EQ(seen[1], zklock::session_state::connected);
  for (auto st : seen) EXPECT_NE(st, zklock::session_state::expired);
}

// The data API through a stall: a write in flight when the client gives up on the connection is
// not sent again (it may have been applied) and says so with connection_loss; a read made while the
// session is suspended waits for the reconnection and is answered, on the same session.
TEST(LostLock, AWriteWhoseReplyIsLostSaysSoAndAReadWaitsForTheConnection) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-write");
  zklock::session s{opts(6000ms)};
  zkt::create_path(path);
  s.set(path, "0");
  zk.pause();
  std::error_code code;
  std::string what;
  try {
    s.set(path, "1");  // answered by no one: the client drops the connection at 2/3 of the timeout
  } catch (const std::system_error& e) {
    code = e.code();
    what = e.what();
  }
  // Read while suspended (the server is still paused), then let the server go.
  auto read = std::async(std::launch::async, [&] { return s.get(path); });
  zk.resume();
  EXPECT_EQ(code, zklock::errc::connection_loss) << what;
  EXPECT_NE(what.find("may or may not have been applied"), std::string::npos) << what;
  const auto got = read.get();
  ASSERT_TRUE(got);
  EXPECT_TRUE(got->data == "0" || got->data == "1") << got->data;
  EXPECT_TRUE(s.wait_for(zklock::session_state::connected, scaled(30s)));
  EXPECT_EQ(s.generation(), 1u);
}

// still_owned() alone (without lost_token()) sees our node deleted by someone else.
TEST(LostLock, StillOwnedAloneSeesADeletion) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-still-owned");
  zklock::session s{opts(4000ms)};
  zklock::mutex m{s, path};
  m.lock();
  ASSERT_TRUE(m.still_owned());
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  ASSERT_TRUE(zkt::remove(path + "/" + kids[0]));
  const auto limit = std::chrono::steady_clock::now() + scaled(30s);
  while (m.still_owned() && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
  EXPECT_FALSE(m.still_owned()) << "the deletion was never noticed";
  m.unlock();
}

// A semaphore lease has the same loss signal: its node deleted by someone else, or its session
// expired, fires the token of the lease (the most recent one, which release() returns next).
TEST(LostLock, SemaphoreLeasesHaveALossSignal) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-sem");
  zklock::session s{opts(2000ms)};
  zklock::counting_semaphore sem{s, path, 2};
  EXPECT_THROW((void)sem.lost_token(), std::system_error);
  EXPECT_FALSE(sem.still_owned());
  sem.acquire();
  loss_probe first{sem.lost_token()};
  EXPECT_TRUE(sem.still_owned());
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  ASSERT_TRUE(zkt::remove(path + "/" + kids[0]));
  ASSERT_TRUE(first.wait(scaled(30s)));
  EXPECT_FALSE(sem.still_owned());
  sem.release();  // a lost lease: quiet
  sem.acquire();
  loss_probe second{sem.lost_token()};
  EXPECT_FALSE(second.wait(std::chrono::milliseconds{0})) << "a new lease inherited the old loss";
  ASSERT_TRUE(zkt::expire(s));
  ASSERT_TRUE(second.wait(scaled(30s)));
  sem.release();
}

TEST(LostLock, SharedMutexAndNotHeld) {
  zkt::private_server zk;
  zklock::session s{opts(2000ms)};
  zklock::shared_mutex rw{s, zkt::unique_path("lost-rw")};
  EXPECT_THROW((void)rw.lost_token(), std::system_error);
  EXPECT_FALSE(rw.still_owned());
  rw.lock_shared();
  loss_probe probe{rw.lost_token()};
  ASSERT_TRUE(zkt::expire(s));
  ASSERT_TRUE(probe.wait(scaled(30s)));
  EXPECT_FALSE(rw.still_owned());
  rw.unlock_shared();
}

}  // namespace

namespace {

// A user's stop callback that blocks must not stall ZooKeeper's event thread: watches of other
// locks on the same session still arrive and hand locks over meanwhile.
TEST(LostLock, BlockingStopCallbackDoesNotStallTheEventThread) {
  zkt::private_server zk;
  zklock::session s{opts(4000ms)};
  zklock::session other_s{opts(4000ms)};
  const auto lost_path = zkt::unique_path("lost-blocking-cb");
  const auto busy_path = zkt::unique_path("lost-busy");
  zklock::mutex m{s, lost_path};
  m.lock();
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  std::stop_callback blocker{m.lost_token(), [&] {
                               std::unique_lock lk{mu};
                               entered = true;
                               cv.notify_all();
                               cv.wait(lk, [&] { return release; });  // blocks whatever thread runs it
                             }};
  const auto kids = zkt::children(lost_path);
  ASSERT_EQ(kids.size(), 1u);
  ASSERT_TRUE(zkt::remove(lost_path + "/" + kids[0]));
  {
    std::unique_lock lk{mu};
    ASSERT_TRUE(cv.wait_for(lk, 30s, [&] { return entered; }));
  }
  // The callback is blocked now. A handoff on the same session needs a watch delivered by the
  // event thread.
  zklock::mutex holder{other_s, busy_path};
  zklock::mutex waiter{s, busy_path};
  holder.lock();
  std::jthread t{[&] {
    const bool got = waiter.try_lock_for(scaled(30s));
    EXPECT_TRUE(got);
    if (got) waiter.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(busy_path, 2));
  holder.unlock();
  t.join();
  {
    std::lock_guard lk{mu};
    release = true;
  }
  cv.notify_all();
  m.unlock();
}

}  // namespace

namespace {

// After a loss, re-entering must not "succeed" locally while another client may hold the lock.
TEST(LostLock, ReentryOnALostHoldThrowsLockLost) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("lost-reentry");
  zklock::session s{opts(2000ms)};
  zklock::recursive_mutex m{s, path};
  m.lock();
  loss_probe probe{m.lost_token()};
  ASSERT_TRUE(zkt::expire(s));
  ASSERT_TRUE(probe.wait(scaled(30s)));
  zklock::session other_s{opts(2000ms)};
  zklock::mutex other{other_s, path};
  ASSERT_TRUE(other.try_lock_for(scaled(30s)));
  try {
    m.lock();
    ADD_FAILURE() << "re-entered a lost hold while another client holds the lock";
    m.unlock();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::errc::lock_lost);
  }
  m.unlock();  // the outer hold: quiet, and the object is usable again
  other.unlock();
  EXPECT_TRUE(m.try_lock_for(scaled(30s)));
  m.unlock();
}

}  // namespace
