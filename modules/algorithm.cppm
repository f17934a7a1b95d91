// SPDX-License-Identifier: Apache-2.0
// zklock:algorithm — the one lock algorithm every lock type runs (the lock types: zklock:mutex,
// zklock:shared_mutex, zklock:semaphore; their hold bookkeeping: zklock:holds).
//
// The recipe. To acquire, a contender creates an ephemeral-sequential node under the lock node
// (missing parents become container nodes, so the server reaps them when they empty) and lists
// the children. Contenders queue in the order of their sequence numbers (serial-number arithmetic,
// right across the 32-bit wrap); children that are not contenders are ignored. A mode rule
// (zklock.detail:rules) says which contenders ahead count (all of them for a mutex, a writer or a
// semaphore; writers for a reader) and how many of them may remain while it holds (the lease
// count for a semaphore, else 1). Releasing deletes the node. Queue order makes the locks fair
// (first come, first served).
//
// Waiting. A waiter that does not hold watches the few nearest counted contenders ahead (the watch
// strategy says how many: with watch_predecessor one more than the grant needs to see go) and
// counts their deletions. Nobody can join ahead of it, so the deletions it saw bound how many are
// left: when they prove it holds, and its own node provably stands, the deletion event itself is
// the grant, one round trip after the release (the fast path: grant_on_deletion). When a deletion
// proves too little, it lists again and moves its watches up; watching one contender more than
// needed makes that happen while the contender just ahead still holds, so the listing is off the
// critical path of the handoff. (A strategy that watches the children instead waits for any
// change and lists again.)
//
// Compile-time policies pick the watch strategy, the wake-up, the reentrancy and how long a
// blocking lock() waits (see policies/, bundled by zklock:policies). The ZooKeeper work is done by
// a few non-template functions (zklock:operations); these templates only decide.
//
// Written once for both ways of waiting: the functions below are coroutines (zklock:step). With a
// blocking wake-up model every `co_await` of a wait blocks the thread and the whole acquire runs
// as a plain call (lock(), try_lock_for()...); with wake_resume a wait suspends the acquire, and a
// watch, a deadline or a stop request resumes it on the session's runner (async_lock()...).
//
// Session loss. Our node is ephemeral: when the session expires the server deletes it and others
// may acquire. A waiter whose session ends (an expiry, or a disconnection longer than the loss
// tolerance) queues again on the session's next handle, within its deadline; a grant is only ever
// made on a node of the live session. A timeout, a cancellation (the wait context's stop token),
// an exception
// or a failed try deletes the attempt's node and removes its watch; if the connection is down the
// delete is retried in the background. A create whose reply was lost is found again by the
// attempt's unique id (protected creation).
module;
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>
export module zklock:algorithm;
import :errors;
import :session;
import :operations;
import zklock.detail;
import :watch;
import :wakeup;
import :timeout;
import :step;

// Outside any `export`: reachable by the lock templates wherever they are instantiated, never
// visible to `import zklock;`.
namespace zklock::detail {

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

/// One acquire attempt: its contender node, the watches it waits on and the waiter its wait
/// blocks on (or, with wake_resume, suspends on). Unless granted, it undoes everything when it ends: its watches are removed and its
/// node deleted (in the background if the connection is down). A stop request on its wait
/// context's token wakes its waiter and ends every wait from then on.
/// Returns: whether `W` is a wake-up model the algorithm can wait with: a blocking one (a
/// WakeupPolicy, the bundle's wakeup axis) or the asynchronous wake_resume.
template <class W>
concept AlgorithmWakeup = WakeupPolicy<W> || ResumingWakeup<W>;

template <AlgorithmWakeup Wakeup>
class attempt {
 public:
  /// Effects: takes charge of the new contender node `n`, cancelled by `stop`; counts requests in
  /// `count`, if given.
  attempt(session& s, held_node n, std::stop_token stop, acquire_counters* count)
      : s_(s),
        node_(std::move(n)),
        count_(count),
        waiter_(Wakeup::fresh_per_wait ? nullptr : new_waiter<Wakeup>(s)),  // (else prepare_wait makes each)
        stop_(std::move(stop)),
        on_stop_(stop_, waker{relay_}) {
    relay_->point_at(waiter_);
  }
  /// Effects: unless granted, removes the attempt's watches and deletes its node. Never throws.
  ~attempt() {
    if (granted_) return;
    for (auto& w : ahead_) drop(w, false);
    if (children_) drop(children_, true);
    if (guard_) guard_->release();  // its watch on our node goes with the node
    if (!node_gone_) release_node(s_, node());
  }
  attempt(const attempt&) = delete;
  attempt& operator=(const attempt&) = delete;

