// SPDX-License-Identifier: Apache-2.0
// zklock:holds — what a lock object remembers about the holds it was granted, shared by every lock
// type: a hold (node, loss signal, grant time), the per-owner book of a mutex side (reentrancy
// decides who an owner is), and the three things every hold needs: its loss token, whether it is
// still owned, and its release. The hooks are reported here, and only here (zero cost when off).
module;
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
export module zklock:holds;
import :errors;
import :session;
import :operations;
import :algorithm;
import :reentrancy;
import :timeout;
import :revoke;
import :hooks;
import :policies;

// Outside any `export`: reachable by the lock templates wherever they are instantiated, never
// visible to `import zklock;`.
namespace zklock::detail {

/// One granted hold: the node we hold (with its grant time) and its loss signal.
struct hold {
  held_node node;                     ///< the node we hold; node.granted_at: when it was granted
  std::shared_ptr<hold_guard> guard;  ///< fires when the hold is lost
  std::uint64_t bound_timer = 0;      ///< the timer that ends it at hold_bounds::at_most; 0: none
  clock::time_point keep_until{};     ///< a release before it keeps the node until then (at_least)
};

/// Throws: std::invalid_argument naming `who` for a negative bound, or at_least over at_most.
inline void check_bounds(const hold_bounds& b, const char* who) {
  if (b.at_most.count() < 0 || b.at_least.count() < 0)
    throw std::invalid_argument(std::string{"zklock: "} + who + ": a negative hold bound");
  if (b.at_most.count() > 0 && b.at_least > b.at_most)
    throw std::invalid_argument(std::string{"zklock: "} + who + ": hold_bounds::at_least (" +
                                std::to_string(b.at_least.count()) + " ms) is over at_most (" +
                                std::to_string(b.at_most.count()) + " ms)");
}

/// A lock object's settings for the holds it is granted: hold bounds (set_hold_bounds, for
/// acquires whose wait_context sets none) and the on_revoke policy (set_on_revoke).
class hold_setting {
 public:
  /// Effects: from now on acquires take `b`. Throws: as check_bounds.
  void set(const hold_bounds& b) {
    check_bounds(b, "set_hold_bounds");
    at_most_.store(b.at_most.count(), std::memory_order_relaxed);
    at_least_.store(b.at_least.count(), std::memory_order_relaxed);
  }
  /// Returns: the bounds set.
  hold_bounds get() const noexcept {
    return {std::chrono::milliseconds{at_most_.load(std::memory_order_relaxed)},
            std::chrono::milliseconds{at_least_.load(std::memory_order_relaxed)}};
  }
  /// Effects: from now on holds are granted with the policy `p`.
  void set_revoke(on_revoke p) noexcept { revoke_.store(p, std::memory_order_relaxed); }
  /// Returns: the policy set.
  on_revoke revoke_policy() const noexcept { return revoke_.load(std::memory_order_relaxed); }
  /// Returns: `wc` with the zero fields of its hold bounds taken from these. Throws: as check_bounds.
  wait_context apply(const wait_context& wc) const {
    wait_context out = wc;
    const hold_bounds mine = get();
    if (out.hold.at_most.count() == 0) out.hold.at_most = mine.at_most;
    if (out.hold.at_least.count() == 0) out.hold.at_least = mine.at_least;
    if (out.hold != hold_bounds{}) check_bounds(out.hold, "an acquire's wait_context");
    return out;
  }

