// SPDX-License-Identifier: Apache-2.0
// zklock:aliases — the ready-made lock types. Any other combination is one line away:
//   struct my_policies : zklock::default_policies { using watch = zklock::watch_children; };
//   using my_lock = zklock::basic_mutex<my_policies>;
export module zklock:aliases;
import :mutex;
import :shared_mutex;
import :semaphore;
import :policies;
import :reentrancy;

export namespace zklock {

/// The default bundle, re-entrant per thread (recursive_mutex's policies).
struct per_thread_policies : default_policies {
  using reentrancy = reentrancy_per_thread;  ///< re-entrant per thread
};
/// The default bundle, owned by the lock object (owner_mutex's policies).
struct counted_owner_policies : default_policies {
  using reentrancy = reentrancy_counted_owner;  ///< owned by the object, any thread unlocks
};

/// Fair mutex; re-locking from the holder throws resource_deadlock_would_occur.
using mutex = basic_mutex<>;
/// Fair mutex, re-entrant per thread (like Curator's InterProcessMutex).
using recursive_mutex = basic_mutex<per_thread_policies>;
/// Fair mutex owned by the object, not a thread: any thread may unlock (executors, coroutines).
using owner_mutex = basic_mutex<counted_owner_policies>;
/// Fair read/write lock: std::shared_lock reads, std::unique_lock writes.
using shared_mutex = basic_shared_mutex<>;
/// Counting semaphore: acquire / try_acquire_for / release.
using counting_semaphore = basic_counting_semaphore<>;

}  // namespace zklock