  /// Returns: our contender node.
  const held_node& node() const noexcept { return guard_ && guard_->has_node() ? guard_->node() : node_; }
  /// Effects: counts `n` requests sent for the attempt (when counting).
  void sent(std::size_t n = 1) noexcept {
    if (count_) count_->requests += n;
  }

  /// Returns: the grant; the attempt keeps its node from now on (watches still armed on
  /// contenders ahead fire once more, harmlessly: they wake nobody).
  /// Throws: errc::session_expired if the node's session is no longer the live one (given up or
  /// expired meanwhile: its node goes with it, so it is nobody's grant); std::bad_alloc.
  /// `waited`: the grant came after a wait (see held_node::waited).
  grant granted(bool waited) {
    if (!session_alive_for(s_, node())) {
      node_gone_ = true;  // nothing this session could delete: the old session takes it along
      throw_error(errc::session_expired, "zklock: the session of our contender node " + node().path +
                                             " ended before its grant");
    }
    if (!guard_) guard_ = std::make_shared<hold_guard>(s_, loss_token(s_, node_.generation));
    held_node n = guard_->has_node() ? guard_->node() : std::move(node_);  // (the guard keeps its own)
    relay_->point_at(nullptr);
    granted_ = true;
    n.waited = waited;
    n.granted_at = clock::now();
    return grant{std::move(n), std::move(guard_)};
  }

  /// Effects: our node is not in the queue any more. Throws: errc::session_expired if it went with
  /// the session (nothing left to delete), else errc::contender_deleted (someone deleted it).
  [[noreturn]] void vanished() {
    node_gone_ = !session_alive_for(s_, node());
    throw_error(node_gone_ ? errc::session_expired : errc::contender_deleted,
                "zklock: our contender node " + node().path +
                    (node_gone_ ? " went with its session while waiting" : " was deleted by someone else while waiting"));
  }

  /// Effects: readies the waiter for the next wait: a watch firing from now on wakes it.
  void prepare_wait() {
    if constexpr (Wakeup::fresh_per_wait) {
      waiter_ = new_waiter<Wakeup>(s_);
      relay_->point_at(waiter_);
    } else {
      waiter_->reset();
    }
  }
  /// What `co_await at.wait(deadline)` waits for (see wait).
  struct waiting {
    attempt& at;
    wait_on<Wakeup> on;
    bool await_ready() { return at.cancelled() || on.await_ready(); }
    bool await_suspend(std::coroutine_handle<> h) { return on.await_suspend(h); }
    bool await_resume() { return !at.cancelled() && on.await_resume(); }
  };
  /// Returns: an awaitable that waits until a watch fires (since prepare_wait), `deadline` passes
  /// or a stop is requested; its value: whether a watch fired (false once a stop was requested).
  /// (After prepare_wait.)
  waiting wait(clock::time_point deadline) { return waiting{*this, wait_on<Wakeup>{*waiter_, deadline}}; }
  /// Returns: whether a stop was requested on the attempt's token.
  bool cancelled() const noexcept { return stop_.stop_requested(); }

  /// Returns: a fresh children watch on `lock_path`, to arm by listing it.
  std::shared_ptr<wake_target> arm_children(const std::string& lock_path) {
    children_ = std::make_shared<watch_slot>(shared_path{lock_path}, relay_);
    return children_;
  }
  /// Returns: whether a children watch is armed and has not fired.
  bool children_armed() const noexcept { return children_ && !children_->fired(); }
  /// Effects: counts a wake-up (acquire_counters::wakeups) if the children watch armed last fired.
  /// Counted when the attempt looks again because of it, whether or not it had blocked yet.
  void note_children_fired() noexcept {
    if (children_ && children_->fired()) woke();
  }
  /// Effects: counts one wake-up: a watch firing that makes the attempt look again.
  void woke() noexcept {
    if (count_) ++count_->wakeups;
  }

