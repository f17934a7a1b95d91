// SPDX-License-Identifier: Apache-2.0
// zklock:operations — the narrow, non-template vocabulary that the lock templates call: the few
// ZooKeeper operations the algorithm needs, watch slots and the hold guard (the pure logic they
// build on is the module zklock.detail). Defined in implementation units, so importers never see the
// ZooKeeper C API or range-v3. Declared outside any `export`: reachable by the lock templates
// wherever they are instantiated, but not visible to `import zklock;`.
module;
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <stop_token>
#include <string_view>
#include <vector>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
export module zklock:operations;
import zklock.detail;
import :session;
import :revoke;
import :wakeup;

namespace zklock::detail {

/// Returns: the round-trip meter of `s`'s reads.
round_trip_meter& round_trips(session& s) noexcept;
/// Returns: whether a waiter on `s` should look one handoff ahead (see
/// session_options::look_ahead_round_trip): the measured round trip exceeds it, or nothing was
/// measured yet.
bool look_ahead(session& s) noexcept;

// ---- waking a waiter from a watch ------------------------------------------------------------

/// The base of everything a watch wakes (a wake-up policy's waiter, a watch slot, a hold guard):
/// the public zklock::wake_target (zklock:wakeup).
using wake_target = zklock::wake_target;

// ---- the ZooKeeper operations of the one algorithm --------------------------------------------
// They wait through connection loss until `deadline`, and throw std::system_error (zklock
// category) when the session is expired or closed, or the server refuses (e.g. no_auth).

/// A contender node we created.
struct held_node {
  std::string path;          ///< full path of the node
  std::int64_t czxid = 0;    ///< its creation zxid: the fencing token
  std::uint64_t generation = 0;  ///< session generation it was created in
  bool waited = false;           ///< its grant came after a wait (others were ahead of it)
  clock::time_point granted_at{};  ///< when it was granted (time_point{}: not granted yet)
};

/// A contender node and, when it came with it, the listing of its lock node.
struct queued_node {
  held_node node;                                   ///< our new contender node
  std::optional<name_list> listing;                 ///< nullopt: list again
  std::int32_t lock_data_length = 0;                ///< the lock node's data length, with the listing
  std::int32_t lock_data_version = 0;               ///< the lock node's data version, with the listing
};

/// What an acquire that must send its create in turn (the asynchronous acquires of one lock path,
/// zklock:step's send_turn) is told by create_and_list: its create is on its way, in order.
class create_sent {
 public:
  /// Effects: the create was handed to the client, or none will be sent. Never throws.
  virtual void sent() noexcept = 0;

