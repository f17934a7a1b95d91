// SPDX-License-Identifier: Apache-2.0
// zklock:shared_mutex — basic_shared_mutex: a read/write lock, two sides of one lock node.
module;
#include <chrono>
#include <cstdint>
#include <functional>
#include <utility>
#include <stop_token>
#include <string>
#include <system_error>
export module zklock:shared_mutex;
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

/// A fair read/write lock: std::unique_lock takes the write side, std::shared_lock the read side.
/// Queue order decides, for readers too: a reader waits behind any writer queued ahead of it (even
/// one that only waits), so a stream of readers never starves a writer, and readers queued
/// together behind the same writer are granted together.
/// The write holder may also take the read side (downgrade: lock_shared(), then unlock()): the read
/// hold shares the write node, so no writer queued meanwhile gets in before unlock_shared() (nor do
/// readers queued behind it). A reader asking for the write side gets
/// resource_deadlock_would_occur instead of waiting forever.
/// Timed calls and releases of what is not held follow basic_mutex's rules.
/// Nodes are named like Curator's InterProcessReadWriteLock (__READ__ / __WRIT__).
template <LockPolicies P = default_policies>
class basic_shared_mutex {
 public:
  /// The policy bundle this type is built from (zklock:policies).
  using policies = P;
  /// The hooks type of the bundle; an instance of it is given to the constructor.
  using hooks_type = typename P::hooks;

  /// Effects, Throws: as basic_mutex's constructor (`hooks` observes both sides).
  basic_shared_mutex(session& s, std::string path, hooks_type hooks = {})
      : path_(detail::checked_path(std::move(path))), hooks_(std::move(hooks)), write_(s, path_, hooks_),
        read_(s, path_, hooks_), async_(s, path_, hooks_) {}
  basic_shared_mutex(const basic_shared_mutex&) = delete;
  basic_shared_mutex& operator=(const basic_shared_mutex&) = delete;

