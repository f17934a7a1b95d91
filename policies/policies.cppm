// SPDX-License-Identifier: Apache-2.0
// zklock:policies — the one policy bundle every lock type takes: five named axes with defaults.
//
//   default_policies   predecessor watch, condition-variable wake-up, not re-entrant, lock() waits
//                      forever, no hooks: what zklock::mutex, shared_mutex and counting_semaphore use.
//   policies_with<M...> The defaults with the models M... in place of theirs, each model on the axis
//                      it models (checked: an argument that models no axis, or two arguments on one
//                      axis, do not compile). Nothing to misspell:
//                        using my_mutex = zklock::basic_mutex<zklock::policies_with<zklock::wake_latch>>;
//   Your own bundle    Inherit from default_policies and name the axes you change; the others keep
//                      their defaults. One axis is one line:
//                        struct my_policies : zklock::default_policies { using watch = zklock::watch_children; };
//                        using my_mutex = zklock::basic_mutex<my_policies>;
//                      Each axis named is checked by its concept (WatchStrategy, WakeupPolicy,
//                      ReentrancyPolicy, TimeoutPolicy, Hooks): a wrong type does not compile. C++
//                      cannot see a member that names no axis, though: a misspelt one (`using wakup
//                      = ...`) compiles and the axis keeps its default. policies_with cannot go wrong
//                      that way.
// The same bundle fits every lock type, and each re-exposes it as `policies`, with one exception:
// a semaphore's leases are the object's, so basic_counting_semaphore refuses a bundle whose
// reentrancy is not reentrancy_none (a compile error naming the axis). The asynchronous calls use
// the bundle's watch, timeout and hooks, not its wake-up or reentrancy (zklock:async).
module;
#include <concepts>
#include <type_traits>
export module zklock:policies;
import :watch;
import :wakeup;
import :reentrancy;
import :timeout;
import :hooks;

export namespace zklock {

/// The default bundle: one member alias per axis (watch, wakeup, reentrancy, timeout, hooks).
struct default_policies {
  using watch = watch_predecessor;            ///< zklock:watch
  using wakeup = wake_condition_variable;     ///< zklock:wakeup
  using reentrancy = reentrancy_none;         ///< zklock:reentrancy (a semaphore takes only this one)
  using timeout = timeout_forever;            ///< zklock:timeout
  using hooks = no_hooks;                     ///< zklock:hooks
};

/// A policy bundle: a type whose five member aliases each model their axis's concept.
template <class P>
concept LockPolicies = WatchStrategy<typename P::watch> && WakeupPolicy<typename P::wakeup> &&
                       ReentrancyPolicy<typename P::reentrancy> && TimeoutPolicy<typename P::timeout> &&
                       Hooks<typename P::hooks>;

/// A model of exactly one policy axis (what policies_with takes).
template <class M>
concept PolicyModel = (int{WatchStrategy<M>} + int{WakeupPolicy<M>} + int{ReentrancyPolicy<M>} +
                       int{TimeoutPolicy<M>} + int{Hooks<M>}) == 1;

}  // namespace zklock

namespace zklock::detail {

/// The model among `Ms` that `Is` accepts, else `Default`.
template <template <class> class Is, class Default, class... Ms>
struct pick_axis {
  using type = Default;
};
template <template <class> class Is, class Default, class M, class... Ms>
struct pick_axis<Is, Default, M, Ms...> {
  using type = std::conditional_t<Is<M>::value, M, typename pick_axis<Is, Default, Ms...>::type>;
};
template <class M> struct is_watch : std::bool_constant<WatchStrategy<M>> {};
template <class M> struct is_wakeup : std::bool_constant<WakeupPolicy<M>> {};
template <class M> struct is_reentrancy : std::bool_constant<ReentrancyPolicy<M>> {};
template <class M> struct is_timeout : std::bool_constant<TimeoutPolicy<M>> {};
template <class M> struct is_hooks : std::bool_constant<Hooks<M>> {};

/// Returns: how many of `Ms` model the axis `Is`.
template <template <class> class Is, class... Ms>
inline constexpr int on_axis = (0 + ... + int{Is<Ms>::value});

/// Whether no two of `Ms` model the same axis.
template <class... Ms>
concept DistinctAxes = on_axis<is_watch, Ms...> <= 1 && on_axis<is_wakeup, Ms...> <= 1 &&
                       on_axis<is_reentrancy, Ms...> <= 1 && on_axis<is_timeout, Ms...> <= 1 &&
                       on_axis<is_hooks, Ms...> <= 1;

}  // namespace zklock::detail

export namespace zklock {

/// The default bundle with the models `Ms` in place of the defaults of their axes (see the banner).
/// Each of `Ms` must model exactly one axis, and no two the same axis.
template <class... Ms>
  requires(PolicyModel<Ms> && ...) && detail::DistinctAxes<Ms...>
struct policies_with {
  using watch = typename detail::pick_axis<detail::is_watch, default_policies::watch, Ms...>::type;  ///< zklock:watch
  using wakeup = typename detail::pick_axis<detail::is_wakeup, default_policies::wakeup, Ms...>::type;  ///< zklock:wakeup
  using reentrancy =
      typename detail::pick_axis<detail::is_reentrancy, default_policies::reentrancy, Ms...>::type;  ///< zklock:reentrancy
  using timeout = typename detail::pick_axis<detail::is_timeout, default_policies::timeout, Ms...>::type;  ///< zklock:timeout
  using hooks = typename detail::pick_axis<detail::is_hooks, default_policies::hooks, Ms...>::type;  ///< zklock:hooks
};

}  // namespace zklock