 protected:
  ~create_sent() = default;
};

/// Effects: creates `lock_path` (and missing parents) as container nodes if missing, then an
/// ephemeral-sequential node `lock_path/prefix<seq>` holding `data`, and sends the listing of
/// `lock_path` right behind the create, without waiting for the create's reply (the server serves a
/// session's requests in order, so the listing already shows the new node): one round trip instead
/// of two. When the create fails or its outcome is unknown (connection loss), creates one request
/// at a time, finding a node whose create's outcome was unknown by its prefix after reconnecting
/// and adopting it only if it belongs to this session.
/// `fresh_likely`: the lock node may well be missing (a lock's, not a semaphore's, whose node is
/// made when it is opened): on a path this session has not used, the lock node and the contender
/// may then be created in one transaction (no ACL check: the lock node is ours).
/// `lock_data`: for a semaphore, its lease count ("leases=N"): a missing semaphore node (removed
/// while no one used it) is created again storing it, not as a container; empty for a lock.
/// Returns: the node and the listing (nullopt: list again), or nullopt if `deadline` passed
/// (nothing left behind). Adds the number of requests sent to `*sent`, if given. Calls
/// `turn->sent()`, if given, once the contender's create is handed to the client (or will not be).
/// Throws: std::system_error: session_expired, session_closed, or the server's refusal (e.g.
/// no_auth), naming the lock path; for a semaphore node made again meanwhile with another lease
/// count, lease_count_mismatch.
std::optional<queued_node> create_and_list(session& s, const std::string& lock_path, const std::string& prefix,
                                           std::string_view data, clock::time_point deadline,
                                           std::size_t* sent = nullptr, create_sent* turn = nullptr,
                                           bool fresh_likely = false, std::string_view lock_data = {});

/// Returns: the children of `path` (none if it is missing: then `*missing`, if given, is set and no
/// watch is armed), arming a children watch that wakes `watcher`, if given; nullopt if `deadline`
/// passed. `*data_version`, if given, receives the node's data version (with the same reply).
/// Throws: std::system_error: session_expired, session_closed, or the server's refusal, naming `path`.
std::optional<name_list> list_children(session& s, const std::string& path,
                                       const std::shared_ptr<wake_target>& watcher, clock::time_point deadline,
                                       bool* missing = nullptr, std::int32_t* data_version = nullptr);

/// A semaphore node's lease count N and the data version it was read at.
struct lease_count {
  std::size_t leases = 0;    ///< N
  std::int32_t version = -1;  ///< the node's data version
};

/// Returns: the lease count the semaphore node `path` stores now, with its version (one request;
/// waits through a disconnection until `deadline`); nullopt if `deadline` passed first; a count
/// of 0 if the node is gone and `gone_ok`.
/// Throws: std::system_error: errc::path_kind_mismatch if it stores no lease count (or is gone,
/// unless `gone_ok`: a semaphore's node stands while a contender of ours is under it); session or
/// server failures.
std::optional<lease_count> read_lease_count(session& s, const std::string& path, clock::time_point deadline,
                                            bool gone_ok = false);

/// Effects: stores `leases` as the lease count of the semaphore node `path` with a versioned write
/// (read, then set at that version, again if another change came between: concurrent changes each
/// apply whole), making the node with it if it is missing. Returns: the count it stored before (0 if
/// it was missing). Throws: std::system_error: errc::path_kind_mismatch if the node is not a
/// semaphore's; operation_timeout after connect_timeout without a connection; session or server
/// failures (no_auth without WRITE on the node).
std::size_t store_lease_count(session& s, const std::string& path, std::size_t leases);

/// What a node watch found.
enum class node_seen {
  gone,    ///< the node does not exist (no watch was armed)
  present  ///< it exists (watch armed)
};

/// The lock of the small objects a pending acquire keeps (its wake relay, its waiter, its hold
/// guard), held for a few instructions at a time: one int, where std::mutex takes 40 bytes (a
/// thousand pending acquires keep three each). Futex-style, as the I/O loop's recursive_lock: 0
/// free, 1 locked, 2 locked with waiters; a waiter sleeps in the kernel (the futex call itself, not
/// std::atomic::wait: libstdc++'s wait spins with sched_yield() first, and with 32 sessions'
/// callers and loops on two cores each yield was a context switch). Lockable; not recursive (the
/// I/O loop's recursive_lock adds the owner).
class small_lock {
 public:
  small_lock() = default;
  small_lock(const small_lock&) = delete;
  small_lock& operator=(const small_lock&) = delete;
  /// Effects: blocks until it holds the lock. Never throws.
  void lock() noexcept {
    int c = 0;
    if (state_.compare_exchange_strong(c, 1, std::memory_order_acquire)) return;
    if (c != 2) c = state_.exchange(2, std::memory_order_acquire);
    while (c != 0) {
      futex(FUTEX_WAIT_PRIVATE, 2);
      c = state_.exchange(2, std::memory_order_acquire);
    }
  }
  /// Returns: whether it took the lock (it was free). Never blocks; never throws.
  bool try_lock() noexcept {
    int c = 0;
    return state_.compare_exchange_strong(c, 1, std::memory_order_acquire);
  }
  /// Effects: lets the lock go; wakes one waiter if any. Never throws.
  void unlock() noexcept {
    if (state_.exchange(0, std::memory_order_release) == 2) futex(FUTEX_WAKE_PRIVATE, 1);
  }

