// SPDX-License-Identifier: Apache-2.0
// zklock:timeout — how long a blocking lock()/acquire() may wait.
//
//   timeout_forever            lock() waits as long as it takes (like std::mutex). The default.
//   timeout_throw_after<Ms>    lock() gives up after Ms milliseconds, removes its contender node
//                              and throws std::system_error(errc::lock_timeout): a stuck holder
//                              becomes an error, not a hung service.
// try_lock_for / try_lock_until take their own deadline under every policy (steady_clock, one
// deadline across every retry); try_lock never waits.
// Plug it in: struct my_policies : zklock::default_policies { using timeout = zklock::timeout_throw_after<5000>; };
//
// wait_context  One call's bound, whatever the policy: a deadline and a stop token. A stop request
//               (from any thread) ends the wait as the deadline would: the try returns false and
//               leaves no contender node behind. try_lock(wait_context), try_lock_shared(...) and
//               try_acquire(...) take one.
module;
#include <chrono>
#include <concepts>
#include <cstdint>
#include <stop_token>
#include <type_traits>
export module zklock:timeout;

export namespace zklock {

/// A timeout policy: an empty type whose static lock_deadline(now) gives the deadline of a blocking
/// lock() / acquire() called at `now`.
template <class P>
concept TimeoutPolicy = std::is_empty_v<P> && requires(std::chrono::steady_clock::time_point now) {
  { P::lock_deadline(now) } -> std::same_as<std::chrono::steady_clock::time_point>;
};

/// How long one acquire may wait (see the banner): until `deadline`, and while `stop` is not
/// requested. A default-constructed context waits forever and cannot be cancelled.
struct wait_context {
  /// The latest moment to be granted; time_point::max(): no deadline. A past one: one attempt.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  /// A stop request ends the wait (the try returns false); an empty token never does.
  std::stop_token stop{};
};

/// lock() waits forever (see the banner).
struct timeout_forever {
  /// Returns: time_point::max(), i.e. no deadline. Never throws.
  static std::chrono::steady_clock::time_point lock_deadline(std::chrono::steady_clock::time_point) {
    return std::chrono::steady_clock::time_point::max();
  }
};

/// lock() throws errc::lock_timeout after Ms milliseconds (see the banner).
template <std::int64_t Ms>
  requires(Ms > 0)
struct timeout_throw_after {
  /// Returns: now + Ms milliseconds. Never throws.
  static std::chrono::steady_clock::time_point lock_deadline(std::chrono::steady_clock::time_point now) {
    return now + std::chrono::milliseconds{Ms};
  }
};

}  // namespace zklock