  /// Effects: blocks until the caller holds the write side. Throws: resource_deadlock_would_occur
  /// if the caller holds the read side (or the write side and the reentrancy policy does not
  /// re-enter); as basic_mutex::lock().
  void lock() {
    if (!write_side({P::timeout::lock_deadline(detail::clock::now())}))
      detail::throw_error(errc::lock_timeout, "zklock: lock() on " + path_ + ": the timeout policy's bound passed");
  }
  /// Effects, Returns: one attempt at the write side without waiting. Throws: as lock(), but never
  /// lock_timeout.
  [[nodiscard]] bool try_lock() { return write_side({detail::clock::now()}); }
  /// Effects, Returns: waits at most `d` (<= 0: one attempt) for the write side. Throws: as
  /// try_lock().
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return write_side({detail::deadline_after(d, "try_lock_for")});
  }
  /// Effects, Returns: waits until `t` at most for the write side (a past `t`: one attempt).
  /// Throws: as try_lock().
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return write_side({detail::steady_deadline(t)});
  }
  /// Effects, Returns: waits for the write side within `wc` (its deadline, a past one: one attempt;
  /// and until a stop is requested on its token); false on timeout or cancellation, leaving nothing
  /// on the server. Throws: as try_lock().
  [[nodiscard]] bool try_lock(const wait_context& wc) { return write_side(wc); }
  /// Effects: releases the caller's write hold (nothing if it holds none). Never throws.
  void unlock() noexcept { (void)write_.release(&read_); }
  /// Effects: as unlock(); `ec` is errc::not_held (and nothing happens) if the caller holds no write
  /// side, else the server's refusal of the delete if it refused (as basic_mutex::unlock(ec)), or
  /// cleared. Never throws.
  void unlock(std::error_code& ec) noexcept { ec = write_.release(&read_); }

  /// Effects: blocks until the caller holds the read side. Throws: as lock().
  void lock_shared() {
    if (!read_side({P::timeout::lock_deadline(detail::clock::now())}))
      detail::throw_error(errc::lock_timeout, "zklock: lock_shared() on " + path_ + ": the timeout policy's bound passed");
  }
  /// Effects, Returns: one attempt at the read side without waiting. Throws: as lock_shared(), but
  /// never lock_timeout.
  [[nodiscard]] bool try_lock_shared() { return read_side({detail::clock::now()}); }
  /// Effects, Returns: waits at most `d` (<= 0: one attempt) for the read side. Throws: as
  /// try_lock_shared().
  template <class Rep, class Period>
  [[nodiscard]] bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return read_side({detail::deadline_after(d, "try_lock_shared_for")});
  }
  /// Effects, Returns: waits until `t` at most for the read side (a past `t`: one attempt).
  /// Throws: as try_lock_shared().
  template <class Clock, class Duration>
  [[nodiscard]] bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
    return read_side({detail::steady_deadline(t)});
  }
  /// Effects, Returns: waits for the read side within `wc`, as try_lock(wc). Throws: as
  /// try_lock_shared().
  [[nodiscard]] bool try_lock_shared(const wait_context& wc) { return read_side(wc); }
  /// Effects: releases the caller's read hold (nothing if it holds none). Never throws.
  void unlock_shared() noexcept { (void)read_.release(&write_); }
  /// Effects: as unlock_shared(); `ec` is errc::not_held (and nothing happens) if the caller holds no
  /// read side, else the server's refusal of the delete if it refused (as unlock(ec)), or cleared.
  /// Never throws.
  void unlock_shared(std::error_code& ec) noexcept { ec = read_.release(&write_); }

  /// Returns: the fencing token of the caller's write hold. Throws: errc::not_held.
  std::int64_t fencing_token() const { return write_.fencing_token("fencing_token()"); }
  /// Returns: the fencing token of the caller's read hold: the creation zxid of its read node (of
  /// the write node it shares after a downgrade). Every writer granted after this hold ends gets a
  /// larger token; readers holding together have distinct tokens that exclude nobody.
  /// Throws: std::system_error(errc::not_held) if the caller holds no read side.
  std::int64_t fencing_token_shared() const { return read_.fencing_token("fencing_token_shared()"); }
  /// Returns: the fence of the caller's write hold (see basic_mutex::fence). Throws: errc::not_held.
  zklock::fence fence() const { return write_.fence("fence()"); }
  /// Returns: the fence of the caller's read hold (after a downgrade: of the write node it shares).
  /// Throws: std::system_error(errc::not_held) if the caller holds no read side.
  zklock::fence fence_shared() const { return read_.fence("fence_shared()"); }
  /// Returns: whether the caller holds the write side.
  bool owns_lock() const noexcept { return write_.held(); }
  /// Returns: whether the caller holds the read side.
  bool owns_shared() const noexcept { return read_.held(); }
  /// Returns: the loss signal (see basic_mutex::lost_token) of the caller's write hold, or else of
  /// its read hold. Throws: errc::not_held if it holds neither.
  std::stop_token lost_token() const { return (write_.held() ? write_ : read_).lost_token("lost_token()"); }
  /// Returns: whether the caller holds either side and no loss has been signalled.
  bool still_owned() const noexcept { return write_.held() ? write_.still_owned() : read_.still_owned(); }
  /// Effects: bounds every hold of either side granted from now on (see basic_mutex::set_hold_bounds).
  /// Throws: std::invalid_argument for a negative bound, or at_least over at_most.
  void set_hold_bounds(const hold_bounds& b) {
    write_.settings.set(b);
    read_.settings.set(b);
  }
  /// Returns: the bounds set by set_hold_bounds.
  hold_bounds hold_bounds_set() const noexcept { return write_.settings.get(); }
  /// Effects: holds of either side granted from now on act on a request to let go by `p` (see
  /// basic_mutex::set_on_revoke).
  void set_on_revoke(on_revoke p) noexcept {
    write_.settings.set_revoke(p);
    read_.settings.set_revoke(p);
  }
  /// Returns: the revocation signal (see basic_mutex::revocation_token) of the caller's write hold,
  /// or else of its read hold. Throws: errc::not_held if it holds neither.
  std::stop_token revocation_token() const {
    return (write_.held() ? write_ : read_).revocation_token("revocation_token()");
  }
  /// Returns: the lock node's path.
  const std::string& path() const noexcept { return path_; }

  /// Effects: starts an asynchronous acquire of the write side and returns at once (never blocks):
  /// `cb` runs exactly once, on `ex` (default: the session's completion thread), with a cleared code
  /// and the write hold, or with the error (hold empty): errc::lock_timeout when `wc.deadline` (or
  /// the timeout policy's bound) passes, errc::cancelled on a stop request on `wc.stop`,
  /// errc::session_closed if the session is closed or this object destroyed first, session and
  /// server failures as the blocking call. On failure nothing is left on the server. The hold is
  /// the lock_hold's, not a thread's: the reentrancy axis does not apply, nor does the wake-up axis.
  /// Throws: std::system_error if the session's runner threads cannot be started; std::bad_alloc.
  template <AcquireCallback Callback>
  void async_lock(const wait_context& wc, Callback cb, executor ex = {}) {
    async_.start(detail::write_rule{}, write_.settings.apply(wc), std::move(ex), std::move(cb),
                 write_.settings.revoke_policy());
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
    return async_.awaitable(detail::write_rule{}, write_.settings.apply(wc), std::move(ex),
                            write_.settings.revoke_policy());
  }

  /// Effects: as async_lock, for the read side. Unlike lock_shared(), it never shares a write hold
  /// of the caller: it queues like any reader.
  /// Throws: std::system_error if the session's runner threads cannot be started; std::bad_alloc.
  template <AcquireCallback Callback>
  void async_lock_shared(const wait_context& wc, Callback cb, executor ex = {}) {
    async_.start(detail::read_rule{}, read_.settings.apply(wc), std::move(ex), std::move(cb),
                 read_.settings.revoke_policy());
  }
  /// Effects: as async_lock_shared(wait_context{}, cb): no deadline but the timeout policy's.
  template <AcquireCallback Callback>
  void async_lock_shared(Callback cb) {
    async_lock_shared(wait_context{}, std::move(cb));
  }
  /// Returns: an awaitable of the same acquire, started when awaited (await it while this object
  /// lives): `lock_hold h = co_await x.async_lock_shared(wc);` resumes the coroutine on `ex`
  /// (default: the session's completion thread). Its co_await throws std::system_error with the
  /// codes above.
  [[nodiscard]] hold_awaitable async_lock_shared(const wait_context& wc = {}, executor ex = {}) {
    return async_.awaitable(detail::read_rule{}, read_.settings.apply(wc), std::move(ex),
                            read_.settings.revoke_policy());
  }

 private:
  bool write_side(const wait_context& wc) {
    if (read_.held())
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              "zklock: the write side of " + path_ + " asked for by a reader of it");
    return write_.acquire(detail::write_rule{}, wc);
  }
  bool read_side(const wait_context& wc) {
    // Downgrade: a new read node would queue behind writers that came after ours; share ours.
    if (const auto w = write_.held_node_of_caller()) return read_.adopt(*w, wc);
    return read_.acquire(detail::read_rule{}, wc);
  }
  std::string path_;
  detail::hooks_ref<hooks_type> hooks_;
  detail::lock_side<P> write_;
  detail::lock_side<P> read_;
  detail::async_side<P> async_;  // last: destroyed first
};

}  // namespace zklock
