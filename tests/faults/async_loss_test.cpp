// SPDX-License-Identifier: Apache-2.0
// Asynchronous acquires when things end: a destroyed lock object or a closed session completes its
// pending acquires with session_closed before returning; an expired session queues them again on
// the next one (or fails them with session_expired); a lock_hold releases when it ends, is moved,
// outlives its lock object, and tells its loss.
#include <array>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "async_probe.hpp"
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zkt::completion;

/// Returns: a hold of `m` taken asynchronously (empty, with a test failure, if none came in 30 s).
zklock::lock_hold hold_of(zklock::mutex& m) {
  auto c = std::make_shared<completion>();
  m.async_lock([c, cb = c->callback()](std::error_code ec, zklock::lock_hold h) mutable { cb(ec, std::move(h)); });
  if (!c->wait()) {
    ADD_FAILURE() << "the acquire never completed";
    return {};
  }
  EXPECT_EQ(c->code(), std::error_code{}) << c->code().message();
  return std::move(c->hold());
}

/// Expects: every completion ran once, with `want`, holding nothing.
template <std::size_t N>
void expect_all(std::array<completion, N>& c, zklock::errc want) {
  for (std::size_t i = 0; i < N; ++i) {
    EXPECT_EQ(c[i].calls(), 1) << i;
    EXPECT_EQ(c[i].code(), std::error_code{want}) << i << ": " << c[i].code().message();
    EXPECT_FALSE(c[i].hold().owns_lock()) << i;
  }
}

/// Holders of another session on `base`/m, /rw, /sem, so that acquires there wait.
struct blockers {
  std::string base, mp = base + "/m", rwp = base + "/rw", sp = base + "/sem";
  zklock::session s{zkt::options()};
  zklock::mutex m{s, mp};
  zklock::shared_mutex rw{s, rwp};
  zklock::counting_semaphore sem{s, sp, 1};
  explicit blockers(std::string b) : base(std::move(b)) {
    m.lock();
    rw.lock();
    sem.acquire();
  }
  /// Returns: whether the paths hold the blockers' nodes and m, rw, sem more.
  bool await(std::size_t m_more, std::size_t rw_more, std::size_t sem_more) const {
    return zkt::await_children(mp, 1 + m_more) && zkt::await_children(rwp, 1 + rw_more) &&
           zkt::await_children(sp, 1 + sem_more);
  }
  void release() {
    m.unlock();
    rw.unlock();
    sem.release();
  }
};

/// Lock objects of another session on a blockers' paths.
struct contenders {
  zklock::mutex m;
  zklock::shared_mutex rw;
  zklock::counting_semaphore sem;
  contenders(zklock::session& s, const blockers& b) : m{s, b.mp}, rw{s, b.rwp}, sem{s, b.sp, 1} {}
  /// Effects: queues a mutex acquire, a reader (or a writer) and a lease, completing into c[0..2].
  void start(std::array<completion, 3>& c, bool reader) {
    m.async_lock(c[0].callback());
    if (reader)
      rw.async_lock_shared(c[1].callback());
    else
      rw.async_lock(c[1].callback());
    sem.async_acquire(c[2].callback());
  }
};

// Destroying each lock object completes its own pending acquires, and only those, before its
// destructor returns (the default executor has run them); nothing of them stays on the server.
TEST(AsyncLifetime, DestroyingTheLockObjectCompletesItsPendingAcquires) {
  blockers b{zkt::unique_path("async-destroyed")};
  zklock::session as{zkt::options()};
  std::array<completion, 5> c;
  auto m = std::make_unique<zklock::mutex>(as, b.mp);
  auto rw = std::make_unique<zklock::shared_mutex>(as, b.rwp);
  auto sem = std::make_unique<zklock::counting_semaphore>(as, b.sp, 1);
  m->async_lock(c[0].callback());
  m->async_lock(c[1].callback());
  rw->async_lock_shared(c[2].callback());
  rw->async_lock(c[3].callback());
  sem->async_acquire(c[4].callback());
  ASSERT_TRUE(b.await(2, 2, 1));
  m.reset();
  EXPECT_EQ(c[0].calls(), 1);
  EXPECT_EQ(c[1].calls(), 1);
  EXPECT_EQ(c[2].calls(), 0) << "another object's acquire completed";
  rw.reset();
  sem.reset();
  expect_all(c, zklock::errc::session_closed);
  as.flush();
  EXPECT_TRUE(b.await(0, 0, 0)) << "a destroyed object's contender stayed";
  EXPECT_EQ(zkt::watches_below(b.base, as), std::set<std::string>{});
  // The session goes on working.
  zklock::mutex again{as, b.mp};
  b.release();
  EXPECT_TRUE(again.try_lock_for(30s));
  again.unlock();
}

