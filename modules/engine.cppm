// SPDX-License-Identifier: Apache-2.0
// zklock:engine — the one lock algorithm and the lock types built from it.
//
// The recipe. To acquire, a contender creates an ephemeral-sequential node under the lock node
// (missing parents become container nodes, so the server reaps them when they empty) and lists
// the children. Contenders queue in the order of their sequence numbers (serial-number arithmetic,
// right across the 32-bit wrap); children that are not contenders are ignored. A mode rule
// (zklock:rules) says which contenders ahead count (all of them for a mutex, a writer or a
// semaphore; writers for a reader) and how many of them may remain while it holds (the lease
// count for a semaphore, else 1). Releasing deletes the node. Queue order makes the locks fair
// (first come, first served).
//
// Waiting. A waiter that does not hold watches the few nearest counted contenders ahead (the watch
// strategy says how many: with watch_predecessor one more than the grant needs to see go) and
// counts their deletions. Nobody can join ahead of it, so the deletions it saw bound how many are
// left: when they prove it holds, and its own node provably stands, the deletion event itself is
// the grant, one round trip after the release. When a deletion proves too little, it lists again
// and moves its watches up; watching one contender more than needed makes that happen while the
// contender just ahead still holds, so the listing is off the critical path of the handoff.
//
// Compile-time policies pick the watch strategy, the wake-up, the reentrancy and how long a
// blocking lock() waits (see policies/). The ZooKeeper work is done by a few non-template functions
// (zklock:detail); these templates only decide.
//
// Session loss. Our node is ephemeral: when the session expires the server deletes it and others
// may acquire. A waiter whose session ends (an expiry, or a disconnection longer than the loss
// tolerance) queues again on the session's next handle, within its deadline; a grant is only ever
// made on a node of the live session. A timeout, an exception
// or a failed try deletes the attempt's node and removes its watch; if the connection is down the
// delete is retried in the background. A create whose reply was lost is found again by the
// attempt's unique id (protected creation).
module;
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stop_token>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>
export module zklock:engine;
import :errors;
import :session;
import :detail;
import :rules;
import :watch;
import :wakeup;
import :reentrancy;
import :timeout;
import :hooks;

export namespace zklock {

namespace detail {

/// What one acquire attempt did (for hooks; counted only when asked for).
struct acquire_counters {
  std::size_t position = 0;  ///< contenders ahead at the first listing
  std::size_t wakeups = 0;   ///< watch firings that made the attempt look again
  std::size_t requests = 0;  ///< ZooKeeper requests the attempt sent
  std::size_t requeues = 0;  ///< times it queued again after its session ended while it waited
};

/// A granted contender node and the loss signal of its hold.
struct grant {
  held_node node;                     ///< the node we hold
  std::shared_ptr<hold_guard> guard;  ///< fires when the hold is lost; its node watch may be armed
};

/// One acquire attempt: its contender node, the watches it waits on and the waiter its thread
/// blocks on. Unless granted, it undoes everything when it ends: its watches are removed and its
/// node deleted (in the background if the connection is down).
template <WakeupPolicy Wakeup>
class attempt {
 public:
  /// Effects: takes charge of the new contender node `n`; counts requests in `count`, if given.
  attempt(session& s, held_node n, acquire_counters* count) : s_(s), node_(std::move(n)), count_(count) {
    relay_->point_at(waiter_);
  }
  /// Effects: unless granted, removes the attempt's watches and deletes its node. Never throws.
  ~attempt() {
    if (granted_) return;
    for (auto& w : ahead_) drop(w, false);
    if (children_) drop(children_, true);
    if (guard_) guard_->release();  // its watch on our node goes with the node
    if (!node_gone_) release_node(s_, node_);
  }
  attempt(const attempt&) = delete;
  attempt& operator=(const attempt&) = delete;

  /// Returns: our contender node.
  const held_node& node() const noexcept { return node_; }
  /// Effects: counts `n` requests sent for the attempt (when counting).
  void sent(std::size_t n = 1) noexcept {
    if (count_) count_->requests += n;
  }

  /// Returns: the grant; the attempt keeps its node from now on (watches still armed on
  /// contenders ahead fire once more, harmlessly: they wake nobody).
  /// Throws: errc::session_expired if the node's session is no longer the live one (given up or
  /// expired meanwhile: its node goes with it, so it is nobody's grant); std::bad_alloc.
  grant granted() {
    if (!session_alive_for(s_, node_)) {
      node_gone_ = true;  // nothing this session could delete: the old session takes it along
      throw_error(errc::session_expired, "zklock: the session of our contender node " + node_.path +
                                             " ended before its grant");
    }
    if (!guard_) guard_ = std::make_shared<hold_guard>(s_, loss_token(s_, node_.generation));
    relay_->point_at(nullptr);
    granted_ = true;
    return grant{std::move(node_), std::move(guard_)};
  }

  /// Effects: our node is not in the queue any more. Throws: errc::session_expired if it went with
  /// the session (nothing left to delete), else errc::lock_lost (someone deleted it).
  [[noreturn]] void vanished() {
    node_gone_ = !session_alive_for(s_, node_);
    throw_error(node_gone_ ? errc::session_expired : errc::lock_lost,
                "zklock: our contender node " + node_.path + " vanished while waiting");
  }