 private:
  void futex(int op, int value) noexcept {
    static_assert(sizeof(std::atomic<int>) == sizeof(int));
    ::syscall(SYS_futex, reinterpret_cast<int*>(&state_), op, value, nullptr, nullptr, 0);
  }
  std::atomic<int> state_{0};
};

/// Where the watches of one waiting acquire deliver their wake-ups: the waiter its thread blocks on
/// now (a wake-up policy may give every wait a fresh one). Thread-safe.
class wake_relay {
 public:
  /// Effects: wakes the current waiter, if any. Never throws.
  void wake() noexcept {
    std::shared_ptr<wake_target> t;
    {
      std::lock_guard lk{mu_};
      t = target_;
    }
    if (t) t->wake();
  }
  /// Effects: wake-ups from now on go to `t` (none: to nobody).
  void point_at(std::shared_ptr<wake_target> t) noexcept {
    std::lock_guard lk{mu_};
    target_ = std::move(t);
  }

 private:
  small_lock mu_;
  std::shared_ptr<wake_target> target_;
};

/// One watch of a waiting acquire, on a contender ahead or on the lock node's children: remembers
/// that it fired (and whether because its node was deleted) and wakes the acquire.
class watch_slot final : public wake_target {
 public:
  /// Effects: a slot for `watched` (a node, or the lock node for a children watch) waking `relay`.
  watch_slot(shared_path watched, std::shared_ptr<wake_relay> relay)
      : path(std::move(watched)), relay_(std::move(relay)) {}
  /// Effects: marks the slot fired, then wakes the acquire; called by the watch (or when the
  /// session ends). Never blocks for long; never throws.
  void wake() noexcept override {
    fired_.store(true, std::memory_order_release);
    relay_->wake();
  }
  /// Effects: as wake(), for a watch that fired because its node was deleted (the session's watch
  /// registry calls it instead of wake() on a deletion). Never throws.
  void wake_deleted() noexcept {
    deleted_.store(true, std::memory_order_relaxed);  // published by wake()'s release
    wake();
  }
  /// Effects: as wake(), for a watch whose request failed with `rc` (no watch is armed). Never throws.
  void wake_failed(int rc) noexcept {
    failure_.store(rc, std::memory_order_relaxed);  // published by wake()'s release
    wake();
  }
  /// Effects: records that its waiter stopped waiting on it (before it drops the watch).
  void mark_dropped() noexcept { dropped_.store(true, std::memory_order_release); }
  /// Returns: whether its waiter stopped waiting on it.
  bool dropped() const noexcept { return dropped_.load(std::memory_order_acquire); }
  /// Returns: whether the watch fired.
  bool fired() const noexcept { return fired_.load(std::memory_order_acquire); }
  /// Returns: whether it fired because its node was deleted (once fired() says it fired).
  bool deleted() const noexcept { return deleted_.load(std::memory_order_relaxed); }
  /// Returns: the C client's code of the failed request that fired it, or 0 (once fired() says it fired).
  int failure() const noexcept { return failure_.load(std::memory_order_relaxed); }
  /// The watched path (shared with the session's watch registry: watched_path).
  const shared_path path;
  /// For the data watch of a semaphore's node (zklock.detail:rules, semaphore_rule::version): the
  /// data version its waiter's lease count was read at, set before it is armed; if the node's
  /// version is another by then, the watch's reply fires the slot as a change. -1: a contender's.
  std::int32_t expect_version = -1;

