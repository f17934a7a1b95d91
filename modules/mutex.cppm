// SPDX-License-Identifier: Apache-2.0
// zklock:mutex — basic_mutex: the standard TimedLockable interface over the one algorithm.
module;
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <stop_token>
#include <string>
#include <system_error>
export module zklock:mutex;
import :errors;
import :session;
import :revoke;
import :operations;
import zklock.detail;
import :holds;
import :policies;
import :timeout;
import :async;

export namespace zklock {

/// A fair, cluster-wide mutex: the standard TimedLockable interface over the one algorithm.
/// Default (default_policies): predecessor watch, condition-variable wake-up, not re-entrant,
/// lock() waits forever, no hooks.
///
/// Timed calls follow the standard: a duration <= 0 or a past time point makes one attempt, like
/// try_lock(). Releasing what the caller does not hold is a precondition violation that zklock
/// checks: unlock() then does nothing, unlock(ec) reports errc::not_held (the same rule for every
/// lock type, side and lock_hold).
template <LockPolicies P = default_policies>
class basic_mutex {
 public:
  /// The policy bundle this type is built from (zklock:policies).
  using policies = P;
  /// The hooks type of the bundle; an instance of it is given to the constructor.
  using hooks_type = typename P::hooks;

  /// Effects: names the lock node `path` (created on first use); `hooks` observes this object's
  /// acquires and releases (and those of the lock_holds it grants; zklock:hooks). Throws:
  /// std::invalid_argument for a bad path. The session must outlive the mutex.
  basic_mutex(session& s, std::string path, hooks_type hooks = {})
      : path_(detail::checked_path(std::move(path))), hooks_(std::move(hooks)), side_(s, path_, hooks_),
        async_(s, path_, hooks_) {}

  /// Effects: completes the asynchronous acquires still pending (errc::session_closed) and releases
  /// any hold left, except those of lock_holds (never throws).
  ~basic_mutex() = default;
  basic_mutex(const basic_mutex&) = delete;
  basic_mutex& operator=(const basic_mutex&) = delete;

  /// Effects: blocks until the caller holds the lock (or re-enters it, per the reentrancy policy).
  /// Throws: std::system_error: resource_deadlock_would_occur if the caller holds it and the
  /// reentrancy policy does not re-enter; errc::lock_lost if its earlier hold was lost;
  /// errc::lock_timeout when the timeout policy's bound passes; session or server failures.
  void lock() {
    if (!side_.acquire(detail::exclusive_rule{}, {P::timeout::lock_deadline(detail::clock::now())}))
      detail::throw_error(errc::lock_timeout, "zklock: lock() on " + path_ + ": the timeout policy's bound passed");
  }

  /// Effects: one attempt without waiting. Returns: whether the caller now holds the lock.
  /// Throws: as lock(), but never lock_timeout.
  [[nodiscard]] bool try_lock() { return side_.acquire(detail::exclusive_rule{}, {detail::clock::now()}); }

  /// Effects: waits at most `d` (<= 0: one attempt). Returns: whether the caller holds the lock;
  /// on false nothing of the attempt is left on the server. Throws: as try_lock().
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return side_.acquire(detail::exclusive_rule{}, {detail::deadline_after(d, "try_lock_for")});
  }