  /// Effects: readies the waiter for the next wait: a watch firing from now on wakes it.
  void prepare_wait() {
    if constexpr (Wakeup::fresh_per_wait) {
      waiter_ = std::make_shared<typename Wakeup::waiter>();
      relay_->point_at(waiter_);
    } else {
      waiter_->reset();
    }
  }
  /// Effects: blocks until a watch fires (since prepare_wait) or `deadline` passes.
  /// Returns: whether a watch fired.
  bool wait(clock::time_point deadline) {
    const bool woke = waiter_->wait_until(deadline);
    if (woke && count_) ++count_->wakeups;
    return woke;
  }

  /// Returns: a fresh children watch on `lock_path`, to arm by listing it.
  std::shared_ptr<wake_target> arm_children(const std::string& lock_path) {
    children_ = std::make_shared<watch_slot>(lock_path, relay_);
    return children_;
  }
  /// Returns: whether a children watch is armed and has not fired.
  bool children_armed() const noexcept { return children_ && !children_->fired(); }

  /// Effects: watches exactly the contender nodes `paths`: drops the watches on others (nodes that
  /// left the queue since), arms the missing ones (all sent at once), our own node's first.
  /// Returns: how many of the newly watched were gone already; nullopt if `deadline` passed.
  /// Throws: as watch_nodes.
  std::optional<std::size_t> watch_ahead(const std::vector<std::string>& paths, clock::time_point deadline) {
    std::erase_if(ahead_, [&](const std::shared_ptr<watch_slot>& w) {
      if (std::find(paths.begin(), paths.end(), w->path) != paths.end()) return false;
      drop(w, false);
      return true;
    });
    // Our own node's watch goes first: its reply, and any deletion of our node, reach us before
    // the replies and events of the watches sent after it. It stays armed as the hold's loss watch.
    if (!guard_) guard_ = std::make_shared<hold_guard>(s_, loss_token(s_, node_.generation));
    if (guard_->claim_watch()) {
      watch_own_node(s_, node_, guard_);
      sent();
    }
    std::vector<std::shared_ptr<watch_slot>> fresh;
    for (const auto& p : paths)
      if (std::none_of(ahead_.begin(), ahead_.end(), [&](const auto& w) { return w->path == p; }))
        fresh.push_back(std::make_shared<watch_slot>(p, relay_));
    if (fresh.empty()) return 0;
    sent(fresh.size());
    const auto at = clock::now();
    const auto seen = watch_nodes(s_, fresh, deadline);
    if (!seen) return std::nullopt;
    round_trips(s_).note(clock::now() - at);
    std::size_t gone = 0;
    for (std::size_t i = 0; i < fresh.size(); ++i) {
      if ((*seen)[i] == node_seen::gone)
        ++gone;
      else
        ahead_.push_back(std::move(fresh[i]));
    }
    return gone;
  }
  /// Effects: forgets the watches on contenders ahead that fired. Returns: how many fired because
  /// their node was deleted; sets `other` if one fired for another reason (its node's data
  /// changed, or the session ended).
  std::size_t take_fired(bool& other) {
    std::size_t deleted = 0;
    std::erase_if(ahead_, [&](const std::shared_ptr<watch_slot>& w) {
      if (!w->fired()) return false;
      if (w->node_deleted.load())
        ++deleted;
      else
        other = true;
      return true;
    });
    return deleted;
  }
  /// Returns: whether our node provably stands: its watch is armed and has not fired (a deletion
  /// of our node would have reached us before any event of a watch armed after it).
  bool own_node_stands() const noexcept { return guard_ && guard_->watch_armed() && !guard_->fired(); }

