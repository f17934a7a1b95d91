// SPDX-License-Identifier: Apache-2.0
// zklock:wakeup — how a watch (on the ZooKeeper event thread) wakes the thread that waits.
//
//   wake_condition_variable  One waiter per acquire attempt (mutex + condition variable + flag),
//                            reset and re-used for every wait of that attempt. Cheapest when
//                            attempts wait many times (long queues, children watches).
//   wake_latch               A fresh one-shot latch (a binary semaphore released once) for every
//                            single wait: a late firing of an earlier watch can never wake a later
//                            wait. One small allocation per wait.
// Both wake exactly the waiting thread, never others sharing the lock object, and the watch
// callback only flips a flag: it never blocks the ZooKeeper event thread.
//
// Both are for the blocking calls (lock(), try_lock_for(), acquire()...), which wait on the
// caller's thread. The asynchronous calls (async_lock(), async_lock_shared(), async_acquire():
// zklock:async) wait with a third model whatever the bundle says, wake_resume (zklock:step): there
// the same algorithm suspends instead of blocking, and a watch resumes it on the session's runner
// thread; like the latch, every wait gets a fresh one-shot waiter. So this axis chooses how a
// thread waits, and never matters when no thread waits.
// Plug it in: struct my_policies : zklock::default_policies { using wakeup = zklock::wake_latch; };
module;
#include <atomic>
#include <chrono>
#include <concepts>
#include <condition_variable>
#include <mutex>
#include <semaphore>
#include <type_traits>
export module zklock:wakeup;

export namespace zklock {

/// What a watch wakes: the base of a wakeup policy's waiter. The watches of one (path, kind) of a
/// session are shared: one C-client watcher and one server watch, whose context is a registry id,
/// never a pointer (the C client may call a watcher again on every session event, long after its
/// waiter gave up). A watch wakes its live waiters when it fires, when the session expires, and
/// when the session is closed.
class wake_target {
 public:
  /// Effects: none (targets are shared; the last owner destroys them).
  virtual ~wake_target() = default;
  /// Effects: wakes whoever waits on this target; called on ZooKeeper's event thread (or by the
  /// session when it ends), so it must not block. Never throws.
  virtual void wake() noexcept = 0;
};

/// A wakeup policy: an empty type naming a default-constructible `waiter` (a wake_target with
/// bool wait_until(deadline)) and a static `fresh_per_wait`: whether each wait gets a new waiter;
/// a waiter that serves several waits (fresh_per_wait false) also has reset(), called before each.
template <class P>
concept WakeupPolicy =
    std::is_empty_v<P> && std::derived_from<typename P::waiter, wake_target> &&
    std::default_initializable<typename P::waiter> &&
    requires(typename P::waiter& w, std::chrono::steady_clock::time_point d) {
      { P::fresh_per_wait } -> std::convertible_to<bool>;
      { w.wait_until(d) } -> std::same_as<bool>;
    } &&
    (P::fresh_per_wait || requires(typename P::waiter& w) { w.reset(); });

/// Condition-variable wake-up (see the banner).
struct wake_condition_variable {
  /// One waiter per acquire attempt, reset before each wait.
  static constexpr bool fresh_per_wait = false;

  /// A flag guarded by a mutex, and a condition variable to wait for it.
  class waiter final : public wake_target {
   public:
    /// Effects: sets the flag and notifies the waiting thread; called by the watch (or when the
    /// session ends). Never blocks for long; never throws.
    void wake() noexcept override {
      {
        std::lock_guard lk{m_};
        fired_ = true;
      }
      cv_.notify_one();
    }
    /// Effects: clears the flag: wake-ups before this call no longer count.
    void reset() {
      std::lock_guard lk{m_};
      fired_ = false;
    }
    /// Effects: blocks until the flag is set or `d` passes (time_point::max(): no deadline).
    /// Returns: whether it was woken. The flag stays set until reset().
    bool wait_until(std::chrono::steady_clock::time_point d) {
      std::unique_lock lk{m_};
      if (d == std::chrono::steady_clock::time_point::max()) {
        cv_.wait(lk, [&] { return fired_; });
        return true;
      }
      return cv_.wait_until(lk, d, [&] { return fired_; });
    }

   private:
    std::mutex m_;
    std::condition_variable cv_;
    bool fired_ = false;
  };
};

/// One-shot latch wake-up (see the banner).
struct wake_latch {
  /// A new waiter for every wait.
  static constexpr bool fresh_per_wait = true;

  /// A one-shot latch: a binary semaphore released at most once.
  class waiter final : public wake_target {
   public:
    /// Effects: opens the latch (once; later calls do nothing); called by the watch (or when the
    /// session ends). Never blocks; never throws.
    void wake() noexcept override {
      if (!open_.exchange(true, std::memory_order_acq_rel)) sem_.release();
    }
    /// Effects: blocks until the latch opens or `d` passes (time_point::max(): no deadline).
    /// Returns: whether it opened. Call it once: a second call after an opening waits again.
    bool wait_until(std::chrono::steady_clock::time_point d) {
      if (d == std::chrono::steady_clock::time_point::max()) {
        sem_.acquire();
        return true;
      }
      return sem_.try_acquire_until(d);
    }

   private:
    std::atomic<bool> open_{false};
    std::binary_semaphore sem_{0};
  };
};

}  // namespace zklock
