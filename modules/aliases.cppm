// SPDX-License-Identifier: Apache-2.0
// zklock:aliases — the ready-made lock types. Any other combination is one alias away:
//   using my_lock = zklock::basic_mutex<zklock::watch_children, zklock::wake_latch,
//                                       zklock::reentrancy_counted_owner, zklock::timeout_throw_after<5000>>;
export module zklock:aliases;
import :engine;
import :watch;
import :wakeup;
import :reentrancy;
import :timeout;

export namespace zklock {

/// Fair mutex; re-locking from the holder throws resource_deadlock_would_occur.
using mutex = basic_mutex<>;
/// Fair mutex, re-entrant per thread (like Curator's InterProcessMutex).
using recursive_mutex = basic_mutex<watch_predecessor, wake_condition_variable, reentrancy_per_thread>;
/// Fair mutex owned by the object, not a thread: any thread may unlock (executors, coroutines).
using owner_mutex = basic_mutex<watch_predecessor, wake_condition_variable, reentrancy_counted_owner>;
/// Fair read/write lock: std::shared_lock reads, std::unique_lock writes.
using shared_mutex = basic_shared_mutex<>;
/// Counting semaphore: acquire / try_acquire_for / release.
using counting_semaphore = basic_counting_semaphore<>;

}  // namespace zklock