  /// Effects: watches exactly the contender nodes `paths`: drops the watches on others (nodes that
  /// left the queue since), arms the missing ones (all sent at once, their replies not waited for:
  /// a node found gone counts as deleted, see arm_watches), our own node's first.
  /// Throws: as arm_watches.
  /// `version` >= 0: the last of `paths` is a semaphore's node, watched for a change of its lease
  /// count read at that data version (watch_slot::expect_version).
  /// (The paths of the watches it arms are moved out of `paths`.)
  void watch_ahead(std::vector<shared_path>& paths, std::int32_t version = -1) {
    std::erase_if(ahead_, [&](const std::shared_ptr<watch_slot>& w) {
      if (std::find(paths.begin(), paths.end(), w->path) != paths.end()) return false;
      drop(w, false);
      return true;
    });
    // Our own node's watch goes first: its reply, and any deletion of our node, reach us before
    // the replies and events of the watches sent after it. It stays armed as the hold's loss watch.
    // The first time, it goes with the watches ahead (in one request where the client can).
    // The guard takes our node over (no second copy of its path while we wait).
    if (!guard_) {
      const std::uint64_t generation = node_.generation;
      guard_ = std::make_shared<hold_guard>(s_, loss_token(s_, generation), std::move(node_));
    }
    const bool own = guard_->claim_watch();
    std::vector<std::shared_ptr<watch_slot>> fresh;
    try {
      for (auto& p : paths)
        if (std::none_of(ahead_.begin(), ahead_.end(), [&](const auto& w) { return w->path == p; })) {
          const bool last = &p == &paths.back();
          fresh.push_back(std::make_shared<watch_slot>(std::move(p), relay_));
          if (version >= 0 && last) fresh.back()->expect_version = version;
        }
      ahead_.reserve(ahead_.size() + fresh.size());  // (no throw below once they are sent)
    } catch (...) {
      if (own) guard_->watch_result(false);
      throw;
    }
    if (fresh.empty()) {
      if (own) {
        watch_own_node(s_, node(), guard_);
        sent();
      }
      return;
    }
    const own_watch ours{node(), guard_};
    sent(arm_watches(s_, node().generation, fresh, own ? &ours : nullptr));  // our node's session: a later one has none of ours
    for (auto& w : fresh) ahead_.push_back(std::move(w));
  }
  /// Effects: forgets the watches on contenders ahead that fired. Returns: the permits of those
  /// that fired because their node was deleted; sets `other` if one fired for another reason (its
  /// node's data changed, or the session ended).
  /// Throws: the server's refusal of a watch's request (watch_refused); a lost connection or an
  /// ended session only sets `other` (the listing that follows waits for the next, or throws).
  std::size_t take_fired(bool& other) {
    std::size_t deleted = 0;
    std::shared_ptr<watch_slot> failed;
    std::erase_if(ahead_, [&](const std::shared_ptr<watch_slot>& w) {
      if (!w->fired()) return false;
      if (w->deleted() && w->expect_version < 0) {  // (a semaphore's node is no contender)
        deleted += weight_of(w->path);  // (in permits, as the tally counts)
      } else {
        other = true;
        if (!failed && w->failure() != 0) failed = w;
      }
      return true;
    });
    if (failed) watch_refused(failed->path, failed->failure());
    return deleted;
  }
  /// Returns: whether our node provably stands: its watch is armed and has not fired (a deletion
  /// of our node would have reached us before any event of a watch armed after it).
  bool own_node_stands() const noexcept { return guard_ && guard_->watch_armed() && !guard_->fired(); }