 private:
  std::shared_ptr<wake_relay> relay_;
  std::atomic<bool> fired_{false};
  std::atomic<bool> deleted_{false};
  std::atomic<int> failure_{0};
  std::atomic<bool> dropped_{false};
};

class hold_guard;

/// A waiter's own node and the guard whose watch on it arm_watches arms with the slots' (the guard's
/// watch claimed: hold_guard::claim_watch).
struct own_watch {
  const held_node& node;
  const std::shared_ptr<hold_guard>& guard;
};

/// Effects: arms a data watch on the path of each of `slots` (waking that slot) on the session's
/// generation `generation` (the waiter's node's: a watch on a later session's handle would wait
/// for contenders ahead of a node that went with its session), sending every request at once and
/// waiting for none of their replies (the waiter waits for its watches anyway): a reply that finds
/// the node gone wakes the slot as its deletion would (wake_deleted: no watch is armed); a request
/// that fails wakes it with the failure (wake_failed; see watch_refused). A semaphore's node
/// (expect_version >= 0) is watched by one watch per session, kept armed between waits and shared
/// by the session's waiters on it (watch_registry::join_sticky): a slot that finds it armed sends
/// nothing, and fires at once if it was armed at another data version than the slot's.
/// With `own` (a waiter's first watches), our own node's watch is armed first, as watch_own_node
/// does, in the same request as the slots' where the C client has zoo_aset_data_watches (one
/// request for them all: the server arms each watch whose node stands unchanged since our node was
/// created, and sends the event of one gone or changed before the reply); the guard then counts as
/// armed once the server took the request.
/// Returns: the requests sent.
/// Throws: std::system_error: session_expired or session_closed if generation `generation` is
/// over; std::bad_alloc (then none of the slots is watched). Our own node's watch is sent (or
/// recorded not armed) either way.
std::size_t arm_watches(session& s, std::uint64_t generation, const std::vector<std::shared_ptr<watch_slot>>& slots,
                        const own_watch* own = nullptr);

/// Effects: for a watch request on `path` that failed with the C client's code `rc`
/// (watch_slot::failure): returns if the waiter may list again and learn there what happened (a
/// lost connection: the listing waits for the next; an ended session: the listing throws it).
/// Throws: std::system_error: the server's refusal (e.g. errc::no_auth), naming `path`.
void watch_refused(std::string_view path, int rc);

/// Effects: `watcher` stops waiting on its watch of `path`; if it was the group's last waiter, the
/// watch is removed from the server and the client. Never throws.
void drop_watch(session& s, std::string_view path, bool children, const wake_target* watcher) noexcept;

/// Returns: the path `parent`/`name` (`name` empty: `parent`), shared with the session's data watch
/// of that node if one is armed or on its way (a contender ahead that another waiter of the session
/// watches, or a waiter's own node), else a new copy; what a watch slot keeps of the node it
/// watches. Throws: std::bad_alloc.
shared_path watched_path(session& s, std::string_view parent, std::string_view name = {});

/// Effects: deletes a contender node we own; if the connection is down, the session keeps retrying
/// in the background until it succeeds or the session ends. Returns: the server's refusal (e.g.
/// errc::no_auth: the lock node's ACL changed under us; the node then stays until the session
/// ends), else an empty code (deleted, already gone, or to be sent or retried in the background).
/// Never throws.
std::error_code release_node(session& s, const held_node& n) noexcept;


/// Effects: runs `f` at `at` on the session's hold-timer thread (started by the first timer), with
/// no lock held; `f` must not wait on the network. Returns: an id for cancel_hold_timer; 0 if the
/// session is closed (then `f` never runs). Throws: std::bad_alloc, std::system_error (the thread).
std::uint64_t schedule_hold_timer(session& s, clock::time_point at, std::function<void()> f);

/// Effects: the timer `id` (of schedule_hold_timer) will not run, unless it runs now. Never throws.
void cancel_hold_timer(session& s, std::uint64_t id) noexcept;

/// Returns: true unless a release of ours under `lock_path` is still waiting for its delete's reply
/// and this session's next acquire there should queue behind that reply (settle_before_requeue);
/// then false, and `w`, if given, is woken when a release of the session settles.
bool release_settled(session& s, const std::string& lock_path, const std::shared_ptr<wake_target>& w);

/// Returns: true once a generation of `s` later than `generation` is connected; false if none is
/// yet (then `w`, if given, is woken at the session's next change of state, of re-establishment,
/// or at close). The one test of the waits for the next session (zklock:algorithm's next_session).
/// Throws: errc::session_closed after close(); errc::session_expired if no next session will come:
/// reestablish_after_expiry is off, or re-establishing was refused for good (auth, chroot).
bool next_session_ready(session& s, std::uint64_t generation, const std::shared_ptr<wake_target>& w);

/// Returns: a token that fires when the session generation `generation` loses its holds (expiry,
/// a suspension longer than the loss tolerance, close); already fired if that generation is over.
std::stop_token loss_token(const session& s, std::uint64_t generation);

/// Effects: calls request_stop() on `stop` on the session's own thread (soon, not now).
void run_on_session_thread(session& s, std::stop_source stop) noexcept;

/// Effects: deletes our node `n` without waiting for the reply (queued for the session's worker
/// while the connection is down; nothing if its session is gone, which took it along). For the
/// hold timers and revocations, which never wait on the network. Never throws.
void release_node_in_background(session& s, const held_node& n) noexcept;

/// The loss signal of one hold: fires when its session generation is lost, or (once watched) when
/// its node is deleted by someone else. Quiet after release(). A waiter may arm the node watch
/// before it is granted (see watch_own_node): then the guard also tells the engine, before the
/// grant, whether its node still stands. Its revocation signal fires when, once granted, its node's
/// data is a revocation request (seen by the node watch: as it is armed, and at each data change,
/// after which the watch is armed again), unless the hold's on_revoke policy is `ignore`.
class hold_guard final : public wake_target, public std::enable_shared_from_this<hold_guard> {
 public:
  /// Effects: links the guard to `session_loss` (it fires with it). Throws: std::bad_alloc.
  hold_guard(session& s, std::stop_token session_loss) : s_(s), link_(std::move(session_loss), stopper{&source_}) {}
  /// Effects: as above, watching the node `n` from the start (a waiter's own node, which the guard
  /// made at its first wait takes over: see node()). Throws: std::bad_alloc.
  hold_guard(session& s, std::stop_token session_loss, held_node n)
      : s_(s), node_(std::move(n)), has_node_(true), link_(std::move(session_loss), stopper{&source_}) {}
  /// Returns: whether it was made watching a node (the constructor above).
  bool has_node() const noexcept { return has_node_; }
  /// Returns: the node it was made watching (has_node()); it never changes, so it is read without
  /// the lock.
  const held_node& node() const noexcept { return node_; }
  /// Effects: records the node the watch is on (before it is armed).
  void watching(const held_node& n) {
    std::lock_guard lk{node_mu_};
    if (node_.path.empty()) node_ = n;
  }
  /// Returns: the node the watch is on (empty path: not watched yet).
  held_node watched_node() const {
    std::lock_guard lk{node_mu_};
    return node_;
  }
  /// Effects: the node's data was read as `data` (arming or re-arming its watch): a revocation
  /// request if it is the marker. Before the grant it waits for granted(). Never throws.
  void data_seen(std::string_view data) noexcept {
    if (!is_revocation_request(data)) return;
    asked_.store(true, std::memory_order_release);
    if (granted_.load(std::memory_order_acquire)) act_on_request();
  }
  /// Effects: the hold is granted, with the policy `p` for revocation requests; acts on a request
  /// seen before. Never throws.
  void granted(on_revoke p) noexcept {
    policy_.store(p, std::memory_order_relaxed);
    granted_.store(true, std::memory_order_release);
    if (asked_.load(std::memory_order_acquire)) act_on_request();
  }
  /// Returns: the policy the hold was granted with.
  on_revoke policy() const noexcept { return policy_.load(std::memory_order_relaxed); }
  /// Returns: the revocation signal (made on the first call: most holds never ask for it; fired
  /// at once if the request was acted on before). Throws: std::bad_alloc.
  std::stop_token revocation_token() const {
    std::lock_guard lk{node_mu_};
    if (!revoke_.stop_possible()) {
      revoke_ = std::stop_source{};
      if (revoke_fired_) revoke_.request_stop();
    }
    return revoke_.get_token();
  }
  /// Returns: whether a revocation request was seen (whatever the policy did with it).
  bool revocation_asked() const noexcept { return asked_.load(std::memory_order_acquire); }
  /// Effects: the node's watch fired (deleted or changed by someone else, or session ended): marks
  /// the guard fired at once, and fires the token on the session's thread (so users' stop callbacks
  /// never run on ZooKeeper's). Does nothing after release().
  void wake() noexcept override {
    if (released_.load(std::memory_order_acquire)) return;
    fired_.store(true, std::memory_order_release);
    run_on_session_thread(s_, source_);
  }
  /// Effects: from now on nothing fires (the hold was released by its owner, or never granted).
  void release() noexcept { released_.store(true, std::memory_order_release); }
  /// Returns: whether release() was called.
  bool released() const noexcept { return released_.load(std::memory_order_acquire); }
  /// Returns: the token users see.
  std::stop_token token() const noexcept { return source_.get_token(); }
  /// Returns: whether the loss was signalled (the token fired).
  bool lost() const noexcept { return source_.stop_requested(); }
  /// Returns: whether the node watch fired or the session ended; set at once on ZooKeeper's
  /// thread, before the token fires.
  bool fired() const noexcept { return fired_.load(std::memory_order_acquire); }
  /// Returns: true for the one caller that arms the node watch (none is armed or being armed).
  bool claim_watch() noexcept {
    auto expected = watch_state::none;
    if (!watch_.compare_exchange_strong(expected, watch_state::pending)) return false;
    claims_.fetch_add(1, std::memory_order_acq_rel);
    return true;
  }
  /// Returns: how many times the node watch was claimed (right after a claim: that claim's ticket).
  unsigned watch_claims() const noexcept { return claims_.load(std::memory_order_acquire); }
  /// Effects: as watch_result, for the request of the claim `ticket` (watch_claims), unless the watch
  /// was claimed again since: an event before that request's reply (zoo_aset_data_watches sends a
  /// changed node's event first) had it armed again by another request. On the handle's loop
  /// thread, where the events run too.
  void watch_result_for(unsigned ticket, bool armed) noexcept {
    if (claims_.load(std::memory_order_acquire) != ticket) return;
    auto expected = watch_state::pending;
    watch_.compare_exchange_strong(expected, armed ? watch_state::armed : watch_state::none);
  }
  /// Returns: whether the node watch is armed on the server (it stays so until it fires).
  bool watch_armed() const noexcept { return watch_.load(std::memory_order_acquire) == watch_state::armed; }
  /// Effects: records the outcome of arming the node watch: armed, or not (then it may be claimed again).
  void watch_result(bool armed) noexcept {
    watch_.store(armed ? watch_state::armed : watch_state::none, std::memory_order_release);
  }