// With a user executor, the destructor hands the completions to it before it returns.
TEST(AsyncLifetime, DestroyingHandsTheCompletionsToTheUserExecutor) {
  blockers b{zkt::unique_path("async-destroyed-ex")};
  zklock::session as{zkt::options()};
  zkt::queue_executor ex;
  std::array<completion, 2> c;
  auto m = std::make_unique<zklock::mutex>(as, b.mp);
  m->async_lock({}, c[0].callback(), ex.get());
  m->async_lock({}, c[1].callback(), ex.get());
  ASSERT_TRUE(b.await(2, 0, 0));
  m.reset();
  EXPECT_EQ(ex.posted(), 2u);
  EXPECT_EQ(c[0].calls() + c[1].calls(), 0) << "ran without the executor";
  EXPECT_EQ(ex.run_queued(), 2u);
  expect_all(c, zklock::errc::session_closed);
  as.flush();
  EXPECT_TRUE(b.await(0, 0, 0));
  b.release();
}

// close() with acquires of every kind pending: each completes once with session_closed before
// close() returns; the lock objects' destructors complete nothing more; an acquire on the closed
// session fails the same way.
TEST(AsyncLifetime, ClosingTheSessionCompletesEveryPendingAcquireOnce) {
  blockers b{zkt::unique_path("async-closed")};
  zklock::session as{zkt::options()};
  std::array<completion, 5> c;
  completion after;
  {
    zklock::mutex m{as, b.mp};
    zklock::shared_mutex rw{as, b.rwp};
    zklock::counting_semaphore sem{as, b.sp, 1};
    m.async_lock(c[0].callback());
    m.async_lock(c[1].callback());
    rw.async_lock_shared(c[2].callback());
    rw.async_lock(c[3].callback());
    sem.async_acquire(c[4].callback());
    ASSERT_TRUE(b.await(2, 2, 1));
    as.close();
    expect_all(c, zklock::errc::session_closed);
    EXPECT_TRUE(b.await(0, 0, 0)) << "a closed session's contender stayed";
    m.async_lock(after.callback());
    ASSERT_TRUE(after.wait());
  }
  expect_all(c, zklock::errc::session_closed);
  EXPECT_EQ(after.calls(), 1);
  EXPECT_EQ(after.code(), std::error_code{zklock::errc::session_closed});
  b.release();
}

// A completion (on the default completion thread) destroys its lock object, with another acquire
// of that object pending: the destructor returns, and the other completes once, session_closed.
TEST(AsyncLifetime, ACompletionMayDestroyItsLockObject) {
  blockers b{zkt::unique_path("async-destroy-in-completion")};
  zklock::session as{zkt::options()};
  completion other;
  std::promise<std::error_code> first;
  auto f_first = first.get_future();
  auto m = std::make_unique<zklock::mutex>(as, b.mp);
  m->async_lock([&](std::error_code ec, zklock::lock_hold) {
    m.reset();
    first.set_value(ec);
  });
  m->async_lock(other.callback());
  ASSERT_TRUE(b.await(2, 0, 0));
  b.m.unlock();
  ASSERT_EQ(f_first.wait_for(30s), std::future_status::ready) << "the destructor never returned";
  EXPECT_EQ(f_first.get(), std::error_code{});
  ASSERT_TRUE(other.wait());
  EXPECT_EQ(other.calls(), 1);
  EXPECT_EQ(other.code(), std::error_code{zklock::errc::session_closed});
  EXPECT_TRUE(zkt::await_children(b.mp, 0));
  b.m.lock();
  b.release();
}

