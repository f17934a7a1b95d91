// SPDX-License-Identifier: Apache-2.0
// zklock:watch — how a waiting contender learns that it may hold the lock now.
//
//   watch_predecessor  An exists-style watch on the one node the mode rule names (the contender
//                      just ahead, or the nearest writer ahead of a reader; a semaphore's first
//                      waiter alone watches the children). A release wakes only the waiter(s)
//                      behind it, no herd: a waiter re-lists and re-arms (2 requests) unless the
//                      deletion alone decides its turn. Pick it by default and always for long queues.
//   watch_children     A children watch on the lock node: every waiter wakes on every join and
//                      leave, re-lists and re-arms (the simple recipe; a herd: requests from every
//                      waiter on every change). Only for very short queues, or to compare.
module;
#include <concepts>
#include <type_traits>
export module zklock:watch;

export namespace zklock {

/// What a watch strategy watches.
enum class watch_kind {
  predecessor,  ///< the node the mode rule names
  children      ///< the lock node's children
};

/// A watch strategy: an empty type whose static `kind` says what its waiters watch.
template <class P>
concept WatchStrategy = std::is_empty_v<P> && requires {
  { P::kind } -> std::convertible_to<watch_kind>;
};

/// Watch only the node the mode rule names (see the banner).
struct watch_predecessor {
  /// Watch the node the rule names.
  static constexpr watch_kind kind = watch_kind::predecessor;
};

/// Watch the lock node's children (see the banner).
struct watch_children {
  /// Watch the lock node's children.
  static constexpr watch_kind kind = watch_kind::children;
};

}  // namespace zklock
