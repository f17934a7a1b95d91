// SPDX-License-Identifier: Apache-2.0
// zklock:watch — how a waiting contender learns that it may hold the lock now.
//
//   watch_predecessor  An exists-style watch on the one node the mode rule names (the contender
//                      just ahead, or the nearest writer ahead of a reader). A release wakes only
//                      the waiter(s) behind it: 2 requests per wake-up, no herd. Pick it by default
//                      and always for long queues.
//   watch_children     A children watch on the lock node: every waiter wakes on every join and
//                      leave and re-lists (the simple recipe; a herd of N requests per change).
//                      Only for very short queues, or to compare.
module;
#include <concepts>
#include <type_traits>
export module zklock:watch;

export namespace zklock {

/// What a watch strategy watches.
enum class watch_kind { predecessor, children };

/// A watch strategy: a stateless type naming its watch_kind.
template <class P>
concept WatchStrategy = std::is_empty_v<P> && requires {
  { P::kind } -> std::convertible_to<watch_kind>;
};

/// Watch only the node the mode rule names (see the banner).
struct watch_predecessor {
  static constexpr watch_kind kind = watch_kind::predecessor;
};

/// Watch the lock node's children (see the banner).
struct watch_children {
  static constexpr watch_kind kind = watch_kind::children;
};

}  // namespace zklock
