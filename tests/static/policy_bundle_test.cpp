// SPDX-License-Identifier: Apache-2.0
// Compile-time checks: one policy bundle for every lock type; a one-line override changes exactly
// one axis, and so does policies_with<M...>, which takes models only; each axis concept refuses a
// type made for another axis; hooks may carry state. (What must not compile at all, such as a
// semaphore with a reentrancy model or policies_with<int>, is checked by the refusal probes:
// tests/static/refusal_probe.cpp.)
#include <chrono>
#include <concepts>
#include <cstddef>
#include <string>
#include <thread>
#include <gtest/gtest.h>
import zklock;

namespace {

using zklock::default_policies;

// Every axis of a bundle, compared with another bundle's: which of the five are the same type.
template <class A, class B>
constexpr int same_axes() {
  return int{std::same_as<typename A::watch, typename B::watch>} +
         int{std::same_as<typename A::wakeup, typename B::wakeup>} +
         int{std::same_as<typename A::reentrancy, typename B::reentrancy>} +
         int{std::same_as<typename A::timeout, typename B::timeout>} +
         int{std::same_as<typename A::hooks, typename B::hooks>};
}

// The defaults are the ones the README and the ready aliases promise.
static_assert(zklock::LockPolicies<default_policies>);
static_assert(std::same_as<default_policies::watch, zklock::watch_predecessor>);
static_assert(std::same_as<default_policies::wakeup, zklock::wake_condition_variable>);
static_assert(std::same_as<default_policies::reentrancy, zklock::reentrancy_none>);
static_assert(std::same_as<default_policies::timeout, zklock::timeout_forever>);
static_assert(std::same_as<default_policies::hooks, zklock::no_hooks>);

// One axis, one line each: four axes stay the defaults, the fifth is the one named.
struct one_watch : default_policies { using watch = zklock::watch_children; };
struct one_wakeup : default_policies { using wakeup = zklock::wake_latch; };
struct one_reentrancy : default_policies { using reentrancy = zklock::reentrancy_per_thread; };
struct one_timeout : default_policies { using timeout = zklock::timeout_throw_after<5000>; };
struct counting_hooks {
  static constexpr bool enabled = true;
  static void on_acquire(const zklock::acquire_stats&) noexcept {}
  static void on_release(const zklock::release_stats&) noexcept {}
};
// Hooks with state of their own: a lock object keeps the instance given to its constructor.
struct registry_hooks {
  static constexpr bool enabled = true;
  int* acquires = nullptr;
  void on_acquire(const zklock::acquire_stats&) noexcept { ++*acquires; }
  void on_release(const zklock::release_stats&) noexcept {}
};
static_assert(zklock::Hooks<registry_hooks> && zklock::Hooks<counting_hooks> && zklock::Hooks<zklock::no_hooks>);
static_assert(std::constructible_from<zklock::basic_mutex<zklock::policies_with<registry_hooks>>, zklock::session&,
                                      std::string, registry_hooks>);
static_assert(std::constructible_from<zklock::mutex, zklock::session&, std::string>);
struct one_hooks : default_policies { using hooks = counting_hooks; };

static_assert(same_axes<default_policies, default_policies>() == 5);
static_assert(same_axes<one_watch, default_policies>() == 4 && std::same_as<one_watch::watch, zklock::watch_children>);
static_assert(same_axes<one_wakeup, default_policies>() == 4 && std::same_as<one_wakeup::wakeup, zklock::wake_latch>);
static_assert(same_axes<one_reentrancy, default_policies>() == 4 &&
              std::same_as<one_reentrancy::reentrancy, zklock::reentrancy_per_thread>);
static_assert(same_axes<one_timeout, default_policies>() == 4 &&
              std::same_as<one_timeout::timeout, zklock::timeout_throw_after<5000>>);
static_assert(same_axes<one_hooks, default_policies>() == 4 && std::same_as<one_hooks::hooks, counting_hooks>);
static_assert(zklock::LockPolicies<one_watch> && zklock::LockPolicies<one_wakeup> &&
              zklock::LockPolicies<one_reentrancy> && zklock::LockPolicies<one_timeout> &&
              zklock::LockPolicies<one_hooks>);

// policies_with<M...>: each model on its own axis, in any order; the others are the defaults.
using with_two = zklock::policies_with<zklock::wake_latch, zklock::timeout_throw_after<5000>>;
static_assert(same_axes<with_two, default_policies>() == 3 && std::same_as<with_two::wakeup, zklock::wake_latch> &&
              std::same_as<with_two::timeout, zklock::timeout_throw_after<5000>>);
static_assert(same_axes<zklock::policies_with<>, default_policies>() == 5);
static_assert(same_axes<zklock::policies_with<registry_hooks, zklock::watch_children>, one_watch>() == 4);
static_assert(zklock::PolicyModel<zklock::watch_children> && zklock::PolicyModel<registry_hooks> &&
              !zklock::PolicyModel<int> && !zklock::PolicyModel<default_policies>);
template <class... Ms>
concept Bundle = requires { typename zklock::policies_with<Ms...>::watch; };
static_assert(Bundle<zklock::wake_latch> && !Bundle<int> && !Bundle<zklock::wake_latch, zklock::wake_condition_variable>);

// The same bundle fits every lock type, and each re-exposes it (a semaphore takes no reentrancy
// model: its leases are the object's).
static_assert(std::same_as<zklock::basic_mutex<one_watch>::policies, one_watch>);
static_assert(std::same_as<zklock::basic_shared_mutex<one_watch>::policies, one_watch>);
static_assert(std::same_as<zklock::basic_counting_semaphore<one_watch>::policies, one_watch>);
static_assert(std::same_as<zklock::mutex::policies, default_policies>);
static_assert(std::same_as<zklock::shared_mutex::policies, default_policies>);
static_assert(std::same_as<zklock::counting_semaphore::policies, default_policies>);
static_assert(same_axes<zklock::recursive_mutex::policies, default_policies>() == 4 &&
              std::same_as<zklock::recursive_mutex::policies::reentrancy, zklock::reentrancy_per_thread>);
static_assert(same_axes<zklock::owner_mutex::policies, default_policies>() == 4 &&
              std::same_as<zklock::owner_mutex::policies::reentrancy, zklock::reentrancy_counted_owner>);

// Each axis concept refuses the models of the other axes (and a non-policy).
static_assert(!zklock::WatchStrategy<zklock::wake_latch> && !zklock::WatchStrategy<zklock::reentrancy_none> &&
              !zklock::WatchStrategy<zklock::timeout_forever> && !zklock::WatchStrategy<zklock::no_hooks> &&
              !zklock::WatchStrategy<int>);
static_assert(!zklock::WakeupPolicy<zklock::watch_predecessor> && !zklock::WakeupPolicy<zklock::reentrancy_none> &&
              !zklock::WakeupPolicy<zklock::timeout_forever> && !zklock::WakeupPolicy<zklock::no_hooks>);
static_assert(!zklock::ReentrancyPolicy<zklock::watch_predecessor> && !zklock::ReentrancyPolicy<zklock::wake_latch> &&
              !zklock::ReentrancyPolicy<zklock::timeout_forever> && !zklock::ReentrancyPolicy<zklock::no_hooks>);
static_assert(!zklock::TimeoutPolicy<zklock::watch_predecessor> && !zklock::TimeoutPolicy<zklock::wake_latch> &&
              !zklock::TimeoutPolicy<zklock::reentrancy_none> && !zklock::TimeoutPolicy<zklock::no_hooks>);
static_assert(!zklock::Hooks<zklock::watch_predecessor> && !zklock::Hooks<zklock::wake_latch> &&
              !zklock::Hooks<zklock::reentrancy_none> && !zklock::Hooks<zklock::timeout_forever>);

// A bundle with a wrong type on one axis, or missing an axis, is no bundle.
struct wrong_watch : default_policies { using watch = zklock::wake_latch; };
struct wrong_hooks : default_policies { using hooks = zklock::timeout_forever; };
struct no_timeout {
  using watch = zklock::watch_predecessor;
  using wakeup = zklock::wake_condition_variable;
  using reentrancy = zklock::reentrancy_none;
  using hooks = zklock::no_hooks;
};
static_assert(!zklock::LockPolicies<wrong_watch> && !zklock::LockPolicies<wrong_hooks> &&
              !zklock::LockPolicies<no_timeout> && !zklock::LockPolicies<int>);
template <class P>
concept MutexOf = requires { typename zklock::basic_mutex<P>; };
static_assert(MutexOf<one_watch> && !MutexOf<wrong_watch>);

// A new model of an axis needs nothing but its concept: a watch strategy of our own plugs in.
struct watch_nearest_only {
  static constexpr std::size_t window(std::size_t ahead, std::size_t, bool) noexcept { return ahead < 1 ? ahead : 1; }
};
struct own_watch : default_policies { using watch = watch_nearest_only; };
static_assert(zklock::WatchStrategy<watch_nearest_only> && zklock::LockPolicies<own_watch>);
// ... and so does a reentrancy model of our own (one owner per lock object, like counted_owner).
struct object_owned {
  static constexpr bool reentrant = true;
  static std::thread::id owner() noexcept { return {}; }
};
static_assert(zklock::ReentrancyPolicy<object_owned>);

}  // namespace

// The checks above run at compile time; this names the file in the test report.
TEST(PolicyBundle, OneLineChangesOneAxis) { SUCCEED(); }
