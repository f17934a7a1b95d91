// SPDX-License-Identifier: Apache-2.0
// zklock:watch — how a waiting contender learns that it may hold the lock now.
//
//   watch_predecessor  Exists-style watches on the nearest contenders ahead that decide the
//                      waiter's turn: for a mutex or a writer the two just ahead, for a reader the
//                      two nearest writers ahead, for a semaphore of L leases the L + 1 nearest
//                      leases ahead. A release wakes only the few waiters behind it, never a herd,
//                      and the waiter it grants needs no listing: it knows already, from the
//                      deletions it counted, that nobody it waits for is left (one round trip from
//                      the release to the grant). The waiter one step further back lists once,
//                      while the new holder holds, to move its watches up. Pick it by default, and
//                      always for long queues. (A semaphore of more than 31 leases watches the
//                      lock node's children instead: that many watches per waiter cost more.)
//   watch_children     A children watch on the lock node: every waiter wakes on every join and
//                      leave, lists again and re-arms (the simple recipe; a herd: two requests from
//                      every waiter on every change). Only for very short queues, or to compare.
module;
#include <concepts>
#include <cstddef>
#include <type_traits>
export module zklock:watch;

export namespace zklock {

/// What a watch strategy watches.
enum class watch_kind {
  predecessor,  ///< the node the mode rule names
  children      ///< the lock node's children
};

/// A watch strategy: an empty type whose static `kind` says what its waiters watch, and whose
/// static window(ahead, limit) says how many of the `ahead` counted contenders ahead of a waiter it
/// watches (the nearest ones) when fewer than `limit` may be ahead for a grant; 0 = the lock
/// node's children instead.
template <class P>
concept WatchStrategy = std::is_empty_v<P> && requires(std::size_t n) {
  { P::kind } -> std::convertible_to<watch_kind>;
  { P::window(n, n) } noexcept -> std::same_as<std::size_t>;
};

/// Watch only the node the mode rule names (see the banner).
struct watch_predecessor {
  /// Watch the node the rule names.
  static constexpr watch_kind kind = watch_kind::predecessor;
  /// Returns: min(ahead, limit + 1): one more than the grant needs to see go, so that the waiter
  /// lists again while the contender just ahead still holds (see zklock:rules, tally); 0 (the
  /// children) when limit + 1 exceeds 32.
  static constexpr std::size_t window(std::size_t ahead, std::size_t limit) noexcept {
    if (limit + 1 > 32) return 0;
    return ahead < limit + 1 ? ahead : limit + 1;
  }
};

/// Watch the lock node's children (see the banner).
struct watch_children {
  /// Watch the lock node's children.
  static constexpr watch_kind kind = watch_kind::children;
  /// Returns: 0: the lock node's children, always.
  static constexpr std::size_t window(std::size_t, std::size_t) noexcept { return 0; }
};

}  // namespace zklock