 private:
  std::atomic<std::int64_t> at_most_{0}, at_least_{0};
  std::atomic<on_revoke> revoke_{on_revoke::notify};
};

/// Effects: the hold `h` was just granted: its guard acts on revocation requests by `p` from now
/// on (and on one seen while it waited); with `release`, its node is watched at once (one request),
/// since nobody may ask for its tokens. Never throws.
inline void grant_revocation(session& s, const hold& h, on_revoke p) noexcept {
  h.guard->granted(p);
  if (p == on_revoke::release && h.guard->claim_watch()) watch_own_node(s, h.node, h.guard);
}

/// Effects: bounds the hold `h`, just granted, by `b`: a timer that ends it at b.at_most (fires its
/// loss signal and deletes its node, unless its owner released it first), and the time before
/// which a release keeps its node. Throws: std::bad_alloc, std::system_error (the timer thread).
inline void bound_hold(session& s, hold& h, const hold_bounds& b) {
  if (b.at_least.count() > 0) h.keep_until = h.node.granted_at + b.at_least;
  if (b.at_most.count() > 0) {
    std::weak_ptr<hold_guard> weak = h.guard;
    h.bound_timer = schedule_hold_timer(s, h.node.granted_at + b.at_most, [&s, weak, node = h.node] {
      const auto g = weak.lock();
      if (!g || g->released()) return;  // its owner let go first
      g->wake();                         // the loss signal: the hold ends at its bound
      release_node_in_background(s, node);
    });
  }
}

/// Effects: settles the hold `h`, just granted: its revocation policy `p` (grant_revocation), then
/// its bounds `b` (bound_hold), if any. Throws: what bound_hold throws, after letting the hold go
/// (its guard released, its node deleted): rather no hold than an unbounded one.
inline void settle_grant(session& s, hold& h, on_revoke p, const hold_bounds& b) {
  grant_revocation(s, h, p);
  if (b == hold_bounds{}) return;
  try {
    bound_hold(s, h, b);
  } catch (...) {
    h.guard->release();
    (void)release_node(s, h.node);
    throw;
  }
}

/// Who hears that a hold ended: the hooks of the lock object that granted it (shared with the
/// lock_holds it hands out, which may outlive it), or nobody. Copyable; never throws.
struct release_reporter {
  std::shared_ptr<void> hooks;                                      ///< the hooks object; null: nobody
  void (*report)(void* hooks, const release_stats&) noexcept = nullptr;  ///< calls its on_release
  /// Effects: reports the release of a hold of `path` granted at `granted`, if anybody listens
  /// (only then is the clock read).
  void operator()(std::string_view path, clock::time_point granted) const noexcept {
    if (report) report(hooks.get(), release_stats{path, clock::now() - granted});
  }
};

/// The hooks instance of a lock object (zklock:hooks: given to its constructor, as allocators are):
/// kept once on the heap, shared with the lock_holds the object grants; nothing at all when H is
/// disabled (no_hooks: no allocation, no call, no clock read for the hooks).
template <Hooks H>
class hooks_ref {
 public:
  /// Effects: keeps `h` if H is enabled.
  explicit hooks_ref(H h) {
    if constexpr (H::enabled) p_ = std::make_shared<H>(std::move(h));
  }
  /// Effects: calls on_acquire(s) if enabled.
  void acquired(const acquire_stats& s) const noexcept {
    if constexpr (H::enabled) p_->on_acquire(s);
  }
  /// Returns: the reporter of releases to these hooks (nobody when disabled).
  release_reporter reporter() const noexcept {
    if constexpr (H::enabled)
      return release_reporter{p_, [](void* h, const release_stats& r) noexcept { static_cast<H*>(h)->on_release(r); }};
    else
      return {};
  }

 private:
  struct none {};
  [[no_unique_address]] std::conditional_t<H::enabled, std::shared_ptr<H>, none> p_;
};

/// Returns: now if `H` is enabled, else the epoch without reading the clock (the start of an
/// acquire is measured for hooks only).
template <Hooks H>
clock::time_point hook_now() noexcept {
  if constexpr (H::enabled) return clock::now();
  else return {};
}

/// The hooks' view of one acquire of a lock with the policies `P`: counts it while it runs (when
/// P's hooks are on) and reports it when it ends. Made just before the algorithm starts.
template <LockPolicies P>
class acquire_probe {
  using H = typename P::hooks;

 public:
  /// Returns: where the algorithm counts the attempt (nullptr when P's hooks are off: free).
  acquire_counters* counters() noexcept { return H::enabled ? &c_ : nullptr; }
  /// Effects: reports the acquire of `path` to `hooks` (granted or not). Returns: the hold made of
  /// `g`, or nullopt on timeout or cancellation.
  std::optional<hold> finish(const hooks_ref<H>& hooks, std::string_view path, std::optional<grant> g) noexcept {
    if constexpr (H::enabled) {
      const auto end = g ? g->node.granted_at : clock::now();
      hooks.acquired(acquire_stats{path, end - started_, c_.position, c_.wakeups, c_.requests, g.has_value(), c_.requeues});
    }
    if (!g) return std::nullopt;
    return hold{std::move(g->node), std::move(g->guard)};
  }

