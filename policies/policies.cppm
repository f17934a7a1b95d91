// SPDX-License-Identifier: Apache-2.0
// zklock:policies — the one policy bundle every lock type takes: five named axes with defaults.
//
//   default_policies  predecessor watch, condition-variable wake-up, not re-entrant, lock() waits
//                     forever, no hooks: what zklock::mutex, shared_mutex and counting_semaphore use.
//   Your own bundle   Inherit from default_policies and name only the axes you change; the others
//                     keep their defaults. One axis is one line:
//                       struct my_policies : zklock::default_policies { using watch = zklock::watch_children; };
//                       using my_mutex = zklock::basic_mutex<my_policies>;
//                       using my_semaphore = zklock::basic_counting_semaphore<my_policies>;
//                     The same bundle fits every lock type; each re-exposes it as `policies`.
// Each axis is checked by its own concept (WatchStrategy, WakeupPolicy, ReentrancyPolicy,
// TimeoutPolicy, Hooks): a bundle naming a wrong type for an axis does not compile.
module;
#include <concepts>
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
  using reentrancy = reentrancy_none;         ///< zklock:reentrancy (a semaphore ignores it)
  using timeout = timeout_forever;            ///< zklock:timeout
  using hooks = no_hooks;                     ///< zklock:hooks
};

/// A policy bundle: a type whose five member aliases each model their axis's concept.
template <class P>
concept LockPolicies = WatchStrategy<typename P::watch> && WakeupPolicy<typename P::wakeup> &&
                       ReentrancyPolicy<typename P::reentrancy> && TimeoutPolicy<typename P::timeout> &&
                       Hooks<typename P::hooks>;

}  // namespace zklock
