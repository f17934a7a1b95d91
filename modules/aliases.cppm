// SPDX-License-Identifier: Apache-2.0
// zklock:aliases — the ready-made lock types and their bundles (each named like its alias). Any
// other combination is one line away:
//   using my_lock = zklock::basic_mutex<zklock::policies_with<zklock::watch_children>>;
export module zklock:aliases;
import :mutex;
import :shared_mutex;
import :semaphore;
import :policies;
import :reentrancy;

export namespace zklock {

/// recursive_mutex's bundle: the defaults, re-entrant per thread.
struct recursive_policies : default_policies {
  using reentrancy = reentrancy_per_thread;  ///< re-entrant per thread
};
/// owner_mutex's bundle: the defaults, owned by the lock object.
struct owner_policies : default_policies {
  using reentrancy = reentrancy_counted_owner;  ///< owned by the object, any thread unlocks
};

/// Fair mutex; re-locking from the holder throws resource_deadlock_would_occur.
using mutex = basic_mutex<>;
/// Fair mutex, re-entrant per thread (like Curator's InterProcessMutex).
using recursive_mutex = basic_mutex<recursive_policies>;
/// Fair mutex owned by the object, not a thread: any thread may unlock (executors, coroutines).
using owner_mutex = basic_mutex<owner_policies>;
/// Fair read/write lock: std::shared_lock reads, std::unique_lock writes.
using shared_mutex = basic_shared_mutex<>;
/// Counting semaphore: acquire / try_acquire_for / release.
using counting_semaphore = basic_counting_semaphore<>;

}  // namespace zklock