 private:
  acquire_counters c_;
  clock::time_point started_ = hook_now<H>();
};

/// Runs the algorithm (acquire_node) with the watch and the wake-up of `P`, blocking the calling
/// thread, and reports the attempt to `hooks`. Returns: the hold, or nullopt on timeout or
/// cancellation. Throws: as acquire_node (then no report).
template <LockPolicies P, class Rule>
std::optional<hold> acquire_hold(session& s, const std::string& path, const Rule& rule, const wait_context& wc,
                                 const hooks_ref<typename P::hooks>& hooks, on_revoke revocation = on_revoke::notify) {
  acquire_probe<P> probe;
  auto g = acquire_node<typename P::watch, typename P::wakeup>(s, path, rule, wc, probe.counters()).run();
  auto h = probe.finish(hooks, path, std::move(g));
  if (h) settle_grant(s, *h, revocation, wc.hold);
  return h;
}

/// Effects: ends the hold `h` of `path`, however it ends (unlock(), a lock_hold, a destructor): its
/// loss signal goes quiet (our own delete is no loss), its node is deleted unless `delete_node` is
/// false (a node another side of the lock still holds stays; deleted in the background if the
/// connection is down), and `report` hears of the release. Returns: the server's refusal of the
/// delete, if it refused (see release_node). Never throws.
inline std::error_code end_hold(session& s, const hold& h, std::string_view path, const release_reporter& report,
                                bool delete_node = true) noexcept {
  h.guard->release();
  if (h.bound_timer != 0) cancel_hold_timer(s, h.bound_timer);
  std::error_code refused;
  if (delete_node) {
    bool kept = false;  // released before hold_bounds::at_least: the node stays until then
    // (the clock is read only for a hold with a floor)
    if (h.keep_until != clock::time_point{} && h.keep_until > clock::now()) {
      try {
        kept = schedule_hold_timer(s, h.keep_until, [&s, node = h.node] { release_node_in_background(s, node); }) != 0;
      } catch (...) {  // no timer: delete it now
      }
    }
    if (!kept) refused = release_node(s, h.node);
  }
  report(path, h.node.granted_at);
  return refused;
}

/// Returns: the loss token of `h` (the first call arms a watch on its node: one request, unless the
/// wait for the grant armed it already).
inline std::stop_token lost_token_of(session& s, const hold& h) {
  if (h.guard->claim_watch()) watch_held_node(s, h.node, h.guard);
  return h.guard->token();
}

/// Returns: the revocation signal of `h` (the first call arms a watch on its node, as
/// lost_token_of does, whose reply also tells a request made before).
inline std::stop_token revocation_token_of(session& s, const hold& h) {
  if (h.guard->claim_watch()) watch_held_node(s, h.node, h.guard);
  return h.guard->revocation_token();
}

/// Returns: whether no loss of `h` was signalled (arms the node watch once, as lost_token_of does,
/// so that a deletion by someone else is seen). Never throws.
inline bool still_owned_of(session& s, const hold& h) noexcept {
  if (h.guard->claim_watch()) watch_held_node(s, h.node, h.guard);
  return !h.guard->fired() && !h.guard->lost();
}

/// Per-owner holds of one lock object; R::owner() says who the owner of a call is (its thread, or
/// the object itself).
template <ReentrancyPolicy R>
class hold_book {
 public:
  /// What begin() decided: the caller re-entered its hold, or must run the algorithm.
  enum class start { reentered, acquire };

  /// Effects: re-enters a hold of the caller, or reserves the caller's slot for an acquire
  /// (waiting for another thread's acquire of the same owner to finish first).
  /// Returns: reentered, acquire, or nullopt if `wc` ended (deadline or stop) while waiting.
  /// Throws: resource_deadlock_would_occur if the caller holds and R is not re-entrant;
  /// errc::lock_lost if the caller's hold was lost (it must unlock() first). `path` names the lock
  /// in the messages.
  std::optional<start> begin(const wait_context& wc, const std::string& path) {
    std::unique_lock lk{mu_};
    const auto key = R::owner();
    for (;;) {
      auto it = holds_.find(key);
      if (it == holds_.end()) break;
      if (!it->second.acquiring) {
        if (it->second.h.guard && it->second.h.guard->lost())  // never count on a lease that ended
          throw_error(errc::lock_lost, "zklock: locking " + path + " again: the caller's hold of it was lost; unlock() it first");
        if constexpr (!R::reentrant)
          throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                                  "zklock: locking " + path + " again: the caller holds it (the reentrancy policy is not re-entrant)");
        ++it->second.count;
        return start::reentered;
      }
      const auto done = [&] {
        const auto at = holds_.find(key);
        return at == holds_.end() || !at->second.acquiring;
      };
      if (!(wc.deadline == clock::time_point::max() ? cv_.wait(lk, wc.stop, done)
                                                    : cv_.wait_until(lk, wc.stop, wc.deadline, done)))
        return std::nullopt;
    }
    holds_[key].acquiring = true;
    return start::acquire;
  }