 private:
  /// Effects: stops waiting on `w`; removes its watch unless it fired. Never throws.
  void drop(const std::shared_ptr<watch_slot>& w, bool children) noexcept {
    if (w->fired()) return;
    drop_watch(s_, w->path, children, w.get());
    sent();
  }
  session& s_;
  held_node node_;
  acquire_counters* count_;
  std::shared_ptr<wake_relay> relay_ = std::make_shared<wake_relay>();
  std::shared_ptr<typename Wakeup::waiter> waiter_ = std::make_shared<typename Wakeup::waiter>();
  std::vector<std::shared_ptr<watch_slot>> ahead_;  // armed watches on contenders ahead
  std::shared_ptr<watch_slot> children_;            // the children watch, if any
  std::shared_ptr<hold_guard> guard_;               // made at the first wait, or at the grant
  bool granted_ = false;
  bool node_gone_ = false;  // went with its session: nothing to delete
};

/// One turn of the algorithm: queue a contender node under `lock_path` and wait until `rule` says
/// it holds, or until `deadline`. Returns: the grant, or nullopt on timeout (nothing left behind).
/// Throws: std::system_error if the session fails or our node vanishes; nothing is left behind.
template <WatchStrategy Watch, WakeupPolicy Wakeup, class Rule>
std::optional<grant> queue_once(session& s, const std::string& lock_path, const Rule& rule,
                                clock::time_point deadline, acquire_counters* count) {
  // the create and the listing, sent back to back (more requests on a first use or a lost reply)
  auto queued = create_and_list(s, lock_path, contender_prefix(Rule::own), contender_data(), deadline,
                                count ? &count->requests : nullptr);
  if (!queued) return std::nullopt;
  attempt<Wakeup> at{s, std::move(queued->node), count};
  const std::string self = at.node().path.substr(lock_path.size() + 1);
  std::optional<std::vector<std::string>> listing = std::move(queued->listing);
  auto list = [&](const std::shared_ptr<wake_target>& watcher) {
    at.sent();
    const auto sent = clock::now();
    listing = list_children(s, lock_path, watcher, deadline);
    if (listing) round_trips(s).note(clock::now() - sent);
  };
  if (!listing) list(nullptr);  // the pipelined listing failed: list on our own

  for (bool first = true;; first = false) {
    if (!listing) return std::nullopt;  // deadline
    const std::vector<contender> queue = sorted_contenders(*listing, Rule::kinds);
    const auto mine = std::find_if(queue.begin(), queue.end(), [&](const contender& c) { return c.name == self; });
    if (mine == queue.end()) at.vanished();
    const auto me = static_cast<std::size_t>(mine - queue.begin());
    if (count && first) count->position = me;
    const standing st = stand(rule, std::span<const contender>{queue}, me);
    if (st.held()) return at.granted();
    if (clock::now() >= deadline) return std::nullopt;

    const std::size_t window = Watch::window(st.ahead.size(), st.limit, look_ahead(s));
    if (window == 0) {  // the lock node's children: any join or leave may be our turn
      if (at.children_armed()) {  // this listing armed it: wait for a change, then look again
        at.prepare_wait();
        if (at.children_armed() && !at.wait(deadline)) return std::nullopt;
      }
      list(at.arm_children(lock_path));
      continue;
    }

    // Watch the `window` nearest counted contenders ahead and count their deletions (zklock:rules,
    // tally): a deletion that proves us held grants at once, with no listing, if our own node
    // provably stands; one that proves too little (contenders beyond the watched ones may have
    // gone unseen) makes us list again.
    std::vector<std::string> targets;
    for (std::size_t i = st.ahead.size() - window; i < st.ahead.size(); ++i)
      targets.push_back(lock_path + "/" + queue[st.ahead[i]].name);
    const auto gone = at.watch_ahead(targets, deadline);
    if (!gone) return std::nullopt;
    tally seen{st.ahead.size(), st.limit, window, *gone};
    for (bool other = false;;) {
      at.prepare_wait();
      seen.gone += at.take_fired(other);
      if (seen.proves_held()) {
        if (at.own_node_stands()) return at.granted();
        break;  // our node may be gone: the listing decides
      }
      if (other || seen.must_relist()) break;
      if (!at.wait(deadline)) return std::nullopt;
    }
    list(nullptr);
  }
}

/// The one algorithm: queue_once, and again on the next session when the session ends while we
/// wait (an expiry, or a disconnection longer than the loss tolerance, took our waiting node along;
/// our place in the queue is lost). A grant is never queued for again: a lost hold is reported by
/// its loss signal. Returns: the grant, or nullopt on timeout (nothing left behind).
/// Throws: std::system_error: session_expired if no next session is connected before `deadline`
/// or none will come (reestablish_after_expiry off; its re-establishment was refused for good);
/// others as queue_once.
template <WatchStrategy Watch, WakeupPolicy Wakeup, class Rule>
std::optional<grant> acquire_node(session& s, const std::string& lock_path, const Rule& rule,
                                  clock::time_point deadline, acquire_counters* count = nullptr) {
  for (;;) {
    const std::uint64_t generation = s.generation();
    try {
      return queue_once<Watch, Wakeup>(s, lock_path, rule, deadline, count);
    } catch (const std::system_error& e) {
      if (e.code() != make_error_code(errc::session_expired)) throw;
      if (!await_next_session(s, generation, deadline)) throw;
      if (count) ++count->requeues;
    }
  }
}

/// Per-owner holds of one lock object: owners are threads, or the object itself.
template <ReentrancyPolicy R>
class hold_book {
 public:
  /// What begin() decided: the caller re-entered its hold, or must run the algorithm.
  enum class start { reentered, acquire };

  /// Effects: re-enters a hold of the caller, or reserves the caller's slot for an acquire
  /// (waiting for another thread's acquire of the same owner to finish first).
  /// Returns: reentered, acquire, or nullopt if `deadline` passed while waiting.
  /// Throws: resource_deadlock_would_occur if the caller holds and R is not re-entrant;
  /// errc::lock_lost if the caller's hold was lost (it must unlock() first).
  std::optional<start> begin(clock::time_point deadline) {
    std::unique_lock lk{mu_};
    const auto key = owner();
    for (;;) {
      auto it = holds_.find(key);
      if (it == holds_.end()) break;
      if (!it->second.acquiring) {
        if (it->second.guard && it->second.guard->lost())  // never count on a lease that ended
          throw_error(errc::lock_lost, "zklock: the caller's hold of this lock was lost; unlock() it first");
        if constexpr (!R::reentrant)
          throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                                  "zklock: the caller already holds this lock");
        ++it->second.count;
        return start::reentered;
      }
      if (deadline == clock::time_point::max())
        cv_.wait(lk);
      else if (cv_.wait_until(lk, deadline) == std::cv_status::timeout)
        return std::nullopt;
    }
    holds_[key].acquiring = true;
    return start::acquire;
  }

