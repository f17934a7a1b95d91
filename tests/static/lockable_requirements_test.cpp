// SPDX-License-Identifier: Apache-2.0
// Compile-time checks: the standard lockable requirements and the policy concepts.
#include <chrono>
#include <coroutine>
#include <functional>
#include <memory>
#include <system_error>
#include <utility>
#include <concepts>
#include <mutex>
#include <shared_mutex>
#include <gtest/gtest.h>
import zklock;

namespace {
template <class M>
concept BasicLockable = requires(M m) { m.lock(); m.unlock(); };
template <class M>
concept Lockable = BasicLockable<M> && requires(M m) { { m.try_lock() } -> std::same_as<bool>; };
template <class M>
concept TimedLockable = Lockable<M> && requires(M m, std::chrono::milliseconds d,
                                                 std::chrono::steady_clock::time_point t,
                                                 std::chrono::system_clock::time_point s) {
  { m.try_lock_for(d) } -> std::same_as<bool>;
  { m.try_lock_until(t) } -> std::same_as<bool>;
  { m.try_lock_until(s) } -> std::same_as<bool>;
};
template <class M>
concept SharedTimedLockable = TimedLockable<M> && requires(M m, std::chrono::milliseconds d,
                                                           std::chrono::steady_clock::time_point t) {
  m.lock_shared();
  m.unlock_shared();
  { m.try_lock_shared() } -> std::same_as<bool>;
  { m.try_lock_shared_for(d) } -> std::same_as<bool>;
  { m.try_lock_shared_until(t) } -> std::same_as<bool>;
};
template <class S>
concept Semaphore = requires(S s, std::chrono::milliseconds d, std::chrono::steady_clock::time_point t) {
  s.acquire();
  s.release();
  { s.try_acquire() } -> std::same_as<bool>;
  { s.try_acquire_for(d) } -> std::same_as<bool>;
  { s.try_acquire_until(t) } -> std::same_as<bool>;
};

static_assert(TimedLockable<zklock::mutex>);
static_assert(TimedLockable<zklock::recursive_mutex>);
static_assert(TimedLockable<zklock::owner_mutex>);
static_assert(SharedTimedLockable<zklock::shared_mutex>);
static_assert(Semaphore<zklock::counting_semaphore>);
static_assert(noexcept(std::declval<zklock::mutex&>().unlock()));
static_assert(noexcept(std::declval<zklock::shared_mutex&>().unlock_shared()));
static_assert(!std::copyable<zklock::mutex> && !std::movable<zklock::mutex>);

static_assert(zklock::WatchStrategy<zklock::watch_predecessor> && zklock::WatchStrategy<zklock::watch_children>);
static_assert(zklock::WakeupPolicy<zklock::wake_condition_variable> && zklock::WakeupPolicy<zklock::wake_latch>);
static_assert(zklock::ReentrancyPolicy<zklock::reentrancy_none> && zklock::ReentrancyPolicy<zklock::reentrancy_per_thread> &&
              zklock::ReentrancyPolicy<zklock::reentrancy_counted_owner>);
static_assert(zklock::TimeoutPolicy<zklock::timeout_forever> && zklock::TimeoutPolicy<zklock::timeout_throw_after<10>>);
static_assert(!zklock::WatchStrategy<int> && !zklock::WakeupPolicy<zklock::watch_children> &&
              !zklock::TimeoutPolicy<zklock::reentrancy_none>);

struct custom_policies : zklock::default_policies {
  using watch = zklock::watch_children;
  using wakeup = zklock::wake_latch;
  using reentrancy = zklock::reentrancy_counted_owner;
  using timeout = zklock::timeout_throw_after<5000>;
};
using custom = zklock::basic_mutex<custom_policies>;
static_assert(TimedLockable<custom>);
static_assert(std::same_as<custom::policies::wakeup, zklock::wake_latch>);

// The standard wrappers instantiate over our types.
[[maybe_unused]] void standard_wrappers(zklock::mutex& a, zklock::recursive_mutex& b, zklock::shared_mutex& rw) {
  { std::unique_lock g{a, std::chrono::milliseconds{1}}; }
  { std::scoped_lock g{a, b}; }
  { std::shared_lock g{rw}; }
  { std::unique_lock g{rw}; }
  { std::lock_guard g{b}; }
}

// The asynchronous acquires: an awaitable of a move-only lock_hold for every lock type and side,
// and a callback shape taking (std::error_code, lock_hold).
template <class A>
concept AwaitsHold = requires(A a, std::coroutine_handle<> h) {
  { a.await_ready() } -> std::same_as<bool>;
  a.await_suspend(h);
  { a.await_resume() } -> std::same_as<zklock::lock_hold>;
};
static_assert(AwaitsHold<decltype(std::declval<zklock::mutex&>().async_lock())>);
static_assert(AwaitsHold<decltype(std::declval<zklock::shared_mutex&>().async_lock_shared(zklock::wait_context{}))>);
static_assert(AwaitsHold<decltype(std::declval<zklock::counting_semaphore&>().async_acquire({}, zklock::executor{}))>);
static_assert(std::movable<zklock::lock_hold> && !std::copyable<zklock::lock_hold>);
static_assert(zklock::AcquireCallback<void (*)(std::error_code, zklock::lock_hold)>);
static_assert(!zklock::AcquireCallback<void (*)(std::function<void()>)>);
[[maybe_unused]] void callback_shapes(custom& m, zklock::shared_mutex& rw, zklock::counting_semaphore& sem) {
  m.async_lock([](std::error_code, zklock::lock_hold) {});
  rw.async_lock_shared({}, [p = std::make_unique<int>()](std::error_code, zklock::lock_hold) {});  // move-only
  sem.async_acquire({}, [](std::error_code, zklock::lock_hold) {}, [](std::function<void()> f) { f(); });
}
}  // namespace

TEST(StaticRequirements, CompiledMeansPassed) { SUCCEED(); }