  /// Effects: records the outcome of the acquire begun by the caller: the hold `h`, or none.
  void finish(std::optional<hold> h) noexcept {
    std::lock_guard lk{mu_};
    const auto key = R::owner();
    if (h) {
      auto& e = holds_[key];
      e.h = std::move(*h);
      e.count = 1;
      e.acquiring = false;
    } else {
      holds_.erase(key);
    }
    cv_.notify_all();
  }

  /// What end() found.
  struct ended {
    bool held = false;          ///< the caller held (else nothing happened)
    std::optional<hold> last;   ///< the hold, when that was its last count: for the caller to end
  };
  /// Effects: drops one hold of the caller. Returns: whether it held, and the hold when that was
  /// its last count (to end with end_hold).
  ended end() noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(R::owner());
    if (it == holds_.end() || it->second.acquiring) return {};
    if (--it->second.count > 0) return {true, std::nullopt};
    ended out{true, std::move(it->second.h)};
    holds_.erase(it);
    cv_.notify_all();
    return out;
  }

  /// Returns: a copy of the caller's hold, if it holds.
  std::optional<hold> held() const {
    std::lock_guard lk{mu_};
    auto it = holds_.find(R::owner());
    if (it == holds_.end() || it->second.acquiring) return std::nullopt;
    return it->second.h;
  }

  /// Returns: whether the caller holds `path`.
  bool holds_node(const std::string& path) const noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(R::owner());
    return it != holds_.end() && !it->second.acquiring && it->second.h.node.path == path;
  }

  /// Returns: how often the caller holds (0 if not).
  std::size_t count() const noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(R::owner());
    return it == holds_.end() || it->second.acquiring ? 0 : it->second.count;
  }

  /// Effects: forgets every hold. Returns: them, to end.
  std::vector<hold> take_all() noexcept {
    std::lock_guard lk{mu_};
    std::vector<hold> out;
    for (auto& [k, e] : holds_)
      if (!e.acquiring) out.push_back(std::move(e.h));
    holds_.clear();
    return out;
  }

 private:
  struct entry {
    hold h;
    std::size_t count = 0;
    bool acquiring = false;
  };
  mutable std::mutex mu_;
  std::condition_variable_any cv_;  // _any: its waits also end on a stop request
  std::map<std::thread::id, entry> holds_;
};

/// One side of a lock: a hold book plus the algorithm, for a rule, under the policies `P`.
template <LockPolicies P>
class lock_side {
 public:
  /// Effects: a side of the lock node `path` on session `s`, reporting to `hooks` (both must
  /// outlive it); no request.
  lock_side(session& s, const std::string& path, const hooks_ref<typename P::hooks>& hooks)
      : s_(s), path_(path), hooks_(hooks) {}
  /// Effects: ends every hold still recorded (never throws). A node both sides hold (a downgrade)
  /// is deleted twice: the second delete finds nothing.
  ~lock_side() {
    const auto report = hooks_.reporter();
    for (auto& h : book_.take_all()) (void)end_hold(s_, h, path_, report);
  }

  /// Effects: re-enters the caller's hold, or runs the algorithm with `rule` within `wc`.
  /// Returns: whether the caller holds. Throws: as hold_book::begin and acquire_node.
  template <class Rule>
  bool acquire(const Rule& rule, const wait_context& wc) {
    const wait_context bounded = settings.apply(wc);
    const auto st = book_.begin(bounded, path_);
    if (!st) return false;
    if (*st == book::start::reentered) return true;
    std::optional<hold> h;
    try {
      h = acquire_hold<P>(s_, path_, rule, bounded, hooks_, settings.revoke_policy());
    } catch (...) {
      book_.finish(std::nullopt);
      throw;
    }
    const bool ok = h.has_value();
    book_.finish(std::move(h));
    return ok;
  }

  /// Effects: gives the caller a hold on `n`, a node it holds through another side (a downgrade
  /// shares the write node with the read side). Returns: false if `wc` ended meanwhile.
  bool adopt(const held_node& n, const wait_context& wc) {
    const auto st = book_.begin(wc, path_);
    if (!st) return false;
    if (*st == book::start::reentered) return true;
    std::optional<hold> h;
    try {
      h = hold{n, std::make_shared<hold_guard>(s_, loss_token(s_, n.generation))};
    } catch (...) {
      book_.finish(std::nullopt);
      throw;
    }
    h->node.granted_at = clock::now();  // this side's hold begins now
    h->guard->granted(settings.revoke_policy());
    book_.finish(std::move(h));
    return true;
  }