 private:
  /// Effects: stops waiting on `w`; removes its watch unless it fired. Never throws.
  void drop(const std::shared_ptr<watch_slot>& w, bool children) noexcept {
    w->mark_dropped();  // first: a reply still on its way removes the watch it arms (arm_watches)
    if (w->fired()) return;
    drop_watch(s_, w->path, children, w.get());
    if (w->expect_version < 0) sent();  // (a semaphore node's watch stays armed: see arm_watches)
  }
  /// Wakes the current waiter when a stop is requested (on the requesting thread; never blocks).
  struct waker {
    std::shared_ptr<wake_relay> relay;
    void operator()() const noexcept { relay->wake(); }
  };
  session& s_;
  held_node node_;  // until the guard takes it over (watch_ahead): see node()
  acquire_counters* count_;
  std::shared_ptr<wake_relay> relay_ = std::make_shared<wake_relay>();
  std::shared_ptr<typename Wakeup::waiter> waiter_;
  std::stop_token stop_;
  std::stop_callback<waker> on_stop_;  // after relay_ and stop_: it may run in its constructor
  std::vector<std::shared_ptr<watch_slot>> ahead_;  // armed watches on contenders ahead
  std::shared_ptr<watch_slot> children_;            // the children watch, if any
  std::shared_ptr<hold_guard> guard_;               // made at the first wait, or at the grant
  bool granted_ = false;
  bool node_gone_ = false;  // went with its session: nothing to delete
};

/// What the deletions seen on the contenders ahead prove.
enum class wait_outcome {
  granted,  ///< we hold, and our node stands: the grant, with no listing
  relist    ///< too little (or a watch fired for another reason): list again
};

/// The fast path, one look after a wake-up (or before the first wait): counts the deletions among
/// the watched contenders ahead (`seen`, zklock.detail:rules, tally), so that the deletion which
/// proves us held is itself the grant, one round trip after the release. Readies the waiter for
/// the next wait first. Returns: granted (the deletions prove we hold, and our node stands),
/// relist (they prove too little: contenders beyond the watched ones may have gone unseen; or a
/// watch fired for another reason, which sets `other`), or nullopt: wait for the next deletion.
template <AlgorithmWakeup Wakeup>
std::optional<wait_outcome> grant_on_deletion(attempt<Wakeup>& at, tally& seen, bool& other) {
  at.prepare_wait();
  bool fired_other = false;
  const std::size_t deleted = at.take_fired(fired_other);
  if (deleted != 0 || fired_other) at.woke();  // also when it fired before we blocked
  other = other || fired_other;
  seen.gone += deleted;
  if (seen.proves_held()) return at.own_node_stands() ? wait_outcome::granted : wait_outcome::relist;
  if (other || seen.must_relist()) return wait_outcome::relist;
  return std::nullopt;
}

/// Throws: std::system_error(errc::path_kind_mismatch): the queue under `lock_path` holds nodes of
/// the other kind than `Rule`'s (leases under a lock, lock contenders under a semaphore).
template <class Rule>
[[noreturn]] void wrong_kind(const std::string& lock_path) {
  if constexpr ((Rule::kinds & lease_kinds) != 0)
    throw_error(errc::path_kind_mismatch, "zklock: " + lock_path + " is a lock's path (lock contenders are queued " +
                                              "under it): no semaphore may take leases there");
  else
    throw_error(errc::path_kind_mismatch, "zklock: " + lock_path + " is a semaphore's path (leases are queued " +
                                              "under it): no lock may queue there");
}

/// Effects: waits until `ready(waiter)` says so (it registers the waiter to be woken when it may
/// change), `deadline` passes or a stop is requested on `stop`. Returns: true once ready; false at
/// the deadline or on the stop. Throws: what `ready` throws.
template <AlgorithmWakeup Wakeup, class Ready>
step<bool> wait_until_ready(session& s, Ready ready, clock::time_point deadline, std::stop_token stop) {
  for (;;) {
    const auto w = new_waiter<Wakeup>(s);
    struct waker {
      std::shared_ptr<typename Wakeup::waiter> w;
      void operator()() const noexcept { w->wake(); }
    };
    const std::stop_callback<waker> on_stop{stop, waker{w}};
    if (stop.stop_requested()) co_return false;
    if (ready(std::shared_ptr<wake_target>{w})) co_return true;
    if (!co_await wait_on<Wakeup>{*w, deadline} && clock::now() >= deadline) co_return false;
  }
}

/// Effects: after the session's generation `generation` ended, waits until a later one is
/// connected, `deadline` passes or a stop is requested on `stop`. Returns: true once one is
/// connected; false at the deadline or on the stop. Throws: as next_session_ready.
template <AlgorithmWakeup Wakeup>
step<bool> next_session(session& s, std::uint64_t generation, clock::time_point deadline, std::stop_token stop) {
  auto ready = [&s, generation](const std::shared_ptr<wake_target>& w) { return next_session_ready(s, generation, w); };
  return wait_until_ready<Wakeup>(s, ready, deadline, stop);
}

/// What `co_await` of an attempt's result gives: T for a step<T>, else the result itself.
template <class R>
struct attempt_value {
  using type = R;
  static constexpr bool awaited = false;
};
template <class T>
struct attempt_value<step<T>> {
  using type = T;
  static constexpr bool awaited = true;
};

/// Effects: runs `attempt()`, and again on the session's next generation each time it throws
/// errc::session_expired (the session ended under it: an expiry, or a disconnection longer than
/// the loss tolerance), once a later generation is connected (next_session, waiting as `Wakeup`
/// does); counts each new run in `*reruns`, if given. `attempt()` returns a std::optional, or a
/// step of one to co_await; it bounds its own waits by `wc` (the caller gives it the same context).
/// Returns: the attempt's value; nullopt if a stop is requested on wc.stop after the session ended
/// under it.
/// Throws: what the attempt throws; its session_expired if no later generation is connected before
/// wc.deadline; as next_session_ready (session_closed; session_expired if none will come).
template <AlgorithmWakeup Wakeup, class Attempt,
          class Result = typename attempt_value<std::invoke_result_t<Attempt&>>::type>
step<Result> retry_on_next_session(session& s, const wait_context& wc, Attempt attempt, std::size_t* reruns = nullptr) {
  for (;;) {
    const std::uint64_t generation = s.generation();
    std::exception_ptr expired;
    try {
      if constexpr (attempt_value<std::invoke_result_t<Attempt&>>::awaited)
        co_return co_await attempt();
      else
        co_return attempt();
    } catch (const std::system_error& e) {
      if (e.code() != make_error_code(errc::session_expired)) throw;
      expired = std::current_exception();
    }
    if (wc.stop.stop_requested()) co_return std::nullopt;  // nothing of ours is left: the session took it
    if (!co_await next_session<Wakeup>(s, generation, wc.deadline, wc.stop)) {
      if (wc.stop.stop_requested()) co_return std::nullopt;
      std::rethrow_exception(expired);
    }
    if (reruns) ++*reruns;
  }
}

/// The one algorithm: queue a contender node under `lock_path` and wait until `rule` says it
/// holds, or until the wait context `wc` ends (its deadline passes or its stop is requested); and
/// queue again on the next session when the session ends while we wait (an expiry, or a
/// disconnection longer than the loss tolerance, took our waiting node along; our place in the
/// queue is lost), as retry_on_next_session does, within the same frame: a pending asynchronous
/// acquire is one coroutine frame, not two. A grant is never queued for again: a lost hold is
/// reported by its loss signal. Returns: the grant, or nullopt on timeout or cancellation (nothing
/// left behind). Throws: std::system_error if the session fails or our node vanishes (nothing is
/// left behind); session_expired if no next session is connected before the deadline or none will
/// come (reestablish_after_expiry off; its re-establishment was refused for good). `lock_path`,
/// `rule`, `wc` and `turn` (an asynchronous acquire's turn to send its create, if any) must
/// outlive the step.
template <WatchStrategy Watch, AlgorithmWakeup Wakeup, class Rule>
step<std::optional<grant>> acquire_node(session& s, const std::string& lock_path, const Rule& rule,
                                        const wait_context& wc, acquire_counters* count = nullptr,
                                        send_turn* turn = nullptr) {
  for (;;) {  // one turn per session generation
    const std::uint64_t generation = s.generation();
    std::exception_ptr expired;
    try {
      const clock::time_point deadline = wc.deadline;
      if (wc.stop.stop_requested()) co_return std::nullopt;  // cancelled before it began: not one request
      // Our last release of this lock may still be on its way (settle_before_requeue): queue once it
      // is answered. A try without a wait does not wait for it.
      if (clock::now() < deadline && !release_settled(s, lock_path, nullptr)) {
        auto settled = [&s, &lock_path](const std::shared_ptr<wake_target>& w) { return release_settled(s, lock_path, w); };
        if (!co_await wait_until_ready<Wakeup>(s, settled, deadline, wc.stop)) co_return std::nullopt;
      }
      // An asynchronous acquire sends its create once those started before it on this path did (a
      // lock object's acquires queue in the order of the calls); a try without a wait does not wait.
      // (Looked at first without a waiter: most often the turn is there, and the wait's frame and
      // waiter would only be made and freed.)
      if (turn && clock::now() < deadline && !turn->ready(nullptr)) {
        auto in_turn = [turn](const std::shared_ptr<wake_target>& w) { return turn->ready(w); };
        if (!co_await wait_until_ready<Wakeup>(s, in_turn, deadline, wc.stop)) co_return std::nullopt;
      }
      // A waiting acquire keeps only what its next step needs: the locals of the steps below live in
      // blocks that end before it waits (with wake_resume, what outlives a wait is in its frame).
      std::optional<attempt<Wakeup>> attempted;
      std::optional<name_list> listing;
      // A semaphore's lease count N follows its node (set_max): the rule's N is the one read last at
      // the data version `lease_version`; a listing that shows another version reads it again, and a
      // waiter watches the node for a change (so a larger N grants at once).
      constexpr bool leases = (Rule::kinds & lease_kinds) != 0;
      Rule r = rule;
      std::int32_t lease_version = -1, listed_version = -1;
      if constexpr (leases)
        if (r.live) std::tie(r.leases, lease_version) = r.live->load();
      {
        // the create and the listing, sent back to back (more requests on a first use or a lost reply)
        std::string lock_data;  // a semaphore's node is made again with its lease count if it was removed
        if constexpr (leases) lock_data = lease_count_text(r.limit());
        std::uint32_t permits = 1;  // a lease of many permits says so in its name
        if constexpr (leases) permits = r.permits;
        auto queued = create_and_list(s, lock_path, contender_prefix(Rule::own, permits), contender_data(), deadline,
                                      count ? &count->requests : nullptr, turn, !leases, lock_data);
        if (!queued) co_return std::nullopt;
        attempted.emplace(s, std::move(queued->node), wc.stop, count);
        listing = std::move(queued->listing);
        listed_version = queued->lock_data_version;
        // One path, one meaning (zklock.detail:rules): a lock node whose data may be a lease count is
        // read once (one more round trip, never for a lock node zklock or Curator created: those
        // store nothing) and refused if it is a semaphore's; our node goes with the attempt.
        if constexpr ((Rule::kinds & lease_kinds) == 0)
          if (listing && may_store_lease_count(queued->lock_data_length)) {
            attempted->sent();
            if (!check_not_semaphore(s, lock_path, deadline)) co_return std::nullopt;
          }
      }
      attempt<Wakeup>& at = *attempted;
      auto list = [&](const std::shared_ptr<wake_target>& watcher) {
        at.sent();
        const auto sent = clock::now();
        listing = list_children(s, lock_path, watcher, deadline, nullptr, leases ? &listed_version : nullptr);
        if (listing) round_trips(s).note(clock::now() - sent);
      };
      if (!listing) list(nullptr);  // the pipelined listing failed: list on our own

      for (bool first = true;; first = false) {
        if (!listing) co_return std::nullopt;  // deadline
        if constexpr (leases)
          if (listed_version != lease_version) {  // N changed (or this acquire has not read it yet)
            at.sent();
            const auto now_stored = read_lease_count(s, lock_path, deadline);
            if (!now_stored) co_return std::nullopt;
            r.leases = now_stored->leases;
            lease_version = listed_version = now_stored->version;
            if (r.live) r.live->store(r.leases, lease_version);
            if (r.permits > r.leases)
              throw_error(errc::lease_count_mismatch,
                          "zklock: " + lock_path + " is a semaphore with N = " + std::to_string(r.leases) +
                              " leases now (changed while this acquire was on its way): " + std::to_string(r.permits) +
                              " permits never fit; ask for 1 to " + std::to_string(r.leases));
          }
        // Where do we stand? The rule reads the listing (unsorted: locate and nearest_first take linear
        // time, where a sort of a long queue on every wake-up would not); only what the wait needs
        // outlives it.
        std::size_t window, ahead, limit;
        std::vector<shared_path> targets;  // (each shared with the session's watch of it, if any)
        {
          unsigned present = 0;
          std::vector<contender> listed = listed_contenders(*listing, Rule::kinds, &present);  // views *listing
          if ((present & Rule::foreign) != 0) wrong_kind<Rule>(lock_path);
          const std::string_view self = std::string_view{at.node().path}.substr(lock_path.size() + 1);  // (ours)
          const std::optional<place> here = locate(r, std::span<contender>{listed}, self);  // (reorders listed)
          if (!here) at.vanished();
          if (count && first) count->position = here->position;
          if (here->held()) co_return at.granted(!first);
          if (clock::now() >= deadline || at.cancelled()) co_return std::nullopt;
          // Not yet: wait as the watch strategy says, then look again (or take the grant).
          // (in permits: each contender ahead weighs 1, but a lease of many permits)
          ahead = here->weight;
          limit = here->limit;
          const std::size_t budget = Watch::window(ahead, limit, look_ahead(s));
          const std::size_t n = budget == 0 ? 0 : nearest_first(here->ahead, budget);
          window = 0;
          for (std::size_t i = n; i-- > 0;) {  // the watched, in queue order
            targets.push_back(watched_path(s, lock_path, here->ahead[i].name));
            window += here->ahead[i].weight;
          }
          listing.reset();  // (what the wait needs is in targets)
        }
        if (window == 0) {  // the lock node's children: any join or leave may be our turn
          at.prepare_wait();  // first: a watch that fires from now on (the node's, as it is armed) ends the wait
          if constexpr (leases) {  // and a semaphore's lease count changing
            bool changed = false;
            (void)at.take_fired(changed);
            std::vector<shared_path> node{watched_path(s, lock_path)};
            at.watch_ahead(node, lease_version);
          }
          if (at.children_armed()) {  // else it fired already (or none was armed): look again now
            if (!co_await at.wait(deadline)) co_return std::nullopt;
          }
          at.note_children_fired();
          list(at.children_armed() ? nullptr : at.arm_children(lock_path));  // (armed still: N changed)
          continue;
        }
        // The fast path: watch the nearest counted contenders ahead, wait for their deletions (and a
        // semaphore's node, for a change of N).
        if constexpr (leases) targets.push_back(watched_path(s, lock_path));
        at.watch_ahead(targets, leases ? lease_version : -1);
        targets = {};
        tally seen{ahead, limit, window, 0};
        bool other = false;
        std::optional<wait_outcome> outcome;
        while (!(outcome = grant_on_deletion(at, seen, other)))
          if (!co_await at.wait(deadline)) co_return std::nullopt;
        if (*outcome == wait_outcome::granted) co_return at.granted(true);
        list(nullptr);
      }
    } catch (const std::system_error& e) {  // (the turn's locals, its attempt, are gone: nothing is left behind)
      if (e.code() != make_error_code(errc::session_expired)) throw;
      expired = std::current_exception();
    }
    if (wc.stop.stop_requested()) co_return std::nullopt;  // nothing of ours is left: the session took it
    if (!co_await next_session<Wakeup>(s, generation, wc.deadline, wc.stop)) {
      if (wc.stop.stop_requested()) co_return std::nullopt;
      std::rethrow_exception(expired);
    }
    if (count) ++count->requeues;
  }
}

}  // namespace zklock::detail