  /// Effects: records the outcome of the acquire begun by the caller; a held node gets `guard`.
  void finish(std::optional<held_node> n, std::shared_ptr<hold_guard> guard = {},
              clock::time_point granted = {}) noexcept {
    std::lock_guard lk{mu_};
    const auto key = owner();
    if (n) {
      auto& e = holds_[key];
      e.granted = granted;
      e.node = std::move(*n);
      e.guard = std::move(guard);
      e.count = 1;
      e.acquiring = false;
    } else {
      holds_.erase(key);
    }
    cv_.notify_all();
  }

  /// Effects: drops one hold of the caller. Returns: the node to delete when it was the last one
  /// (and, if `granted` is given, stores when it was granted there).
  std::optional<held_node> end(clock::time_point* granted = nullptr) noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(owner());
    if (it == holds_.end() || it->second.acquiring) return std::nullopt;
    if (--it->second.count > 0) return std::nullopt;
    if (granted) *granted = it->second.granted;
    if (it->second.guard) it->second.guard->release();  // our own delete is no loss
    std::optional<held_node> n{std::move(it->second.node)};
    holds_.erase(it);
    cv_.notify_all();
    return n;
  }

  /// Returns: the caller's held node, if any.
  std::optional<held_node> held() const {
    std::lock_guard lk{mu_};
    auto it = holds_.find(owner());
    if (it == holds_.end() || it->second.acquiring) return std::nullopt;
    return it->second.node;
  }

  /// Returns: the loss signal of the caller's hold, if it holds.
  std::shared_ptr<hold_guard> guard() const {
    std::lock_guard lk{mu_};
    auto it = holds_.find(owner());
    if (it == holds_.end() || it->second.acquiring) return nullptr;
    return it->second.guard;
  }

  /// Returns: whether the caller holds `path`.
  bool holds_node(const std::string& path) const noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(owner());
    return it != holds_.end() && !it->second.acquiring && it->second.node.path == path;
  }

  /// Returns: how often the caller holds (0 if not).
  std::size_t count() const noexcept {
    std::lock_guard lk{mu_};
    auto it = holds_.find(owner());
    return it == holds_.end() || it->second.acquiring ? 0 : it->second.count;
  }

  /// Effects: forgets every hold. Returns: their nodes.
  std::vector<held_node> take_all() noexcept {
    std::lock_guard lk{mu_};
    std::vector<held_node> out;
    for (auto& [k, e] : holds_) {
      if (e.acquiring) continue;
      if (e.guard) e.guard->release();
      out.push_back(std::move(e.node));
    }
    holds_.clear();
    return out;
  }

 private:
  struct entry {
    held_node node;
    std::shared_ptr<hold_guard> guard;
    clock::time_point granted{};  // only measured for hooks
    std::size_t count = 0;
    bool acquiring = false;
  };
  static std::thread::id owner() noexcept {
    if constexpr (R::per_thread) return std::this_thread::get_id();
    else return std::thread::id{};
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::thread::id, entry> holds_;
};

/// One side of a lock: a hold book plus the algorithm, for a rule.
template <WatchStrategy W, WakeupPolicy K, ReentrancyPolicy R, Hooks H = no_hooks>
class lock_side {
 public:
  /// Effects: a side of the lock node `path` (which must outlive it) on session `s`; no request.
  lock_side(session& s, const std::string& path) : s_(s), path_(path) {}
  /// Effects: releases every hold still recorded (never throws).
  ~lock_side() {
    // A node both sides hold (downgrade) is deleted twice: the second delete finds nothing.
    for (auto& n : book_.take_all()) release_node(s_, n);
  }

  /// Effects: re-enters the caller's hold, or runs the algorithm with `rule` until `deadline`.
  /// Returns: whether the caller holds. Throws: as hold_book::begin and acquire_node.
  template <class Rule>
  bool acquire(const Rule& rule, clock::time_point deadline) {
    const auto st = book_.begin(deadline);
    if (!st) return false;
    if (*st == hold_book<R>::start::reentered) return true;
    std::optional<grant> g;
    [[maybe_unused]] acquire_counters counters;
    [[maybe_unused]] clock::time_point started;
    if constexpr (H::enabled) started = clock::now();
    try {
      g = acquire_node<W, K>(s_, path_, rule, deadline, H::enabled ? &counters : nullptr);
    } catch (...) {
      book_.finish(std::nullopt);
      throw;
    }
    const bool ok = g.has_value();
    [[maybe_unused]] clock::time_point granted;
    if constexpr (H::enabled) {
      granted = clock::now();
      H::on_acquire(acquire_stats{path_, granted - started, counters.position, counters.wakeups,
                                  counters.requests, ok, counters.requeues});
    }
    if (!ok) {
      book_.finish(std::nullopt);
      return false;
    }
    book_.finish(std::move(g->node), std::move(g->guard), granted);
    return true;
  }