  /// Effects: drops one hold of the caller; the last one ends it (end_hold), deleting its node
  /// unless the caller still holds that node through `other` (a downgrade). Nothing happens if the
  /// caller holds nothing. Returns: errc::not_held if it held nothing, else the server's refusal of
  /// the delete if it refused (see release_node), else a cleared code. Never throws.
  std::error_code release(const lock_side* other = nullptr) noexcept {
    auto e = book_.end();
    if (!e.held) return make_error_code(errc::not_held);
    if (!e.last) return {};
    const bool delete_node = !other || !other->book_.holds_node(e.last->node.path);
    return end_hold(s_, *e.last, path_, hooks_.reporter(), delete_node);
  }

  /// Returns: the caller's held node, if any.
  std::optional<held_node> held_node_of_caller() const {
    auto h = book_.held();
    if (!h) return std::nullopt;
    return std::move(h->node);
  }

  /// Returns: the czxid of the caller's node. Throws: errc::not_held naming `fn` and the path.
  std::int64_t fencing_token(const char* fn) const { return caller_hold(fn).node.czxid; }

  /// Returns: the fence of the caller's hold (its node and token). Throws: as fencing_token.
  zklock::fence fence(const char* fn) const {
    auto h = caller_hold(fn);
    return {std::move(h.node.path), h.node.czxid};
  }

  /// Returns: whether the caller holds (bookkeeping only).
  bool held() const noexcept { return book_.count() > 0; }

  /// Returns: the revocation token of the caller's hold (see revocation_token_of). Throws:
  /// errc::not_held naming `fn` and the path.
  std::stop_token revocation_token(const char* fn) const { return revocation_token_of(s_, caller_hold(fn)); }

  /// Returns: the loss token of the caller's hold (see lost_token_of). Throws: errc::not_held
  /// naming `fn` and the path.
  std::stop_token lost_token(const char* fn) const { return lost_token_of(s_, caller_hold(fn)); }

  /// Returns: whether the caller holds and no loss was signalled (see still_owned_of).
  bool still_owned() const noexcept {
    try {
      const auto h = book_.held();
      return h && still_owned_of(s_, *h);
    } catch (...) {  // allocation failure while looking
      return false;
    }
  }

  hold_setting settings;  ///< the lock object's hold bounds and on_revoke policy

 private:
  hold caller_hold(const char* fn) const {
    auto h = book_.held();
    if (!h) throw_error(errc::not_held, std::string{"zklock: "} + fn + " on " + path_ + ": the caller does not hold it");
    return std::move(*h);
  }
  using book = hold_book<typename P::reentrancy>;
  session& s_;
  const std::string& path_;
  const hooks_ref<typename P::hooks>& hooks_;
  book book_;
};

/// Returns: `path`, once validate_path accepted it. Throws: std::invalid_argument for a bad path.
inline std::string checked_path(std::string path) {
  validate_path(path, "lock path");
  return path;
}

/// Returns: the deadline `d` from now (time_point::max(), i.e. no deadline, if it lies beyond the
/// clock's range; now if `d` <= 0: one attempt, as the standard's try_lock_for). Throws:
/// std::invalid_argument naming `fn` if `d` is NaN.
template <class Rep, class Period>
clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& d, const char* fn) {
  const auto now = clock::now();
  if (d <= d.zero()) return now;
  if (!(d > d.zero())) throw std::invalid_argument(std::string{"zklock: "} + fn + "() got a duration that is not a number");
  using seconds = std::chrono::duration<long double>;  // compares without overflow
  if (seconds{d} >= seconds{clock::time_point::max() - now}) return clock::time_point::max();
  return now + std::chrono::ceil<clock::duration>(d);
}

/// Returns: `t` as a steady_clock deadline (another clock is converted once). A time point in the
/// past is no error: the acquire makes one attempt, as try_lock() does.
template <class Clock, class Duration>
clock::time_point steady_deadline(const std::chrono::time_point<Clock, Duration>& t) {
  if constexpr (std::is_same_v<Clock, clock>) {
    return std::chrono::time_point_cast<clock::duration>(t);
  } else {
    return clock::now() + std::chrono::ceil<clock::duration>(t - Clock::now());
  }
}

}  // namespace zklock::detail
