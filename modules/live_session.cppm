// SPDX-License-Identifier: Apache-2.0
// zklock:live_session — doing a piece of work again on the next session when the session ends under
// it, as a waiting acquire queues again: on_live_session(). Tools that read or wait on the server
// (wait_until_free, `zklock ls`) ride through an expiry with it.
module;
#include <concepts>
#include <optional>
#include <type_traits>
#include <utility>
export module zklock:live_session;
import :session;
import :timeout;
import :wakeup;
import :algorithm;

export namespace zklock {

/// Effects: calls `f()`, and calls it again each time the session ends under it: `f` throws
/// std::system_error with errc::session_expired (the session expired, or zklock gave it up after a
/// disconnection longer than its loss tolerance). Before each new call it blocks until a later
/// session generation is connected (see session::await_next_generation), until wc.deadline, and
/// while wc.stop is not requested. `f` bounds its own waits (give it the same wait_context).
/// Returns: what `f` returns; nullopt if wc.stop is requested after the session ended under `f`.
/// Throws: what `f` throws; the session_expired that `f` threw if no later generation is connected
/// before wc.deadline; std::system_error: session_expired if none will come (reestablish_after_expiry
/// is off, or re-establishment was refused for good), session_closed after close().
template <class F>
  requires std::invocable<F&> && std::is_object_v<std::invoke_result_t<F&>> &&
           std::move_constructible<std::invoke_result_t<F&>>
std::optional<std::invoke_result_t<F&>> on_live_session(session& s, const wait_context& wc, F f) {
  using R = std::invoke_result_t<F&>;
  return detail::retry_on_next_session<wake_condition_variable>(s, wc, [&f] { return std::optional<R>{std::in_place, f()}; })
      .run();
}

}  // namespace zklock