  /// Effects: gives the caller a hold on `n`, a node it holds through another side (a downgrade
  /// shares the write node with the read side). Returns: false if `deadline` passed meanwhile.
  bool adopt(const held_node& n, clock::time_point deadline) {
    const auto st = book_.begin(deadline);
    if (!st) return false;
    if (*st == hold_book<R>::start::reentered) return true;
    std::shared_ptr<hold_guard> guard;
    try {
      guard = std::make_shared<hold_guard>(s_, loss_token(s_, n.generation));
    } catch (...) {
      book_.finish(std::nullopt);
      throw;
    }
    book_.finish(n, std::move(guard), H::enabled ? clock::now() : clock::time_point{});
    return true;
  }

  /// Effects: drops one hold of the caller; the last one deletes the node.
  /// Returns: the server's refusal of that delete, if it refused (see release_node). Never throws.
  std::error_code release() noexcept {
    std::error_code refused;
    if constexpr (H::enabled) {
      clock::time_point granted;
      if (auto n = book_.end(&granted)) {
        refused = release_node(s_, *n);
        H::on_release(release_stats{path_, clock::now() - granted});
      }
    } else {
      if (auto n = book_.end()) refused = release_node(s_, *n);
    }
    return refused;
  }

  /// Effects: as release(), but keeps the node while the caller still holds it through `other`.
  /// Returns: as release().
  std::error_code release_unless_held_by(const lock_side& other) noexcept {
    [[maybe_unused]] clock::time_point granted;
    auto n = book_.end(H::enabled ? &granted : nullptr);
    if (!n) return {};
    std::error_code refused;
    if (!other.book_.holds_node(n->path)) refused = release_node(s_, *n);
    if constexpr (H::enabled) H::on_release(release_stats{path_, clock::now() - granted});
    return refused;
  }

  /// Returns: the caller's held node, if any.
  std::optional<held_node> held_node_of_caller() const { return book_.held(); }

  /// Returns: the czxid of the caller's node. Throws: errc::not_held.
  std::int64_t fencing_token() const {
    const auto n = book_.held();
    if (!n) throw_error(errc::not_held, "zklock: fencing_token() needs the lock held by the caller");
    return n->czxid;
  }

  /// Returns: whether the caller holds (bookkeeping only).
  bool held() const noexcept { return book_.count() > 0; }

  /// Returns: the loss token of the caller's hold (arms the own-node watch once, unless the wait
  /// for the grant armed it already). Throws: not_held.
  std::stop_token lost_token() const {
    const auto g = book_.guard();
    const auto n = book_.held();
    if (!g || !n) throw_error(errc::not_held, "zklock: lost_token() needs the lock held by the caller");
    if (g->claim_watch()) watch_held_node(s_, *n, g);  // first use: also watch our node
    return g->token();
  }

  /// Returns: whether the caller holds and no loss was signalled (arms the own-node watch once,
  /// as lost_token() does, so that a deletion by someone else is seen).
  bool still_owned() const noexcept {
    try {
      const auto g = book_.guard();
      if (!g) return false;
      if (g->claim_watch()) {
        if (const auto n = book_.held()) watch_held_node(s_, *n, g);
        else g->watch_result(false);
      }
      return !g->fired() && !g->lost();
    } catch (...) {  // allocation failure while looking
      return false;
    }
  }

 private:
  session& s_;
  const std::string& path_;
  hold_book<R> book_;
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

}  // namespace detail

/// A fair, cluster-wide mutex: the standard TimedLockable interface over the one algorithm.
/// Default: predecessor watch, condition-variable wake-up, not re-entrant, lock() waits forever.
template <WatchStrategy W = watch_predecessor, WakeupPolicy K = wake_condition_variable,
          ReentrancyPolicy R = reentrancy_none, TimeoutPolicy T = timeout_forever, Hooks H = no_hooks>
class basic_mutex {
 public:
  /// The policies this type is built from.
  using hooks_policy = H;
  using watch_policy = W;
  using wakeup_policy = K;
  using reentrancy_policy = R;
  using timeout_policy = T;

  /// Effects: names the lock node `path` (created on first use). Throws: std::invalid_argument for
  /// a bad path. The session must outlive the mutex.
  basic_mutex(session& s, std::string path) : path_(detail::checked_path(std::move(path))), side_(s, path_) {}

  /// Effects: releases any hold left (never throws).
  ~basic_mutex() = default;
  basic_mutex(const basic_mutex&) = delete;
  basic_mutex& operator=(const basic_mutex&) = delete;

  /// Effects: blocks until the caller holds the lock (or re-enters it, per R).
  /// Throws: std::system_error: resource_deadlock_would_occur if the caller holds it and R is not
  /// re-entrant; errc::lock_timeout when T's bound passes; session or server failures.
  void lock() {
    if (!side_.acquire(detail::exclusive_rule{}, T::lock_deadline(detail::clock::now())))
      throw_error(errc::lock_timeout, "zklock: lock() on " + path_);
  }

  /// Effects: one attempt without waiting. Returns: whether the caller now holds the lock.
  /// Throws: as lock(), but never lock_timeout.
  bool try_lock() { return side_.acquire(detail::exclusive_rule{}, detail::clock::now()); }

