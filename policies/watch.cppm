// SPDX-License-Identifier: Apache-2.0
// zklock:watch — how a waiting contender learns that it may hold the lock now.
//
//   watch_predecessor  Exists-style watches on the nearest contenders ahead that decide the
//                      waiter's turn, twice as many as may remain ahead while it holds: for a mutex
//                      or a writer the two just ahead, for a reader the two nearest writers ahead,
//                      for a semaphore of L leases the 2L nearest leases ahead. A waiter whose
//                      watches do not reach the head of the queue lists once when the first of them
//                      goes, while those ahead of it still hold, so that the release that makes its
//                      turn grants it with no further request (one round trip from the release to
//                      the grant, not two). When round trips are cheap (under
//                      session_options::look_ahead_round_trip, 1 ms by default, against the
//                      session's measured round trip) a semaphore's waiter watches only the L
//                      nearest: 2L watches make every release wake 2L waiters, which costs more
//                      than the round trip it saves. A release wakes only the few waiters that
//                      watch it, never a herd. Pick it by default, and always for long queues. (A
//                      semaphore of more than 16 leases watches the lock node's children instead:
//                      that many watches per waiter cost more than the herd.)
//   watch_children     A children watch on the lock node: every waiter wakes on every join and
//                      leave, lists again and re-arms (the simple recipe; a herd: two requests from
//                      every waiter on every change). Only for very short queues, or to compare.
// Plug it in: struct my_policies : zklock::default_policies { using watch = zklock::watch_children; };
// Your own model only needs window() (below): the algorithm asks it and nothing else.
module;
#include <concepts>
#include <cstddef>
#include <type_traits>
export module zklock:watch;

export namespace zklock {

/// A watch strategy: an empty type whose static window(ahead, limit, far) says how many of the
/// `ahead` counted contenders ahead of a waiter it watches (the nearest ones) when fewer than
/// `limit` may be ahead for a grant and round trips are dear (`far`) or not; 0 = the lock node's
/// children instead.
template <class P>
concept WatchStrategy = std::is_empty_v<P> && requires(std::size_t n, bool far) {
  { P::window(n, n, far) } noexcept -> std::same_as<std::size_t>;
};

/// Watch only the node the mode rule names (see the banner).
struct watch_predecessor {
  /// Returns: min(ahead, 2 * limit) for one holder at a time (limit 1) or when round trips are dear
  /// (`far`, see session_options::look_ahead_round_trip): the first watched contender to go leaves
  /// `limit` more deletions before the turn, time to list and move the watches up (see
  /// zklock.detail:rules, tally); otherwise (a semaphore's waiter, round trips cheap) min(ahead, limit):
  /// each release then wakes L waiters, not 2L. 0 (the children) when limit exceeds 16.
  static constexpr std::size_t window(std::size_t ahead, std::size_t limit, bool far) noexcept {
    if (limit > 16) return 0;
    const std::size_t w = far || limit == 1 ? 2 * limit : limit;
    return ahead < w ? ahead : w;
  }
};

/// Watch the lock node's children (see the banner).
struct watch_children {
  /// Returns: 0: the lock node's children, always.
  static constexpr std::size_t window(std::size_t, std::size_t, bool) noexcept { return 0; }
};

}  // namespace zklock
