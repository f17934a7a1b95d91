// SPDX-License-Identifier: Apache-2.0
// Hold bounds (hold_bounds: set_hold_bounds, wait_context::hold) against the real server: at_most
// ends a stuck hold (its loss signal fires, its node goes, the next waiter is granted, its guarded
// writes fail) and an earlier release cancels it; a release before at_least keeps the node until
// then; every lock kind and the asynchronous acquires; bad bounds refused.
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>
#include "expect_error.hpp"
#include "stop_probe.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using clock_type = std::chrono::steady_clock;
using zklock::errc;
using zkt::expect_error;

using fired = zkt::stop_probe;

// A holder that never lets go loses the hold at at_most: the signal fires no earlier, the node is
// deleted, a waiter of another session is granted, and the holder's guarded writes fail. Its own
// unlock() afterwards is quiet.
TEST(HoldBounds, AtMostEndsAStuckHold) {
  const auto path = zkt::unique_path("bound-most");
  zklock::session a{zkt::options()}, b{zkt::options()};
  zklock::mutex stuck{a, path}, next{b, path};
  stuck.set_hold_bounds({.at_most = 400ms});
  EXPECT_EQ(stuck.hold_bounds_set().at_most, 400ms);
  const auto locked = clock_type::now();  // before the call: the grant, whence the bound counts, is later
  stuck.lock();
  fired lost{stuck.lost_token()};
  const auto fence = stuck.fence();
  ASSERT_TRUE(next.try_lock_for(30s)) << "the waiter was never granted";
  const auto granted = clock_type::now();
  EXPECT_GE(granted - locked, 400ms) << "granted before the holder's bound";
  clock_type::time_point at;
  ASSERT_TRUE(lost.wait(10s, &at));
  EXPECT_GE(at - locked, 400ms);
  EXPECT_FALSE(stuck.still_owned());
  EXPECT_FALSE(zkt::exists(fence.node));
  expect_error([&] { a.commit_if_held(fence, {zklock::op::check(path)}); }, errc::lock_lost, "guarded write after the bound");
  std::error_code ec;
  stuck.unlock(ec);
  EXPECT_FALSE(ec) << ec.message();
  EXPECT_TRUE(next.still_owned());
  next.unlock();
}

// A release before at_most cancels the bound: a later hold of the same object (unbounded now) is
// not ended by it, even after the first hold's bound passed (seen by a second bounded lock that
// ends later, not by a sleep).
TEST(HoldBounds, AReleaseBeforeAtMostCancelsTheBound) {
  const auto path = zkt::unique_path("bound-cancel");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  m.set_hold_bounds({.at_most = 300ms});
  m.lock();
  m.unlock();
  m.set_hold_bounds({});
  m.lock();
  fired lost{m.lost_token()};
  zklock::mutex later{s, path + "-later"};
  later.set_hold_bounds({.at_most = 600ms});
  later.lock();
  fired later_lost{later.lost_token()};
  ASSERT_TRUE(later_lost.wait(10s));  // well past the first hold's bound
  s.flush();                          // and past anything the server had to tell us before
  EXPECT_FALSE(lost.wait(0ms)) << "a released hold's bound ended the next hold";
  EXPECT_TRUE(m.still_owned());
  m.unlock();
  later.unlock();
}

// A job that ends early keeps the lock until at_least: unlock() returns at once, the node stays,
// and the next holder is granted no sooner than at_least after the first grant.
TEST(HoldBounds, AReleaseBeforeAtLeastKeepsTheNodeUntilThen) {
  const auto path = zkt::unique_path("bound-least");
  zklock::session a{zkt::options()}, b{zkt::options()};
  zklock::mutex first{a, path}, second{b, path};
  first.set_hold_bounds({.at_least = 500ms});
  const auto locked = clock_type::now();  // before the call: the grant, whence the floor counts, is later
  first.lock();
  const auto node = first.fence().node;
  first.unlock();
  EXPECT_FALSE(first.owns_lock());
  EXPECT_TRUE(zkt::exists(node)) << "released before at_least, yet the node is gone";
  ASSERT_TRUE(second.try_lock_for(30s));
  EXPECT_GE(clock_type::now() - locked, 500ms) << "granted before the first hold's at_least";
  EXPECT_FALSE(zkt::exists(node));
  second.unlock();
  // A release after at_least deletes at once.
  first.lock();
  const auto node2 = first.fence().node;
  first.set_hold_bounds({});
  zklock::mutex marker{a, path + "-marker"};
  marker.set_hold_bounds({.at_most = 500ms});
  marker.lock();
  ASSERT_TRUE(fired{marker.lost_token()}.wait(10s));
  marker.unlock();
  first.unlock();  // its hold was granted with at_least 500 ms, now over: deleted before it returns
  EXPECT_FALSE(zkt::exists(node2));
}

