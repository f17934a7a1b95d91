// SPDX-License-Identifier: Apache-2.0
// zklock:semaphore — basic_counting_semaphore: leases of one semaphore node, held by the object.
module;
#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>
#include <vector>
export module zklock:semaphore;
import :errors;
import :session;
import :revoke;
import :operations;
import zklock.detail;
import :holds;
import :policies;
import :timeout;
import :async;
import :reentrancy;

export namespace zklock {

/// A cluster-wide counting semaphore with a fixed number of leases, stored on the semaphore node.
/// That node is a container: once a used semaphore has no lease held or wanted, the server removes
/// it (ZooKeeper's container check, every 60 s by default), and the next acquire of any object
/// makes it again with the object's count; nothing piles up.
/// Each acquire takes one more lease (one contender node) of one permit, or of n permits with the
/// calls that take n: all n at once or none (no partial holds, so two waiters for many permits never
/// deadlock each other); release() returns the most recent lease, from any thread. Fair: leases go
/// in queue order, and a lease waiting for many permits is not passed by later smaller ones. The
/// leases are the object's, not a thread's: the bundle's reentrancy axis has no meaning here, and a
/// bundle that names a model other than reentrancy_none does not compile. Timed calls and releases of what is not held follow
/// basic_mutex's rules.
template <LockPolicies P = default_policies>
class basic_counting_semaphore {
  static_assert(std::same_as<typename P::reentrancy, reentrancy_none>,
                "zklock::basic_counting_semaphore: the policy bundle's reentrancy axis does not apply to a "
                "semaphore (its leases are the object's, every acquire takes one more): leave it reentrancy_none");

 public:
  /// The policy bundle this type is built from (zklock:policies).
  using policies = P;
  /// The hooks type of the bundle; an instance of it is given to the constructor.
  using hooks_type = typename P::hooks;

  /// Effects: opens (creating if needed) the semaphore node `path` with `leases` leases; `hooks`
  /// observes this object's acquires and releases (and those of the lock_holds it grants).
  /// Throws: std::invalid_argument for a bad path or leases outside 1..1,000,000; std::system_error
  /// (errc::lease_count_mismatch) if the node stores another count; session failures.
  basic_counting_semaphore(session& s, std::string path, std::ptrdiff_t leases, hooks_type hooks = {})
      : s_(s), path_(detail::checked_path(std::move(path))), leases_(checked_leases(leases)), hooks_(std::move(hooks)),
        live_(std::make_shared<detail::lease_limit>(static_cast<std::size_t>(leases_), -1)), async_(s, path_, hooks_) {
    live_->store(static_cast<std::size_t>(leases_), detail::ensure_semaphore_node(s_, path_, static_cast<int>(leases_)));
    detail::open_semaphore_watch(s_, path_);
  }
  /// Effects: returns every lease still held (never throws).
  ~basic_counting_semaphore() {
    const auto report = hooks_.reporter();
    for (auto& l : held_) (void)detail::end_hold(s_, l, path_, report);
    detail::close_semaphore_watch(s_, path_);
  }
  basic_counting_semaphore(const basic_counting_semaphore&) = delete;
  basic_counting_semaphore& operator=(const basic_counting_semaphore&) = delete;