 private:
  /// Effects: once per hold, unless released: fires the revocation signal (not for `ignore`) and,
  /// for `release`, ends the hold: the loss signal fires and the node is deleted.
  void act_on_request() noexcept {
    if (released() || acted_.exchange(true)) return;
    const on_revoke p = policy();
    if (p == on_revoke::ignore) return;
    std::stop_source signal{std::nostopstate};
    {
      std::lock_guard lk{node_mu_};
      revoke_fired_ = true;
      signal = revoke_;  // none yet: revocation_token() makes it fired
    }
    if (signal.stop_possible()) run_on_session_thread(s_, std::move(signal));
    if (p != on_revoke::release) return;
    try {
      const held_node n = watched_node();
      wake();
      if (!n.path.empty()) release_node_in_background(s_, n);
    } catch (...) {  // allocation failure: the revoker forces it after its grace
    }
  }
  enum class watch_state : unsigned char { none, pending, armed };
  struct stopper {
    std::stop_source* s;
    void operator()() const noexcept { s->request_stop(); }
  };
  session& s_;
  std::stop_source source_;
  mutable small_lock node_mu_;
  mutable std::stop_source revoke_{std::nostopstate};  // made by revocation_token() (node_mu_)
  bool revoke_fired_ = false;                          // act_on_request fired it (node_mu_)
  held_node node_;  // the node watched (guarded by node_mu_, unless has_node_: then set once, by the constructor)
  const bool has_node_ = false;
  std::atomic<on_revoke> policy_{on_revoke::notify};
  std::atomic<bool> granted_{false}, asked_{false}, acted_{false};
  std::atomic<bool> released_{false};
  std::atomic<bool> fired_{false};
  std::atomic<watch_state> watch_{watch_state::none};
  std::atomic<unsigned> claims_{0};
  std::stop_callback<stopper> link_;  // after source_: it may fire while being constructed
};

/// Effects: arms a data watch on the held node `n` waking `g` (fires `g` at once if `n` is gone),
/// and waits for the reply (up to the session's connect_timeout). `g` must have been claimed
/// (claim_watch). Never throws: a session that ended fires `g`.
void watch_held_node(session& s, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept;

/// Effects: as watch_held_node for a contender that still waits, but only sends the request: the
/// reply arrives (and records g.watch_result, or fires `g` if the node is gone) before the reply
/// of any request this session sends later, and before any event those requests trigger. `g` must
/// have been claimed. Never throws (if it cannot be sent, the watch is simply not armed).
void watch_own_node(session& s, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept;

/// Returns: whether the session that created `n` is still the live one (not expired, not replaced).
bool session_alive_for(const session& s, const held_node& n) noexcept;

/// Effects: makes sure the semaphore node `path` exists and stores `leases`. Returns: the data
/// version it stores them at.
/// Throws: std::system_error(errc::lease_count_mismatch) if it stores another count,
/// errc::path_kind_mismatch if it stores no lease count (a lock's path, or another node).
std::int32_t ensure_semaphore_node(session& s, const std::string& path, int leases);

/// Effects: counts a semaphore object of session `s` on `path` (its waiters share one watch on the
/// node, kept armed between waits while an object of the session on that path lives). Never throws
/// but std::bad_alloc.
void open_semaphore_watch(session& s, const std::string& path);
/// Effects: undoes one open_semaphore_watch; the last object of the session on `path` removes the
/// node's watch unless a waiter still waits on it (the last to leave then does). Never throws.
void close_semaphore_watch(session& s, const std::string& path) noexcept;

/// A semaphore's stored lease count and the permits held under it, read together.
struct lease_usage {
  std::size_t max = 0;   ///< the lease count its node stores (0: the node is missing)
  std::size_t held = 0;  ///< the permits its holders take (the leases at the head that fit in max)
};

/// Returns: the lease count the semaphore node `path` stores and how many permits are held under
/// it (two requests: its data, then its children). Waits through a disconnection for up to the
/// session's connect_timeout.
/// Throws: std::system_error: errc::path_kind_mismatch if the node stores no lease count,
/// operation_timeout after that wait, session or server failures.
lease_usage read_lease_usage(session& s, const std::string& path);

/// Effects: reads the lock node `lock_path` (one request; waits through a disconnection until
/// `deadline`). Returns: false if `deadline` passed first. Throws: std::system_error
/// (errc::path_kind_mismatch) if it stores a lease count: it is a semaphore's node; session or
/// server failures.
bool check_not_semaphore(session& s, const std::string& lock_path, clock::time_point deadline);

}  // namespace zklock::detail
