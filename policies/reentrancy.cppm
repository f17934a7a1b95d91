// SPDX-License-Identifier: Apache-2.0
// zklock:reentrancy — who owns a held lock, and what locking it again does.
//
//   reentrancy_none          Owned by the locking thread; locking again from that thread throws
//                            std::system_error(resource_deadlock_would_occur) instead of hanging.
//                            Like std::mutex, but checked. The default.
//   reentrancy_per_thread    Owned by the locking thread; it may lock again and must unlock as
//                            often (like std::recursive_mutex and Curator's InterProcessMutex).
//                            Other threads of the same lock object queue with their own nodes.
//   reentrancy_counted_owner Owned by the lock object itself: lock() on a held object only counts,
//                            from any thread, and any thread may unlock. For executors and
//                            coroutines that hop threads. Threads sharing such an object do not
//                            exclude each other: give each task its own object.
// No policy costs a ZooKeeper request for a re-entry.
// Plug it in: struct my_policies : zklock::default_policies { using reentrancy = zklock::reentrancy_per_thread; };
// Your own model: an empty type with `reentrant` and a noexcept owner() naming the caller's hold.
module;
#include <concepts>
#include <thread>
#include <type_traits>
export module zklock:reentrancy;

export namespace zklock {

/// A reentrancy policy: an empty type with static `reentrant` (whether locking a held lock again
/// counts) and static noexcept owner(): the key of the caller's hold in a lock object (each
/// thread's own id when threads own their holds; one fixed id when the lock object owns one).
template <class P>
concept ReentrancyPolicy = std::is_empty_v<P> && requires {
  { P::reentrant } -> std::convertible_to<bool>;
  { P::owner() } noexcept -> std::same_as<std::thread::id>;
};

/// Not re-entrant; re-locking from the holder throws (see the banner).
struct reentrancy_none {
  /// Locking again while holding throws resource_deadlock_would_occur.
  static constexpr bool reentrant = false;
  /// Returns: the calling thread's id: the locking thread owns the hold.
  static std::thread::id owner() noexcept { return std::this_thread::get_id(); }
};

/// Re-entrant per thread (see the banner).
struct reentrancy_per_thread {
  /// Locking again while holding counts; each lock needs its unlock.
  static constexpr bool reentrant = true;
  /// Returns: the calling thread's id: the locking thread owns the hold.
  static std::thread::id owner() noexcept { return std::this_thread::get_id(); }
};

/// Re-entrant, owned by the lock object; any thread may release (see the banner).
struct reentrancy_counted_owner {
  /// Locking again while held counts, from any thread; each lock needs its unlock.
  static constexpr bool reentrant = true;
  /// Returns: one id for every thread: the lock object owns the hold, not a thread.
  static std::thread::id owner() noexcept { return std::thread::id{}; }
};

}  // namespace zklock