// A completion closes the session with acquires of it pending and a hold granted: close()
// returns, the others complete once with session_closed, the hold is lost and releases quietly.
TEST(AsyncLifetime, ACompletionMayCloseTheSession) {
  blockers b{zkt::unique_path("async-close-in-completion")};
  zklock::session as{zkt::options()};
  std::array<completion, 2> c;
  completion granted;
  std::promise<void> closed;
  auto f_closed = closed.get_future();
  zklock::mutex free_m{as, b.base + "/free"}, m{as, b.mp};
  free_m.async_lock(granted.callback());
  ASSERT_TRUE(granted.wait());
  ASSERT_TRUE(granted.hold().owns_lock());
  m.async_lock(c[0].callback());
  m.async_lock(c[1].callback());
  ASSERT_TRUE(b.await(2, 0, 0));
  free_m.async_lock([&](std::error_code, zklock::lock_hold) {
    as.close();
    closed.set_value();
  });
  ASSERT_TRUE(zkt::await_children(b.base + "/free", 2));
  granted.hold().unlock();
  ASSERT_EQ(f_closed.wait_for(30s), std::future_status::ready) << "close() never returned";
  for (auto& one : c) ASSERT_TRUE(one.wait());
  expect_all(c, zklock::errc::session_closed);
  EXPECT_TRUE(b.await(0, 0, 0));
  b.release();
}

// An executor that drops the completion (never runs it): the hold it carried is released.
TEST(AsyncLifetime, ADroppedCompletionReleasesItsHold) {
  const auto path = zkt::unique_path("async-dropped");
  zklock::session s{zkt::options()};
  std::promise<void> dropped;
  auto f_dropped = dropped.get_future();
  zklock::mutex m{s, path};
  m.async_lock({}, [](std::error_code, zklock::lock_hold) { ADD_FAILURE() << "a dropped completion ran"; },
               [&](std::function<void()>) { dropped.set_value(); });
  ASSERT_EQ(f_dropped.wait_for(30s), std::future_status::ready);
  EXPECT_TRUE(zkt::await_children(path, 0)) << "the hold of a dropped completion stayed";
  EXPECT_TRUE(m.try_lock());
  m.unlock();
}

// A stop racing the grant: each round completes once, either granted (holding) or cancelled
// (leaving nothing).
TEST(AsyncCancel, AStopRacingTheGrantCompletesOnceEitherWay) {
  const auto path = zkt::unique_path("async-stop-race");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  zklock::mutex holder{hs, path}, m{as, path};
  for (int round = 0; round < 30; ++round) {
    completion c;
    std::stop_source stop;
    holder.lock();
    m.async_lock({.stop = stop.get_token()}, c.callback());
    ASSERT_TRUE(zkt::await_children(path, 2));
    {
      std::jthread stopper([&] { stop.request_stop(); });
      holder.unlock();
    }
    ASSERT_TRUE(c.wait()) << round;
    EXPECT_EQ(c.calls(), 1) << round;
    if (c.code() == zklock::errc::cancelled) {
      EXPECT_FALSE(c.hold().owns_lock()) << round;
      EXPECT_EQ(zkt::children(path).size(), 0u) << round << ": a cancelled acquire left its node";
    } else {
      EXPECT_EQ(c.code(), std::error_code{}) << round << ": " << c.code().message();
      EXPECT_TRUE(c.hold().owns_lock()) << round;
      EXPECT_EQ(zkt::children(path).size(), 1u) << round;
      c.hold().unlock();
      ASSERT_TRUE(zkt::await_children(path, 0));
    }
  }
}