  /// Effects: waits at most `d`. Returns: whether the caller holds the lock; on false nothing of
  /// the attempt is left on the server. Throws: as try_lock(); std::invalid_argument if `d` < 0.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return side_.acquire(detail::exclusive_rule{}, detail::deadline_after(d, "try_lock_for"));
  }

  /// Effects: waits until `t` at most (converted to steady_clock once; a past `t` makes one
  /// attempt). Returns: as try_lock_for. Throws: as try_lock().
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return side_.acquire(detail::exclusive_rule{}, detail::steady_deadline(t));
  }

  /// Effects: releases one hold of the caller; the last one deletes the node (retried in the
  /// background if the connection is down). Does nothing if the caller does not hold (the
  /// overload below reports that). Never throws.
  void unlock() noexcept { (void)side_.release(); }

  /// Effects: as unlock(), reporting instead of ignoring a caller that does not hold: then nothing
  /// happens and `ec` is errc::not_held. Else `ec` is the server's refusal of the delete if it
  /// refused (errc::no_auth: the lock node's ACL changed under us; the node stays until the
  /// session ends, and the hold is over all the same), or cleared. Never throws (for destructors
  /// and callers that must not throw but want to know).
  void unlock(std::error_code& ec) noexcept {
    if (!side_.held()) {
      ec = detail::not_held();
      return;
    }
    ec = side_.release();
  }

  /// Returns: the fencing token of the caller's hold: the creation zxid of its node, strictly
  /// increasing across successive holders. Throws: std::system_error(errc::not_held).
  std::int64_t fencing_token() const { return side_.fencing_token(); }

  /// Returns: whether the caller holds the lock (as far as this object knows).
  bool owns_lock() const noexcept { return side_.held(); }

  /// Returns: a token that fires when ownership of the caller's hold can no longer be guaranteed:
  /// the session expired, was closed, or stayed disconnected longer than its loss tolerance, or our
  /// node was deleted by someone else (watched from the first call on, which costs one request).
  /// It never fires because of our own unlock(). Throws: std::system_error(errc::not_held).
  std::stop_token lost_token() const { return side_.lost_token(); }

  /// Returns: whether the caller holds the lock and no loss has been signalled.
  bool still_owned() const noexcept { return side_.still_owned(); }

  /// Returns: the lock node's path.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  detail::lock_side<W, K, R, H> side_;
};

/// A fair read/write lock: std::unique_lock takes the write side, std::shared_lock the read side.
/// The write holder may also take the read side (downgrade: lock_shared(), then unlock()): the read
/// hold shares the write node, so no writer queued meanwhile gets in before unlock_shared() (nor do
/// readers queued behind it). A reader asking for the write side gets
/// resource_deadlock_would_occur instead of waiting forever.
/// Nodes are named like Curator's InterProcessReadWriteLock (__READ__ / __WRIT__).
template <WatchStrategy W = watch_predecessor, WakeupPolicy K = wake_condition_variable,
          ReentrancyPolicy R = reentrancy_none, TimeoutPolicy T = timeout_forever, Hooks H = no_hooks>
class basic_shared_mutex {
 public:
  /// The policies this type is built from.
  using hooks_policy = H;
  using watch_policy = W;
  using wakeup_policy = K;
  using reentrancy_policy = R;
  using timeout_policy = T;

  /// Effects, Throws: as basic_mutex's constructor.
  basic_shared_mutex(session& s, std::string path)
      : path_(detail::checked_path(std::move(path))), write_(s, path_), read_(s, path_) {}
  basic_shared_mutex(const basic_shared_mutex&) = delete;
  basic_shared_mutex& operator=(const basic_shared_mutex&) = delete;