  /// Effects: waits until `t` at most (converted to steady_clock once; a past `t`: one attempt).
  /// Returns: as try_lock_for. Throws: as try_lock().
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return side_.acquire(detail::exclusive_rule{}, {detail::steady_deadline(t)});
  }

  /// Effects: waits until `wc.deadline` at most (a past one: one attempt), and only until a stop
  /// is requested on `wc.stop` (from any thread). Returns: whether the caller holds the lock; on
  /// false (the deadline passed or the wait was cancelled) nothing of the attempt is left on the
  /// server. Throws: as try_lock().
  [[nodiscard]] bool try_lock(const wait_context& wc) { return side_.acquire(detail::exclusive_rule{}, wc); }

  /// Effects: releases one hold of the caller; the last one deletes the node (retried in the
  /// background if the connection is down). Does nothing if the caller does not hold (a
  /// precondition violation; unlock(ec) reports it). Never throws.
  void unlock() noexcept { (void)side_.release(); }

  /// Effects: as unlock(). `ec`: errc::not_held if the caller does not hold (nothing happens);
  /// else the server's refusal of the delete if it refused (errc::no_auth: the lock node's ACL
  /// changed under us; the node stays until the session ends, and the hold is over all the same);
  /// else cleared. Never throws (for destructors and callers that must not throw but want to know).
  void unlock(std::error_code& ec) noexcept { ec = side_.release(); }

  /// Returns: the fencing token of the caller's hold: the creation zxid of its node, strictly
  /// increasing across successive holders. Throws: std::system_error(errc::not_held).
  std::int64_t fencing_token() const { return side_.fencing_token("fencing_token()"); }

  /// Returns: the fence of the caller's hold: its contender node and fencing token, for guarded
  /// writes (session::commit_if_held). Throws: std::system_error(errc::not_held).
  zklock::fence fence() const { return side_.fence("fence()"); }

  /// Returns: whether the caller holds the lock (as far as this object knows).
  bool owns_lock() const noexcept { return side_.held(); }

  /// Returns: a token that fires when ownership of the caller's hold can no longer be guaranteed:
  /// the session expired, was closed, or stayed disconnected longer than its loss tolerance, our
  /// node was deleted by someone else (watched from the first call on, which costs one request), or
  /// the hold reached hold_bounds::at_most (see set_hold_bounds).
  /// It never fires because of our own unlock(). Throws: std::system_error(errc::not_held).
  std::stop_token lost_token() const { return side_.lost_token("lost_token()"); }

  /// Returns: whether the caller holds the lock and no loss has been signalled.
  bool still_owned() const noexcept { return side_.still_owned(); }

  /// Effects: starts an asynchronous acquire of the lock and returns at once (never blocks): `cb`
  /// runs exactly once, on `ex` (default: the session's completion thread), with a cleared code and
  /// the hold, or with the error (hold empty): errc::lock_timeout when `wc.deadline` (or the
  /// timeout policy's bound) passes, errc::cancelled on a stop request on `wc.stop`,
  /// errc::session_closed if the session is closed or this object destroyed first, session and
  /// server failures as the blocking call. On failure nothing is left on the server. The hold is
  /// the lock_hold's, not a thread's: the reentrancy axis does not apply, nor does the wake-up axis
  /// (an asynchronous acquire suspends instead of blocking a thread).
  /// Throws: std::system_error if the session's runner threads cannot be started; std::bad_alloc.
  template <AcquireCallback Callback>
  void async_lock(const wait_context& wc, Callback cb, executor ex = {}) {
    async_.start(detail::exclusive_rule{}, side_.settings.apply(wc), std::move(ex), std::move(cb),
                 side_.settings.revoke_policy());
  }
  /// Effects: as async_lock(wait_context{}, cb): no deadline but the timeout policy's.
  template <AcquireCallback Callback>
  void async_lock(Callback cb) {
    async_lock(wait_context{}, std::move(cb));
  }
  /// Returns: an awaitable of the same acquire, started when awaited (await it while this object
  /// lives): `lock_hold h = co_await x.async_lock(wc);` resumes the coroutine on `ex` (default: the
  /// session's completion thread). Its co_await throws std::system_error with the codes above.
  [[nodiscard]] hold_awaitable async_lock(const wait_context& wc = {}, executor ex = {}) {
    return async_.awaitable(detail::exclusive_rule{}, side_.settings.apply(wc), std::move(ex),
                            side_.settings.revoke_policy());
  }

  /// Effects: bounds every hold granted from now on (see hold_bounds: at_most ends it and fires
  /// lost_token(); a release before at_least keeps the node until then); an acquire's
  /// wait_context::hold overrides a field it sets. Zero fields: no bound (the default).
  /// Throws: std::invalid_argument for a negative bound, or at_least over at_most.
  void set_hold_bounds(const hold_bounds& b) { side_.settings.set(b); }
  /// Returns: the bounds set by set_hold_bounds.
  hold_bounds hold_bounds_set() const noexcept { return side_.settings.get(); }

  /// Effects: holds granted from now on act on a request to let go (revoke(), Curator's Revoker) by
  /// `p` (see on_revoke; the default is notify).
  void set_on_revoke(on_revoke p) noexcept { side_.settings.set_revoke(p); }
  /// Returns: a token that fires when the caller's hold is asked to let go, unless its policy is
  /// ignore (the first call arms a watch on its node, as lost_token() does: one request; a request
  /// made before is seen too). Throws: std::system_error(errc::not_held).
  std::stop_token revocation_token() const { return side_.revocation_token("revocation_token()"); }

  /// Returns: the lock node's path.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  detail::hooks_ref<hooks_type> hooks_;
  detail::lock_side<P> side_;
  detail::async_side<P> async_;  // last: destroyed first
};

}  // namespace zklock