// An expiry while acquires of every kind wait: they queue again on the next session (nodes of the
// new session id) and are granted once the holders let go, each once.
TEST(AsyncExpiry, PendingAcquiresQueueAgainOnTheNextSession) {
  blockers b{zkt::unique_path("async-expiry")};
  zklock::session ws{zkt::options()};
  std::array<completion, 3> c;
  contenders w{ws, b};
  w.start(c, true);
  ASSERT_TRUE(b.await(1, 1, 1));
  const auto generation = ws.generation();
  ASSERT_TRUE(zkt::expire(ws));
  ASSERT_TRUE(ws.await_next_generation(generation, std::chrono::steady_clock::now() + 30s));
  EXPECT_TRUE(b.await(1, 1, 1)) << "not queued again";
  for (auto& one : c) EXPECT_EQ(one.calls(), 0) << "completed while the holders hold";
  b.release();
  for (auto& one : c) {
    ASSERT_TRUE(one.wait());
    EXPECT_EQ(one.calls(), 1);
    EXPECT_EQ(one.code(), std::error_code{}) << one.code().message();
    ASSERT_TRUE(one.hold().owns_lock());
    const auto nodes = zkt::children(one.hold().path());
    ASSERT_EQ(nodes.size(), 1u) << one.hold().path();
    EXPECT_EQ(zkt::stat_node(one.hold().path() + "/" + nodes.front()).ephemeral_owner, ws.id());
  }
  EXPECT_GT(ws.generation(), generation);
}

// A thousand acquires of one session, on a thousand held paths, still in flight (their requests
// sent together, on the session's step threads) when the session expires: each queues again on the
// next session and is granted once when its holder lets go; no path has a second node of ours.
TEST(AsyncExpiry, AThousandInFlightThroughAnExpiryAreEachGrantedOnce) {
  constexpr std::size_t n = 1000;
  const auto base = zkt::unique_path("async-expiry-many");
  zklock::session hs{zkt::options()};
  zklock::session ws{zkt::options()};
  std::vector<std::string> paths;
  std::vector<std::unique_ptr<zklock::mutex>> held, waiting;
  std::vector<completion> holders(n), waiters(n);
  for (std::size_t i = 0; i < n; ++i) {
    paths.push_back(base + "/p" + std::to_string(i));
    held.push_back(std::make_unique<zklock::mutex>(hs, paths[i]));
    held[i]->async_lock(holders[i].callback());
  }
  for (auto& h : holders) {
    ASSERT_TRUE(h.wait(60s));
    ASSERT_TRUE(h.hold().owns_lock()) << h.code().message();
  }
  const auto generation = ws.generation();
  for (std::size_t i = 0; i < n; ++i) {
    waiting.push_back(std::make_unique<zklock::mutex>(ws, paths[i]));
    waiting[i]->async_lock(waiters[i].callback());
  }
  ASSERT_TRUE(zkt::expire(ws));  // while many of them are on their way
  ASSERT_TRUE(ws.await_next_generation(generation, std::chrono::steady_clock::now() + 60s));
  for (auto& w : waiters) EXPECT_EQ(w.calls(), 0) << "completed while its holder holds: " << w.code().message();
  for (auto& h : holders) h.hold().unlock();
  for (std::size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(waiters[i].wait(60s)) << paths[i] << ": never granted";
    EXPECT_EQ(waiters[i].calls(), 1) << paths[i];
    ASSERT_EQ(waiters[i].code(), std::error_code{}) << paths[i] << ": " << waiters[i].code().message();
    const auto nodes = zkt::children(paths[i]);
    ASSERT_EQ(nodes.size(), 1u) << paths[i] << ": a node of ours twice, or one left by the old session";
    EXPECT_EQ(zkt::stat_node(paths[i] + "/" + nodes.front()).ephemeral_owner, ws.id()) << paths[i];
  }
  EXPECT_GT(ws.generation(), generation);
  for (auto& w : waiters) w.hold().unlock();
  for (std::size_t i = 0; i < n; i += 97) EXPECT_TRUE(zkt::children(paths[i]).empty()) << paths[i];
}

// Without re-establishment, the pending acquires fail with session_expired, leaving nothing.
TEST(AsyncExpiry, WithoutReestablishmentTheyFailWithSessionExpired) {
  blockers b{zkt::unique_path("async-expiry-off")};
  auto o = zkt::options();
  o.reestablish_after_expiry = false;
  zklock::session ws{o};
  std::array<completion, 3> c;
  contenders w{ws, b};
  w.start(c, false);
  ASSERT_TRUE(b.await(1, 1, 1));
  ASSERT_TRUE(zkt::expire(ws));
  for (auto& one : c) ASSERT_TRUE(one.wait());
  expect_all(c, zklock::errc::session_expired);
  EXPECT_TRUE(b.await(0, 0, 0));
  b.release();
}