  /// Effects: blocks until the caller holds the write side. Throws: resource_deadlock_would_occur
  /// if the caller holds the read side (or the write side and R is not re-entrant); as basic_mutex.
  void lock() {
    if (!try_lock_until_impl(T::lock_deadline(detail::clock::now())))
      throw_error(errc::lock_timeout, "zklock: lock() on " + path_);
  }
  /// Effects, Returns: one attempt at the write side without waiting. Throws: as lock(), but never
  /// lock_timeout.
  bool try_lock() { return try_lock_until_impl(detail::clock::now()); }
  /// Effects, Returns: waits at most `d` for the write side. Throws: as try_lock();
  /// std::invalid_argument if `d` < 0.
  template <class Rep, class Period>
  bool try_lock_for(const std::chrono::duration<Rep, Period>& d) {
    return try_lock_until_impl(detail::deadline_after(d, "try_lock_for"));
  }
  /// Effects, Returns: waits until `t` at most for the write side (a past `t`: one attempt).
  /// Throws: as try_lock().
  template <class Clock, class Duration>
  bool try_lock_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_lock_until_impl(detail::steady_deadline(t));
  }
  /// Effects: releases the caller's write hold. Never throws.
  void unlock() noexcept { (void)write_.release_unless_held_by(read_); }
  /// Effects: as unlock(); `ec` is errc::not_held (and nothing happens) if the caller holds no write
  /// side, else the server's refusal of the delete if it refused (as basic_mutex::unlock(ec)), or
  /// cleared. Never throws.
  void unlock(std::error_code& ec) noexcept {
    if (!write_.held()) {
      ec = detail::not_held();
      return;
    }
    ec = write_.release_unless_held_by(read_);
  }

  /// Effects: blocks until the caller holds the read side. Throws: as lock().
  void lock_shared() {
    if (!try_lock_shared_until_impl(T::lock_deadline(detail::clock::now())))
      throw_error(errc::lock_timeout, "zklock: lock_shared() on " + path_);
  }
  /// Effects, Returns: one attempt at the read side without waiting. Throws: as lock_shared(), but
  /// never lock_timeout.
  bool try_lock_shared() { return try_lock_shared_until_impl(detail::clock::now()); }
  /// Effects, Returns: waits at most `d` for the read side. Throws: as try_lock_shared();
  /// std::invalid_argument if `d` < 0.
  template <class Rep, class Period>
  bool try_lock_shared_for(const std::chrono::duration<Rep, Period>& d) {
    return try_lock_shared_until_impl(detail::deadline_after(d, "try_lock_shared_for"));
  }
  /// Effects, Returns: waits until `t` at most for the read side (a past `t`: one attempt).
  /// Throws: as try_lock_shared().
  template <class Clock, class Duration>
  bool try_lock_shared_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_lock_shared_until_impl(detail::steady_deadline(t));
  }
  /// Effects: releases the caller's read hold. Never throws.
  void unlock_shared() noexcept { (void)read_.release_unless_held_by(write_); }
  /// Effects: as unlock_shared(); `ec` is errc::not_held (and nothing happens) if the caller holds no
  /// read side, else the server's refusal of the delete if it refused (as unlock(ec)), or cleared.
  /// Never throws.
  void unlock_shared(std::error_code& ec) noexcept {
    if (!read_.held()) {
      ec = detail::not_held();
      return;
    }
    ec = read_.release_unless_held_by(write_);
  }

  /// Returns: the fencing token of the caller's write hold. Throws: errc::not_held.
  std::int64_t fencing_token() const { return write_.fencing_token(); }
  /// Returns: whether the caller holds the write side.
  bool owns_lock() const noexcept { return write_.held(); }
  /// Returns: whether the caller holds the read side.
  bool owns_shared() const noexcept { return read_.held(); }
  /// Returns: the loss signal (see basic_mutex::lost_token) of the caller's write hold, or else of
  /// its read hold. Throws: errc::not_held if it holds neither.
  std::stop_token lost_token() const { return write_.held() ? write_.lost_token() : read_.lost_token(); }
  /// Returns: whether the caller holds either side and no loss has been signalled.
  bool still_owned() const noexcept { return write_.held() ? write_.still_owned() : read_.still_owned(); }
  /// Returns: the lock node's path.
  const std::string& path() const noexcept { return path_; }

 private:
  bool try_lock_until_impl(detail::clock::time_point d) {
    if (read_.held())
      throw std::system_error(std::make_error_code(std::errc::resource_deadlock_would_occur),
                              "zklock: a reader asked for the write side of " + path_);
    return write_.acquire(detail::write_rule{}, d);
  }
  bool try_lock_shared_until_impl(detail::clock::time_point d) {
    // Downgrade: a new read node would queue behind writers that came after ours; share ours.
    if (const auto w = write_.held_node_of_caller()) return read_.adopt(*w, d);
    return read_.acquire(detail::read_rule{}, d);
  }
  std::string path_;
  detail::lock_side<W, K, R, H> write_;
  detail::lock_side<W, K, R, H> read_;
};

/// A cluster-wide counting semaphore with a fixed number of leases, stored on the semaphore node.
/// Each acquire takes one more lease (one contender node); release() returns the most recent one,
/// from any thread. Fair: leases go in queue order.
template <WatchStrategy W = watch_predecessor, WakeupPolicy K = wake_condition_variable,
          TimeoutPolicy T = timeout_forever, Hooks H = no_hooks>
class basic_counting_semaphore {
 public:
  /// The policies this type is built from.
  using hooks_policy = H;
  using watch_policy = W;
  using wakeup_policy = K;
  using timeout_policy = T;

  /// Effects: opens (creating if needed) the semaphore node `path` with `leases` leases.
  /// Throws: std::invalid_argument for a bad path or leases outside 1..1,000,000; std::system_error
  /// (errc::lease_count_mismatch) if the node stores another count; session failures.
  basic_counting_semaphore(session& s, std::string path, std::ptrdiff_t leases)
      : s_(s), path_(detail::checked_path(std::move(path))), leases_(checked_leases(leases)) {
    detail::ensure_semaphore_node(s_, path_, static_cast<int>(leases_));
  }
  /// Effects: returns every lease still held (never throws).
  ~basic_counting_semaphore() {
    for (auto& l : held_) {
      l.guard->release();
      detail::release_node(s_, l.node);
    }
  }
  basic_counting_semaphore(const basic_counting_semaphore&) = delete;
  basic_counting_semaphore& operator=(const basic_counting_semaphore&) = delete;

