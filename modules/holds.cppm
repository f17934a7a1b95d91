// SPDX-License-Identifier: Apache-2.0
// zklock:holds — what a lock object remembers about the holds it was granted, shared by every lock
// type: a hold (node, loss signal, grant time), the per-owner book of a mutex side (reentrancy
// decides who an owner is), and the three things every hold needs: its loss token, whether it is
// still owned, and its release. The hooks are reported here, and only here (zero cost when off).
module;
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
import :hooks;
import :policies;

// Outside any `export`: reachable by the lock templates wherever they are instantiated, never
// visible to `import zklock;`.
namespace zklock::detail {

/// One granted hold: the node we hold and its loss signal.
struct hold {
  held_node node;                     ///< the node we hold
  std::shared_ptr<hold_guard> guard;  ///< fires when the hold is lost
  clock::time_point granted{};        ///< when it was granted (measured for hooks only)
};

/// Returns: now if `H` is enabled, else the epoch without reading the clock (the one gate that
/// keeps unused hooks free, with report_acquire and report_release).
template <Hooks H>
clock::time_point hook_now() noexcept {
  if constexpr (H::enabled) return clock::now();
  else return {};
}

/// Effects: the acquire hook of `H`, if enabled, for one attempt on `path`.
template <Hooks H>
void report_acquire(std::string_view path, clock::duration wait, const acquire_counters& c, bool acquired) noexcept {
  if constexpr (H::enabled)
    H::on_acquire(acquire_stats{path, wait, c.position, c.wakeups, c.requests, acquired, c.requeues});
}

/// Effects: the release hook of `H`, if enabled, for a hold of `path` granted at `granted`.
template <Hooks H>
void report_release(std::string_view path, clock::time_point granted) noexcept {
  if constexpr (H::enabled) H::on_release(release_stats{path, clock::now() - granted});
}

/// The hooks' view of one acquire of a lock with the policies `P`: counts it while it runs (when
/// P's hooks are on) and reports it when it ends. Made just before the algorithm starts.
template <LockPolicies P>
class acquire_probe {
  using H = typename P::hooks;

 public:
  /// Returns: where the algorithm counts the attempt (nullptr when P's hooks are off: free).
  acquire_counters* counters() noexcept { return H::enabled ? &c_ : nullptr; }
  /// Effects: reports the acquire to P's hooks (granted or not). Returns: the hold made of `g`,
  /// stamped with its grant time (for hooks), or nullopt on timeout or cancellation.
  std::optional<hold> finish(std::string_view path, std::optional<grant> g) noexcept {
    const auto granted = hook_now<H>();
    report_acquire<H>(path, granted - started_, c_, g.has_value());
    if (!g) return std::nullopt;
    return hold{std::move(g->node), std::move(g->guard), granted};
  }