// An empty hold: nothing to release, and says so.
TEST(AsyncHold, AnEmptyHoldHoldsNothing) {
  zklock::lock_hold h;
  EXPECT_FALSE(h.owns_lock());
  EXPECT_FALSE(static_cast<bool>(h));
  EXPECT_FALSE(h.still_owned());
  EXPECT_EQ(h.path(), "");
  std::error_code ec;
  h.unlock(ec);
  EXPECT_EQ(ec, std::error_code{zklock::errc::not_held});
  EXPECT_NO_THROW(h.unlock());
  for (auto code : {zkt::code_of([&] { (void)h.fencing_token(); }), zkt::code_of([&] { (void)h.lost_token(); })})
    EXPECT_EQ(code, std::error_code{zklock::errc::not_held});
}

// The destructor releases; a move hands the hold over; a move assignment releases the old one
// first; unlock(ec) releases with a clear code; a hold outlives its lock object.
TEST(AsyncHold, EndingMovingAndOutlivingTheLockObject) {
  const auto base = zkt::unique_path("async-hold");
  const std::string a = base + "/a", b = base + "/b";
  zklock::session s{zkt::options()};
  auto ma = std::make_unique<zklock::mutex>(s, a);
  zklock::mutex mb{s, b};
  {
    const auto h = hold_of(*ma);
    EXPECT_EQ(zkt::children(a).size(), 1u);
  }
  EXPECT_TRUE(zkt::await_children(a, 0)) << "the destructor did not release";

  auto ha = hold_of(*ma);
  auto hb = hold_of(mb);
  const auto token_b = hb.fencing_token();
  zklock::lock_hold moved{std::move(hb)};
  EXPECT_FALSE(hb.owns_lock());
  EXPECT_TRUE(moved.owns_lock());
  EXPECT_EQ(moved.fencing_token(), token_b);
  ha = std::move(moved);
  EXPECT_TRUE(zkt::await_children(a, 0)) << "the move assignment did not release the old hold";
  EXPECT_EQ(zkt::children(b).size(), 1u);
  EXPECT_EQ(ha.path(), b);
  EXPECT_EQ(ha.fencing_token(), token_b);
  std::error_code ec = std::make_error_code(std::errc::io_error);
  ha.unlock(ec);
  EXPECT_EQ(ec, std::error_code{});
  EXPECT_FALSE(ha.owns_lock());
  EXPECT_TRUE(zkt::await_children(b, 0));

  auto outliving = hold_of(*ma);
  ma.reset();
  EXPECT_EQ(outliving.path(), a);
  EXPECT_GT(outliving.fencing_token(), 0);
  EXPECT_TRUE(outliving.owns_lock());
  EXPECT_TRUE(outliving.still_owned());
  EXPECT_EQ(zkt::children(a).size(), 1u) << "destroying the lock object released a lock_hold's hold";
  outliving.unlock();
  EXPECT_TRUE(zkt::await_children(a, 0));
}

// The session of a hold expires: lost_token() fires, still_owned() turns false, unlock() is quiet.
TEST(AsyncHold, LostTokenFiresOnExpiry) {
  const auto path = zkt::unique_path("async-hold-lost");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  auto h = hold_of(m);
  ASSERT_TRUE(h.owns_lock());
  std::promise<void> lost;
  auto fired = lost.get_future();
  std::stop_callback on_loss{h.lost_token(), [&] { lost.set_value(); }};
  EXPECT_NE(fired.wait_for(0s), std::future_status::ready);
  EXPECT_TRUE(h.still_owned());
  ASSERT_TRUE(zkt::expire(s));
  EXPECT_EQ(fired.wait_for(30s), std::future_status::ready) << "lost_token() did not fire";
  EXPECT_FALSE(h.still_owned());
  EXPECT_NO_THROW(h.unlock());
  EXPECT_FALSE(h.owns_lock());
}

}  // namespace