  /// Effects: blocks until a lease is granted. Throws: errc::lock_timeout when T's bound passes;
  /// session or server failures.
  void acquire() {
    if (!try_acquire_until_impl(T::lock_deadline(detail::clock::now())))
      throw_error(errc::lock_timeout, "zklock: acquire() on " + path_);
  }
  /// Effects, Returns: one attempt without waiting: whether a lease was granted. Throws: as
  /// acquire(), but never lock_timeout.
  bool try_acquire() { return try_acquire_until_impl(detail::clock::now()); }
  /// Effects, Returns: waits at most `d` for a lease. Throws: as try_acquire();
  /// std::invalid_argument if `d` < 0.
  template <class Rep, class Period>
  bool try_acquire_for(const std::chrono::duration<Rep, Period>& d) {
    return try_acquire_until_impl(detail::deadline_after(d, "try_acquire_for"));
  }
  /// Effects, Returns: waits until `t` at most for a lease (a past `t`: one attempt).
  /// Throws: as try_acquire().
  template <class Clock, class Duration>
  bool try_acquire_until(const std::chrono::time_point<Clock, Duration>& t) {
    return try_acquire_until_impl(detail::steady_deadline(t));
  }
  /// Effects: returns the most recently granted lease of this object (a delete the server refuses
  /// goes to the log handler; release(ec) reports it). Throws: std::system_error(errc::not_held)
  /// if it holds none.
  void release() {
    std::error_code ec;
    release(ec);
    if (ec == detail::not_held()) throw_error(errc::not_held, "zklock: release() on " + path_ + " without a lease");
  }
  /// Effects: as release(), but a semaphore object holding no lease sets `ec` to errc::not_held
  /// (and does nothing) instead of throwing; else `ec` is the server's refusal of the delete if it
  /// refused (errc::no_auth; the lease is returned all the same, its node stays until the session
  /// ends), or cleared. Never throws.
  void release(std::error_code& ec) noexcept {
    std::optional<lease> l;
    {
      std::lock_guard lk{mu_};
      if (held_.empty()) {
        ec = detail::not_held();
        return;
      }
      l = std::move(held_.back());
      held_.pop_back();
    }
    l->guard->release();  // our own delete is no loss
    ec = detail::release_node(s_, l->node);
    if constexpr (H::enabled) H::on_release(release_stats{path_, detail::clock::now() - l->granted});
  }
  /// Returns: how many leases this object holds.
  std::ptrdiff_t held_leases() const noexcept {
    std::lock_guard lk{mu_};
    return static_cast<std::ptrdiff_t>(held_.size());
  }
  /// Returns: the number of leases of the semaphore.
  std::ptrdiff_t leases() const noexcept { return leases_; }
  /// Returns: a token that fires when the most recently granted lease of this object (the one
  /// release() returns next) can no longer be guaranteed: as basic_mutex::lost_token (the first
  /// call arms a watch on the lease's node: one request). Throws: std::system_error(errc::not_held)
  /// if the object holds no lease.
  std::stop_token lost_token() const {
    std::shared_ptr<detail::hold_guard> g;
    std::optional<detail::held_node> n;
    {
      std::lock_guard lk{mu_};
      if (held_.empty()) throw_error(errc::not_held, "zklock: lost_token() on " + path_ + " without a lease");
      g = held_.back().guard;
      n = held_.back().node;
    }
    if (g->claim_watch()) detail::watch_held_node(s_, *n, g);
    return g->token();
  }
  /// Returns: whether the object holds a lease and no loss of its most recent one was signalled
  /// (the first call arms the watch, as lost_token() does).
  bool still_owned() const noexcept {
    try {
      (void)lost_token();
      std::lock_guard lk{mu_};
      return !held_.empty() && !held_.back().guard->fired() && !held_.back().guard->lost();
    } catch (...) {  // not held (or allocation failure)
      return false;
    }
  }
  /// Returns: the semaphore node's path.
  const std::string& path() const noexcept { return path_; }

 private:
  static std::ptrdiff_t checked_leases(std::ptrdiff_t n) {
    if (n < 1 || n > 1'000'000) throw std::invalid_argument("zklock: a semaphore needs 1..1000000 leases");
    return n;
  }
  bool try_acquire_until_impl(detail::clock::time_point d) {
    [[maybe_unused]] detail::acquire_counters counters;
    [[maybe_unused]] detail::clock::time_point started, granted;
    if constexpr (H::enabled) started = detail::clock::now();
    auto n = detail::acquire_node<W, K>(s_, path_, detail::semaphore_rule{static_cast<std::size_t>(leases_)}, d,
                                        H::enabled ? &counters : nullptr);
    if constexpr (H::enabled) {
      granted = detail::clock::now();
      H::on_acquire(acquire_stats{path_, granted - started, counters.position, counters.wakeups, counters.requests,
                                  n.has_value(), counters.requeues});
    }
    if (!n) return false;
    try {
      std::lock_guard lk{mu_};
      held_.push_back(lease{std::move(n->node), std::move(n->guard), granted});
    } catch (...) {
      n->guard->release();
      detail::release_node(s_, n->node);
      throw;
    }
    return true;
  }
  session& s_;
  std::string path_;
  std::ptrdiff_t leases_;
  struct lease {
    detail::held_node node;
    std::shared_ptr<detail::hold_guard> guard;  // its loss signal
    detail::clock::time_point granted;          // only measured for hooks
  };
  mutable std::mutex mu_;
  std::vector<lease> held_;
};

}  // namespace zklock