 private:
  acquire_counters c_;
  clock::time_point started_ = hook_now<H>();
};

/// Runs the algorithm (acquire_node) with the watch and the wake-up of `P`, blocking the calling
/// thread, and reports the attempt to P's hooks. Returns: the hold, or nullopt on timeout or
/// cancellation. Throws: as acquire_node (then no report).
template <LockPolicies P, class Rule>
std::optional<hold> acquire_hold(session& s, const std::string& path, const Rule& rule, const wait_context& wc) {
  acquire_probe<P> probe;
  auto g = acquire_node<typename P::watch, typename P::wakeup>(s, path, rule, wc, probe.counters()).run();
  return probe.finish(path, std::move(g));
}

/// Effects: ends `h` without a report: its loss signal goes quiet (our own delete is no loss) and
/// its node is deleted (in the background if the connection is down). Returns: the server's
/// refusal of the delete, if it refused (see release_node). Never throws.
inline std::error_code end_hold(session& s, const hold& h) noexcept {
  h.guard->release();
  return release_node(s, h.node);
}

/// Effects: ends `h` as end_hold, but deletes its node only if `delete_node` (a node another side
/// still holds stays), and reports the release to P's hooks. Returns: as end_hold. Never throws.
template <LockPolicies P>
std::error_code release_hold(session& s, const std::string& path, const hold& h, bool delete_node = true) noexcept {
  h.guard->release();
  std::error_code refused;
  if (delete_node) refused = release_node(s, h.node);
  report_release<typename P::hooks>(path, h.granted);
  return refused;
}

/// Returns: the loss token of `h` (the first call arms a watch on its node: one request, unless the
/// wait for the grant armed it already).
inline std::stop_token lost_token_of(session& s, const hold& h) {
  if (h.guard->claim_watch()) watch_held_node(s, h.node, h.guard);
  return h.guard->token();
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
  /// errc::lock_lost if the caller's hold was lost (it must unlock() first).
  std::optional<start> begin(const wait_context& wc) {
    std::unique_lock lk{mu_};
    const auto key = R::owner();
    for (;;) {
      auto it = holds_.find(key);
      if (it == holds_.end()) break;
      if (!it->second.acquiring) {
        if (it->second.h.guard && it->second.h.guard->lost())  // never count on a lease that ended
          throw_error(errc::lock_lost, "zklock: the caller's hold of this lock was lost; unlock() it first");
        if constexpr (!R::reentrant)
          throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                                  "zklock: the caller already holds this lock");
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

  /// Effects: drops one hold of the caller. Returns: the hold when it was the last one (its loss
  /// signal already quiet: our own delete is no loss), for the caller to end.
  std::optional<hold> end() noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(R::owner());
    if (it == holds_.end() || it->second.acquiring) return std::nullopt;
    if (--it->second.count > 0) return std::nullopt;
    it->second.h.guard->release();
    std::optional<hold> h{std::move(it->second.h)};
    holds_.erase(it);
    cv_.notify_all();
    return h;
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
  /// Effects: a side of the lock node `path` (which must outlive it) on session `s`; no request.
  lock_side(session& s, const std::string& path) : s_(s), path_(path) {}
  /// Effects: releases every hold still recorded (never throws).
  ~lock_side() {
    // A node both sides hold (downgrade) is deleted twice: the second delete finds nothing.
    for (auto& h : book_.take_all()) (void)end_hold(s_, h);
  }

  /// Effects: re-enters the caller's hold, or runs the algorithm with `rule` within `wc`.
  /// Returns: whether the caller holds. Throws: as hold_book::begin and acquire_node.
  template <class Rule>
  bool acquire(const Rule& rule, const wait_context& wc) {
    const auto st = book_.begin(wc);
    if (!st) return false;
    if (*st == book::start::reentered) return true;
    std::optional<hold> h;
    try {
      h = acquire_hold<P>(s_, path_, rule, wc);
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
    const auto st = book_.begin(wc);
    if (!st) return false;
    if (*st == book::start::reentered) return true;
    std::shared_ptr<hold_guard> guard;
    try {
      guard = std::make_shared<hold_guard>(s_, loss_token(s_, n.generation));
    } catch (...) {
      book_.finish(std::nullopt);
      throw;
    }
    book_.finish(hold{n, std::move(guard), hook_now<typename P::hooks>()});
    return true;
  }

  /// Effects: drops one hold of the caller; the last one deletes the node.
  /// Returns: the server's refusal of that delete, if it refused (see release_node). Never throws.
  std::error_code release() noexcept {
    const auto h = book_.end();
    return h ? release_hold<P>(s_, path_, *h) : std::error_code{};
  }

  /// Effects: as release(), but keeps the node while the caller still holds it through `other`.
  /// Returns: as release().
  std::error_code release_unless_held_by(const lock_side& other) noexcept {
    const auto h = book_.end();
    return h ? release_hold<P>(s_, path_, *h, !other.book_.holds_node(h->node.path)) : std::error_code{};
  }

  /// Returns: the caller's held node, if any.
  std::optional<held_node> held_node_of_caller() const {
    auto h = book_.held();
    if (!h) return std::nullopt;
    return std::move(h->node);
  }

  /// Returns: the czxid of the caller's node. Throws: errc::not_held.
  std::int64_t fencing_token() const {
    const auto h = book_.held();
    if (!h) throw_error(errc::not_held, "zklock: fencing_token() needs the lock held by the caller");
    return h->node.czxid;
  }

  /// Returns: whether the caller holds (bookkeeping only).
  bool held() const noexcept { return book_.count() > 0; }

  /// Returns: the loss token of the caller's hold (see lost_token_of). Throws: not_held.
  std::stop_token lost_token() const {
    const auto h = book_.held();
    if (!h) throw_error(errc::not_held, "zklock: lost_token() needs the lock held by the caller");
    return lost_token_of(s_, *h);
  }

  /// Returns: whether the caller holds and no loss was signalled (see still_owned_of).
  bool still_owned() const noexcept {
    try {
      const auto h = book_.held();
      return h && still_owned_of(s_, *h);
    } catch (...) {  // allocation failure while looking
      return false;
    }
  }

 private:
  using book = hold_book<typename P::reentrancy>;
  session& s_;
  const std::string& path_;
  book book_;
};

/// Returns: errc::not_held as a std::error_code (what a release by a caller that holds nothing
/// reports). Never throws.
inline std::error_code not_held() noexcept { return make_error_code(errc::not_held); }

/// Returns: `path`, once validate_path accepted it. Throws: std::invalid_argument for a bad path.
inline std::string checked_path(std::string path) {
  validate_path(path, "lock path");
  return path;
}

/// Returns: the deadline `d` from now, for the try_*_for function `fn` (time_point::max(), i.e. no
/// deadline, if it lies beyond the clock's range). Throws: std::invalid_argument naming `fn` if `d`
/// is negative (or NaN): a negative wait is a caller's bug, not "try once".
template <class Rep, class Period>
clock::time_point deadline_after(const std::chrono::duration<Rep, Period>& d, const char* fn) {
  if (!(d >= d.zero()))
    throw std::invalid_argument(std::string{"zklock: "} + fn + "() needs a non-negative duration");
  const auto now = clock::now();
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