  /// Effects: blocks until a lease is granted (making the semaphore node again, with this object's
  /// count, if it was removed while idle). Throws: errc::lock_timeout when the timeout policy's
  /// bound passes; errc::lease_count_mismatch if the node was removed and made again meanwhile with
  /// another count; session or server failures.
  void acquire() {
    if (!acquire_within({P::timeout::lock_deadline(detail::clock::now())}))
      detail::throw_error(errc::lock_timeout, "zklock: acquire() on " + path_ + ": the timeout policy's bound passed");
  }
  /// Effects, Returns: one attempt without waiting: whether a lease was granted. Throws: as
  /// acquire(), but never lock_timeout.
  [[nodiscard]] bool try_acquire() { return acquire_within({detail::clock::now()}); }
  /// Effects, Returns: waits at most `d` (<= 0: one attempt) for a lease. Throws: as try_acquire().
  template <class Rep, class Period>
  [[nodiscard]] bool try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    return acquire_within({detail::deadline_after(d, "try_acquire_for")});
  }
  /// Effects, Returns: waits until `t` at most for a lease (a past `t`: one attempt).
  /// Throws: as try_acquire().
  template <class Clock, class Duration>
  [[nodiscard]] bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) {
    return acquire_within({detail::steady_deadline(t)});
  }
  /// Effects, Returns: waits for a lease within `wc` (its deadline, a past one: one attempt; and
  /// until a stop is requested on its token); false on timeout or cancellation, leaving nothing on
  /// the server. Throws: as try_acquire().
  [[nodiscard]] bool try_acquire(const wait_context& wc) { return acquire_within(wc); }

  /// Effects: as acquire(), for one lease of `n` permits: granted once all n fit beside the leases
  /// ahead of it in the queue, all at once (never some of them). release() returns it whole.
  /// Throws: std::invalid_argument if n is outside 1..leases(); as acquire().
  void acquire(std::ptrdiff_t n) {
    if (!acquire_within({P::timeout::lock_deadline(detail::clock::now())}, n))
      detail::throw_error(errc::lock_timeout, "zklock: acquire(" + std::to_string(n) + ") on " + path_ +
                                                  ": the timeout policy's bound passed");
  }
  /// Effects, Returns: as try_acquire(), for one lease of `n` permits. Throws: as acquire(n).
  [[nodiscard]] bool try_acquire(std::ptrdiff_t n) { return acquire_within({detail::clock::now()}, n); }
  /// Effects, Returns: as try_acquire_for(d), for one lease of `n` permits. Throws: as acquire(n).
  template <class Rep, class Period>
  [[nodiscard]] bool try_acquire_for(std::ptrdiff_t n, const std::chrono::duration<Rep, Period>& d) {
    return acquire_within({detail::deadline_after(d, "try_acquire_for")}, n);
  }
  /// Effects, Returns: as try_acquire_until(t), for one lease of `n` permits. Throws: as acquire(n).
  template <class Clock, class Duration>
  [[nodiscard]] bool try_acquire_until(std::ptrdiff_t n, const std::chrono::time_point<Clock, Duration>& t) {
    return acquire_within({detail::steady_deadline(t)}, n);
  }
  /// Effects, Returns: as try_acquire(wc), for one lease of `n` permits. Throws: as acquire(n).
  [[nodiscard]] bool try_acquire(std::ptrdiff_t n, const wait_context& wc) { return acquire_within(wc, n); }
  /// Effects: blocks until a lease is granted, as acquire(). Returns: the lease, owned by the caller
  /// as a lock_hold (move-only: released when destroyed or by its unlock(), from any thread; with
  /// its fence, fencing token, lost_token() and revocation_token()). It is not one of this object's
  /// leases: release() never returns it and held_leases() does not count it; it may outlive this
  /// object, not the session. Throws: as acquire().
  [[nodiscard]] lock_hold acquire_lease() { return acquire_lease(1); }
  /// Effects, Returns: as acquire_lease(), one lease of `n` permits (granted as acquire(n); its
  /// permits() says n). Throws: as acquire(n).
  [[nodiscard]] lock_hold acquire_lease(std::ptrdiff_t n) {
    auto l = lease_within({P::timeout::lock_deadline(detail::clock::now())}, n);
    if (!l)
      detail::throw_error(errc::lock_timeout, "zklock: acquire_lease(" + std::to_string(n) + ") on " + path_ +
                                                  ": the timeout policy's bound passed");
    return l;
  }
  /// Effects, Returns: as try_acquire(wc), the lease as acquire_lease() returns it, or an empty
  /// lock_hold on timeout or cancellation (nothing left on the server). Throws: as try_acquire().
  [[nodiscard]] lock_hold try_acquire_lease(const wait_context& wc) { return lease_within(wc); }
  /// Effects, Returns: waits at most `d` (<= 0: one attempt) for a lease, as try_acquire_lease().
  /// Throws: as try_acquire().
  template <class Rep, class Period>
  [[nodiscard]] lock_hold try_acquire_lease_for(const std::chrono::duration<Rep, Period>& d) {
    return lease_within({detail::deadline_after(d, "try_acquire_lease_for")});
  }
  /// Effects, Returns: as try_acquire_lease(wc), one lease of `n` permits. Throws: as acquire(n).
  [[nodiscard]] lock_hold try_acquire_lease(std::ptrdiff_t n, const wait_context& wc) { return lease_within(wc, n); }
  /// Effects, Returns: as try_acquire_lease_for(d), one lease of `n` permits. Throws: as acquire(n).
  template <class Rep, class Period>
  [[nodiscard]] lock_hold try_acquire_lease_for(std::ptrdiff_t n, const std::chrono::duration<Rep, Period>& d) {
    return lease_within({detail::deadline_after(d, "try_acquire_lease_for")}, n);
  }
  /// Effects: returns the most recently granted lease of this object (all its permits: one, or the
  /// n of acquire(n)); does nothing if it holds
  /// none (a precondition violation; release(ec) reports it). A delete the server refuses goes to
  /// the log handler (release(ec) reports it). Never throws.
  void release() noexcept {
    std::error_code ec;
    release(ec);
  }
  /// Effects: as release(). `ec`: errc::not_held if the object holds no lease (nothing happens);
  /// else the server's refusal of the delete if it refused (errc::no_auth; the lease is returned
  /// all the same, its node stays until the session ends); else cleared. Never throws.
  void release(std::error_code& ec) noexcept {
    std::optional<detail::hold> l;
    {
      std::lock_guard lk{mu_};
      if (held_.empty()) {
        ec = make_error_code(errc::not_held);
        return;
      }
      l = std::move(held_.back());
      held_.pop_back();
    }
    ec = detail::end_hold(s_, *l, path_, hooks_.reporter());
  }
  /// Returns: how many leases this object holds (a lease of n permits counts once).
  std::ptrdiff_t held_leases() const noexcept {
    std::lock_guard lk{mu_};
    return static_cast<std::ptrdiff_t>(held_.size());
  }
  /// Returns: how many permits this object's leases take together.
  std::ptrdiff_t held_permits() const noexcept {
    std::lock_guard lk{mu_};
    std::ptrdiff_t n = 0;
    for (const auto& l : held_) n += detail::weight_of(l.node.path);
    return n;
  }
  /// Returns: the number of leases of the semaphore, as this object was opened with (set_max may
  /// have changed the node's since: max() reads it).
  std::ptrdiff_t leases() const noexcept { return leases_; }
  /// Effects: stores `n` as the semaphore's lease count N, for every process at once (a versioned
  /// write: of concurrent changes each applies whole, the last one stays). Waiters see it at once:
  /// a larger N grants those that now fit; under a smaller N the holders keep their leases until
  /// they release them, and no lease is granted until the permits held fit in the new N. An
  /// acquire(k) waiting for more than the new N fails with errc::lease_count_mismatch. The node is
  /// made with `n` if it was reaped. Objects opened before keep working with the new N; a new object
  /// must be opened with it. Returns: the count stored before (0 if the node was missing).
  /// Throws: std::invalid_argument if n is outside 1..1,000,000; std::system_error (no_auth without
  /// WRITE on the node, path_kind_mismatch, operation_timeout after connect_timeout without a
  /// connection; session failures).
  std::ptrdiff_t set_max(std::ptrdiff_t n) {
    checked_leases(n);
    return static_cast<std::ptrdiff_t>(detail::store_lease_count(s_, path_, static_cast<std::size_t>(n)));
  }
  /// Returns: the lease count N its node stores now (one request; this object's own count if the
  /// node is gone: removed while idle, its next acquire makes it again). A snapshot: it may have
  /// changed by the time it returns. Throws: std::system_error (errc::path_kind_mismatch if the
  /// node stores no lease count any more; operation_timeout after connect_timeout without a
  /// connection; session or server failures).
  std::ptrdiff_t max() const { return usage().first; }
  /// Returns: how many of its permits are held now, by every process (two requests: the lease
  /// count, then the queue; the leases at its head that fit in N hold). A snapshot, as max().
  /// Throws: as max().
  std::ptrdiff_t used() const { return usage().second; }
  /// Returns: how many permits are free now: max() - used(), from one snapshot (two requests).
  /// A new acquire(n) is granted at once only if n fit and no one waits. Throws: as max().
  std::ptrdiff_t available() const {
    const auto [n, held] = usage();
    return n - held;
  }
  /// Returns: a token that fires when the most recently granted lease of this object (the one
  /// release() returns next) can no longer be guaranteed: as basic_mutex::lost_token (the first
  /// call arms a watch on the lease's node: one request). Throws: std::system_error(errc::not_held)
  /// if the object holds no lease.
  std::stop_token lost_token() const { return detail::lost_token_of(s_, latest("lost_token()")); }
  /// Returns: whether the object holds a lease and no loss of its most recent one was signalled
  /// (the first call arms the watch, as lost_token() does).
  bool still_owned() const noexcept {
    try {
      std::optional<detail::hold> l;
      {
        std::lock_guard lk{mu_};
        if (held_.empty()) return false;
        l = held_.back();
      }
      return detail::still_owned_of(s_, *l);
    } catch (...) {  // allocation failure while looking
      return false;
    }
  }
  /// Returns: the fencing token of the most recently granted lease of this object (the one
  /// release() returns next): the creation zxid of its node, larger than that of every lease
  /// granted before it. Throws: std::system_error(errc::not_held) if the object holds no lease.
  std::int64_t fencing_token() const { return latest("fencing_token()").node.czxid; }
  /// Returns: the fence of the most recently granted lease of this object (see basic_mutex::fence).
  /// Throws: std::system_error(errc::not_held) if the object holds no lease.
  zklock::fence fence() const {
    auto l = latest("fence()");
    return {std::move(l.node.path), l.node.czxid};
  }
  /// Effects: bounds every lease granted from now on (see basic_mutex::set_hold_bounds).
  /// Throws: std::invalid_argument for a negative bound, or at_least over at_most.
  void set_hold_bounds(const hold_bounds& b) { bounds_.set(b); }
  /// Returns: the bounds set by set_hold_bounds.
  hold_bounds hold_bounds_set() const noexcept { return bounds_.get(); }
  /// Effects: leases granted from now on act on a request to let go by `p` (see
  /// basic_mutex::set_on_revoke).
  void set_on_revoke(on_revoke p) noexcept { bounds_.set_revoke(p); }
  /// Returns: the revocation signal (see basic_mutex::revocation_token) of the most recently granted
  /// lease of this object. Throws: std::system_error(errc::not_held) if it holds no lease.
  std::stop_token revocation_token() const { return detail::revocation_token_of(s_, latest("revocation_token()")); }
  /// Returns: the semaphore node's path.
  const std::string& path() const noexcept { return path_; }

  /// Effects: starts an asynchronous acquire of one lease and returns at once (never blocks): `cb`
  /// runs exactly once, on `ex` (default: the session's completion thread), with a cleared code and
  /// the lease (a lock_hold: it is not one of this object's leases, and release() never returns
  /// it), or with the error (hold empty): errc::lock_timeout when `wc.deadline` (or the timeout
  /// policy's bound) passes, errc::cancelled on a stop request on `wc.stop`, errc::session_closed
  /// if the session is closed or this object destroyed first, session and server failures as the
  /// blocking call. On failure nothing is left on the server. The wake-up axis does not apply (an
  /// asynchronous acquire suspends instead of blocking a thread).
  /// Throws: std::system_error if the session's runner threads cannot be started; std::bad_alloc.
  template <AcquireCallback Callback>
  void async_acquire(const wait_context& wc, Callback cb, executor ex = {}) {
    async_.start(rule_for(1, "async_acquire"), bounds_.apply(wc), std::move(ex), std::move(cb),
                 bounds_.revoke_policy());
  }
  /// Effects: as async_acquire(wait_context{}, cb): no deadline but the timeout policy's.
  template <AcquireCallback Callback>
  void async_acquire(Callback cb) {
    async_acquire(wait_context{}, std::move(cb));
  }
  /// Effects: as async_acquire(wc, cb, ex), for one lease of `n` permits (granted as acquire(n)).
  /// Throws: std::invalid_argument if n is outside 1..leases() (before anything starts); as above.
  template <AcquireCallback Callback>
  void async_acquire(std::ptrdiff_t n, const wait_context& wc, Callback cb, executor ex = {}) {
    async_.start(rule_for(n, "async_acquire"), bounds_.apply(wc), std::move(ex), std::move(cb), bounds_.revoke_policy());
  }
  /// Returns: an awaitable of the same acquire, started when awaited (await it while this object
  /// lives): `lock_hold h = co_await x.async_acquire(wc);` resumes the coroutine on `ex` (default: the
  /// session's completion thread). Its co_await throws std::system_error with the codes above.
  [[nodiscard]] hold_awaitable async_acquire(const wait_context& wc = {}, executor ex = {}) {
    return async_.awaitable(rule_for(1, "async_acquire"), bounds_.apply(wc), std::move(ex),
                            bounds_.revoke_policy());
  }
  /// Returns: an awaitable of async_acquire(n, wc, ...), as above. Throws: std::invalid_argument if n
  /// is outside 1..leases() (at the call, not when awaited).
  [[nodiscard]] hold_awaitable async_acquire(std::ptrdiff_t n, const wait_context& wc, executor ex = {}) {
    return async_.awaitable(rule_for(n, "async_acquire"), bounds_.apply(wc), std::move(ex), bounds_.revoke_policy());
  }

 private:
  static std::ptrdiff_t checked_leases(std::ptrdiff_t n) {
    if (n < 1 || n > 1'000'000)
      throw std::invalid_argument("zklock::basic_counting_semaphore: " + std::to_string(n) +
                                  " leases; a semaphore has 1..1000000");
    return n;
  }
  /// Returns: the rule of a lease of `n` permits. Throws: std::invalid_argument, naming `fn`, if n is
  /// outside 1..N (N as last read: if n exceeds it, read again first: one request).
  detail::semaphore_rule rule_for(std::ptrdiff_t n, const char* fn) const {
    auto known = static_cast<std::ptrdiff_t>(live_->load().first);
    if (n > known && n <= 1'000'000) {  // set_max may have raised it
      const auto now =
          detail::read_lease_count(s_, path_, detail::clock::now() + s_.options().connect_timeout, true);
      if (now && now->leases != 0) {  // (gone: reaped while idle; its next acquire makes it with `known`)
        live_->store(now->leases, now->version);
        known = static_cast<std::ptrdiff_t>(now->leases);
      }
    }
    if (n < 1 || n > known)
      throw std::invalid_argument("zklock::basic_counting_semaphore::" + std::string{fn} + ": " + std::to_string(n) +
                                  " permits asked of " + path_ + ", a semaphore of N = " + std::to_string(known) +
                                  " leases: ask for 1 to " + std::to_string(known));
    return {static_cast<std::size_t>(known), static_cast<std::uint32_t>(n), live_};
  }
  bool acquire_within(const wait_context& wc, std::ptrdiff_t n = 1) {
    auto l = detail::acquire_hold<P>(s_, path_, rule_for(n, "acquire"), bounds_.apply(wc), hooks_,
                                     bounds_.revoke_policy());
    if (!l) return false;
    try {
      std::lock_guard lk{mu_};
      held_.push_back(std::move(*l));
    } catch (...) {
      (void)detail::end_hold(s_, *l, path_, hooks_.reporter());
      throw;
    }
    return true;
  }
  /// Returns: the stored lease count (this object's if the node is gone) and the leases held.
  std::pair<std::ptrdiff_t, std::ptrdiff_t> usage() const {
    const detail::lease_usage u = detail::read_lease_usage(s_, path_);
    const auto n = u.max == 0 ? leases_ : static_cast<std::ptrdiff_t>(u.max);
    return {n, static_cast<std::ptrdiff_t>(u.held)};
  }
  /// Returns: a lease granted within `wc`, owned by the caller (empty: not granted).
  lock_hold lease_within(const wait_context& wc, std::ptrdiff_t n = 1) {
    auto l = detail::acquire_hold<P>(s_, path_, rule_for(n, "acquire_lease"), bounds_.apply(wc), hooks_,
                                     bounds_.revoke_policy());
    if (!l) return {};
    return detail::hold_maker::make(s_, std::move(*l), path_, hooks_.reporter());
  }
  /// Returns: a copy of the most recently granted lease. Throws: errc::not_held naming `fn`.
  detail::hold latest(const char* fn) const {
    std::lock_guard lk{mu_};
    if (held_.empty())
      detail::throw_error(errc::not_held, std::string{"zklock: "} + fn + " on " + path_ + ": the object holds no lease");
    return held_.back();
  }
  session& s_;
  std::string path_;
  std::ptrdiff_t leases_;
  detail::hooks_ref<hooks_type> hooks_;
  mutable std::mutex mu_;
  std::vector<detail::hold> held_;  // the leases, in grant order
  detail::hold_setting bounds_;
  std::shared_ptr<detail::lease_limit> live_;  // N as its acquires read it last (set_max changes the node's)
  detail::async_side<P> async_;     // last: destroyed first
};

}  // namespace zklock