// Per acquire (wait_context::hold), on every lock kind and on the asynchronous acquires.
TEST(HoldBounds, EveryLockKindAndTheAsynchronousAcquires) {
  zklock::session s{zkt::options()};
  const auto base = zkt::unique_path("bound-kinds");
  const zklock::wait_context wc{.hold = {.at_most = 200ms}};
  {
    zklock::shared_mutex rw{s, base + "-rw"};
    ASSERT_TRUE(rw.try_lock(wc));
    EXPECT_TRUE(fired{rw.lost_token()}.wait(10s)) << "write side";
    rw.unlock();
    ASSERT_TRUE(rw.try_lock_shared(wc));
    EXPECT_TRUE(fired{rw.lost_token()}.wait(10s)) << "read side";
    rw.unlock_shared();
    rw.set_hold_bounds({.at_most = 200ms});
    std::shared_lock r{rw};
    EXPECT_TRUE(fired{rw.lost_token()}.wait(10s)) << "read side, the object's bounds";
  }
  {
    zklock::counting_semaphore sem{s, base + "-sem", 2};
    ASSERT_TRUE(sem.try_acquire(wc));
    const auto node = sem.fence().node;
    EXPECT_TRUE(fired{sem.lost_token()}.wait(10s)) << "lease";
    // (the loss fires first, then the node's delete is sent: another session may see it a moment later)
    EXPECT_TRUE(zkt::await_children(base + "-sem", 0)) << node;
    sem.release();
  }
  {
    zklock::mutex m{s, base + "-async"};
    m.set_hold_bounds({.at_most = 200ms});
    std::promise<std::pair<std::error_code, zklock::lock_hold>> p;
    m.async_lock([&](std::error_code ec, zklock::lock_hold h) { p.set_value({ec, std::move(h)}); });
    auto [ec, h] = p.get_future().get();
    ASSERT_FALSE(ec) << ec.message();
    const auto node = h.fence().node;
    EXPECT_TRUE(fired{h.lost_token()}.wait(10s)) << "lock_hold";
    EXPECT_TRUE(zkt::await_children(base + "-async", 0)) << node;
    EXPECT_FALSE(h.still_owned());
  }
}

// A hold released long before its bound cancels the bound's timer, and the session then closes at
// once and cleanly (the timer thread was waiting for that timer: under ASan, a wait that still
// referred to the cancelled timer's time would read freed memory).
TEST(HoldBounds, ACancelledTimerAndACloseLeaveNothingBehind) {
  const auto path = zkt::unique_path("bound-close");
  {
    zklock::session s{zkt::options()};
    zklock::mutex m{s, path};
    m.set_hold_bounds({.at_most = std::chrono::hours{1}});
    m.lock();
    m.unlock();
    m.set_hold_bounds({.at_least = std::chrono::hours{1}});
    m.lock();
    m.unlock();  // its node stays, its delete due in an hour
    EXPECT_EQ(zkt::children(path).size(), 1u);
  }  // the close drops the timer; the node goes with the session
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(HoldBounds, BadBoundsAreRefused) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("bound-bad");
  zklock::mutex m{s, path};
  EXPECT_THROW(m.set_hold_bounds({.at_most = -1ms}), std::invalid_argument);
  EXPECT_THROW(m.set_hold_bounds({.at_least = -1ms}), std::invalid_argument);
  EXPECT_THROW(m.set_hold_bounds({.at_most = 1s, .at_least = 2s}), std::invalid_argument);
  EXPECT_EQ(m.hold_bounds_set(), zklock::hold_bounds{});
  m.set_hold_bounds({.at_most = 1s});
  EXPECT_THROW((void)m.try_lock(zklock::wait_context{.hold = {.at_least = 2s}}), std::invalid_argument);
  EXPECT_FALSE(m.owns_lock());
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
