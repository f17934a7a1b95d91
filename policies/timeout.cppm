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
//               try_acquire(...) take one. It may also bound the hold it is granted (hold_bounds).
// hold_bounds   How long a hold may last (at_most: then zklock ends it, and lost_token() fires) and
//               must last (at_least: a release before it keeps the node until then). Per lock
//               object (set_hold_bounds) or per acquire (wait_context::hold).
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

/// Bounds on how long one hold lasts (see the banner), each from its grant; zero: no bound.
struct hold_bounds {
  /// The longest the hold may last. At the bound zklock ends it: lost_token() fires, still_owned()
  /// turns false, guarded writes of it fail, and its node is deleted, so that nobody waits on a
  /// stuck holder. The owner still unlocks it (which then deletes nothing).
  std::chrono::milliseconds at_most{0};
  /// The shortest it lasts: a release before it returns at once but keeps the node until then, so
  /// that nobody else is granted sooner (for as long as the session lives: a closed or expired
  /// session's nodes go with it).
  std::chrono::milliseconds at_least{0};
  friend bool operator==(const hold_bounds&, const hold_bounds&) = default;
};

/// How long one acquire may wait (see the banner): until `deadline`, and while `stop` is not
/// requested. A default-constructed context waits forever and cannot be cancelled.
struct wait_context {
  /// The latest moment to be granted; time_point::max(): no deadline. A past one: one attempt.
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  /// A stop request ends the wait (the try returns false); an empty token never does.
  std::stop_token stop{};
  /// Bounds of the hold this acquire is granted; a zero field takes the lock object's
  /// (set_hold_bounds). The acquire throws std::invalid_argument for a negative bound, or at_least
  /// over at_most.
  hold_bounds hold{};
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
