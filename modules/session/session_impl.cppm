// SPDX-License-Identifier: Apache-2.0
// zklock:session_impl — the state behind a zklock::session, shared by the session layer's units.
//
// An implementation partition: imported only by modules/session/*.cpp, never by the primary
// interface, and built from a private file set, so it is neither installed nor visible to
// importers of zklock (nor is the C client it names). A session is made of parts, each of which
// owns its fields and its lock:
//   state_machine       state, generation, session id, timeout, closed, the listeners' event queue,
//                       the loss signal, the reopen flags, the waiters of the next change, and the
//                       session worker's inbox (what it does next: next_work)
//   background_deletes  deletes queued for the worker, background requests in flight, settling releases
//   listener_list       the state listeners, called by one thread at a time
//   watch_registry      the watch groups: one C-client watcher and one server watch per (path, kind)
//   client_handle       the C client's handle of the current generation
//   session_reaper      the thread that closes given-up sessions on the server
//   hold_timers         the thread that ends holds at their bounds (hold_bounds), started on first use
// session_impl holds them and does what takes several (open and close the handle, the worker).
// Lock order: listener_list's lock first (held while listeners run, and they may call anything);
// then client_handle's (reopen_mu before mu); then one of the others, never two of them together.
// Which unit defines what:
//   session.cpp         class session, the state machine, the listeners, shutdown
//   handle.cpp          opening and closing the C client's handle, its session watcher
//   session_thread.cpp  the session worker (events, loss clock, re-establishment, retries), the reaper
//   background.cpp      deletes sent without waiting (background release, retries), release_node
//   watches.cpp         the watch registry, list/watch/drop, own-node watches
//   contenders.cpp      contender creation (pipelined, protected), ACLs, containers
//   nodes.cpp           semaphore node, read_node, create_ephemeral (zklock:nodes)
//   client_log.cpp      the C client's log routing
//   runner.cpp          the runner of asynchronous acquires (zklock:step), started on first use
//   timers.cpp          hold_timers
module;
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <functional>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock:session_impl;
import zklock.detail;
import :errors;
import :session;
import :operations;
import :step;

namespace zklock::detail {

struct session_impl;

/// The context of a handle's watchers: which session, which generation of it. The session watcher
/// gets it as its context; node watchers find it with zoo_get_context (their own context is a
/// watch group's id).
/// Its registry of requests in flight (see reply_state) lists every request sent on the handle and
/// not answered yet: closing the handle answers the rest.
struct reply_state;
class io_loop;
struct handle_ctx {
  handle_ctx(session_impl* s, std::uint64_t g) : impl{s}, generation{g} {}
  session_impl* impl;
  std::uint64_t generation;
  std::mutex requests_mu;
  reply_state* requests = nullptr;  ///< in flight on this handle (an intrusive list)
  io_loop* loop = nullptr;          ///< the loop whose handle this is the context of
};

// ---- requests and their replies (replies.cpp) ------------------------------------------------------

/// What the reply to one request carries: the fields its kind of request fills in.
struct reply {
  std::string value;               ///< a create's path; a read's data
  bool no_data = false;            ///< a read found the node's data null
  struct Stat stat {};             ///< the node's stat, when the reply has one
  name_list names;                 ///< a listing's children
  std::vector<acl_entry> acl;      ///< an ACL read
};

/// One request in flight, sent with the C client's asynchronous call and waited for on the caller's
/// thread with no lock held (session_impl::request). The client's completion fills it in; or, if the
/// handle is closed first, close_handle answers it with ZCLOSING (the client never answers a request
/// that reaches it after its loop ended with an expiry: a synchronous call would wait for ever,
/// and hold the handle open while it did). The completion's data is the state itself, kept alive by
/// `self` until it is answered.
struct reply_state {
  std::mutex m;
  std::condition_variable cv;
  fiber* parked = nullptr;  ///< the step waiting for it on its fiber (await_reply), if any
  std::uint64_t ticket = 0;  ///< the ticket of that fiber's park
  bool done = false;
  int rc = ZSYSTEMERROR;
  reply r;
  std::shared_ptr<reply_state> self;  ///< while in flight
  std::shared_ptr<void> keep;         ///< what the client writes into before the completion (a multi's results)
  handle_ctx* owner = nullptr;        ///< whose registry lists it, while in flight
  reply_state* prev = nullptr;
  reply_state* next = nullptr;
};

/// The completions of the requests sent through session_impl::send_locked (their data is the
/// reply_state the send gave the call).
namespace reply_to {
void on_void(int rc, const void* data);
void on_string(int rc, const char* value, const void* data);
void on_string_stat(int rc, const char* value, const struct Stat* st, const void* data);
void on_stat(int rc, const struct Stat* st, const void* data);
void on_data(int rc, const char* value, int len, const struct Stat* st, const void* data);
void on_names(int rc, const struct String_vector* names, const void* data);
void on_names_stat(int rc, const struct String_vector* names, const struct Stat* st, const void* data);
void on_acl(int rc, struct ACL_vector* acl, struct Stat* st, const void* data);
}  // namespace reply_to

/// Effects: answers every request still listed in `ctx` with `rc` (their handle is closed: the
/// client will call none of their completions).
void answer_unanswered(handle_ctx& ctx, int rc) noexcept;

/// A node (or every child of a lock node that starts with a prefix) we must delete once connected.
struct pending_delete {
  std::string path;        // the node, or the lock node when `prefix` is set
  std::string prefix;      // non-empty: delete children of `path` starting with it
  std::uint64_t generation;
};

/// The waiters a session wakes once: of its next change of state, of a settling release, of a watch.
using waiters = waiter_list<wake_target>;

// ---- return codes and messages -------------------------------------------------------------------

static_assert(meaning_of(ZCONNECTIONLOSS) == rc_meaning::unknown_outcome &&
              meaning_of(ZOPERATIONTIMEOUT) == rc_meaning::unknown_outcome &&
              meaning_of(ZSESSIONEXPIRED) == rc_meaning::session_expired &&
              meaning_of(ZINVALIDSTATE) == rc_meaning::session_expired &&
              meaning_of(-12) == rc_meaning::session_expired &&  // UNKNOWNSESSION
              meaning_of(ZCLOSING) == rc_meaning::session_closed && meaning_of(ZOK) == rc_meaning::answered);

/// Returns: the parent of the absolute path `path` ("/a/b" -> "/a", "/a" -> "/"), a view of it.
inline std::string_view parent_of(std::string_view path) noexcept {
  const auto slash = path.rfind('/');
  return path.substr(0, slash == 0 || slash == std::string_view::npos ? 1 : slash);
}

/// Names a call in messages: `call` and then `path`, e.g. {"zklock: listing ", "/locks/x"}, and
/// what the call needs of the ACLs: the permission `needs` on the node `needs_on` (ZooKeeper checks
/// READ on the node read, CREATE and DELETE on the parent), e.g. {..., "READ", "/locks/x"}, which a
/// refusal's message names. Views, cheap to pass: the text is made only when something is thrown.
struct call_name {
  std::string_view call;
  std::string_view path{};
  std::string_view needs{};     ///< e.g. "CREATE"; empty: not named
  std::string_view needs_on{};  ///< the node it is checked on
  /// Returns: the name, e.g. "zklock: listing /locks/x".
  std::string text() const {
    std::string t{call};
    t += path;
    return t;
  }
  /// Returns: the name, and for a refusal for lack of permission (rc ZNOAUTH) what the call needs,
  /// e.g. "zklock: listing /locks/x (needs READ permission on /locks/x)".
  std::string text(int rc) const {
    std::string t = text();
    if (rc == ZNOAUTH && !needs.empty()) {
      t += " (needs ";
      t += needs;
      t += " permission on ";
      t += needs_on;
      t += ')';
    }
    return t;
  }
};

/// Returns: whether `rc` leaves a request's outcome unknown (it may or may not have been served).
inline bool unknown_outcome(int rc) noexcept { return meaning_of(rc) == rc_meaning::unknown_outcome; }

/// Throws: std::system_error with the C client's code `rc` (the zklock category mirrors it), naming
/// `what` (and for ZNOAUTH the permission it needs).
[[noreturn]] inline void fail(int rc, const call_name& what) { throw_error(static_cast<errc>(rc), what.text(rc)); }

/// The one mapping of a C-client return code, for the call `what` that got it.
/// Returns: true if the server answered (`rc` is its answer: ZOK, or a refusal for the caller to
/// judge, else fail()); false if the outcome is unknown (ZCONNECTIONLOSS, ZOPERATIONTIMEOUT: wait
/// for the connection and send again, or find out what happened).
/// Throws: errc::session_expired (ZSESSIONEXPIRED, ZINVALIDSTATE), errc::session_closed (ZCLOSING).
inline bool answered(int rc, const call_name& what) {
  switch (meaning_of(rc)) {
    case rc_meaning::answered: return true;
    case rc_meaning::unknown_outcome: return false;
    case rc_meaning::session_expired: throw_error(errc::session_expired, what.text());
    case rc_meaning::session_closed: throw_error(errc::session_closed, what.text());
  }
  return true;
}

/// Effects: passes one line to the log handler, if any (client_log.cpp). The C client's log callback.
void zk_log_line(const char* message);

/// Effects: sets the C client's process-wide log level from whether a log handler is set
/// (client_log.cpp): called before each handle is opened.
void refresh_client_log_level() noexcept;

// ---- the state machine (session.cpp; its handle side: handle.cpp; its worker side: session_thread.cpp)

/// A snapshot of a session's state machine (state_machine::view).
struct state_view {
  session_state state = session_state::connecting;
  std::uint64_t generation = 0;
  std::int64_t id = 0;  ///< the server's session id (0 while a new handle connects)
  std::chrono::milliseconds negotiated{0};
  bool closed = false;

  /// Returns: whether generation `g` is the live one: not closed, not replaced, not expired.
  bool live(std::uint64_t g) const noexcept {
    return !closed && generation == g && state != session_state::expired;
  }
  /// The one live-session check. Throws: errc::session_closed after close(); errc::session_expired
  /// if generation `g` is over (expired, or replaced by a later one); both naming `what`.
  void check_live(std::uint64_t g, const call_name& what) const {
    if (closed) throw_error(errc::session_closed, what.text());
    if (generation != g || state == session_state::expired) throw_error(errc::session_expired, what.text());
  }
};

/// Where a session is (its state, generation, id, timeout, closed), and what follows from it: the
/// event queue the worker delivers to the listeners, the loss signal of the generation, the loss
/// clock of a suspension, re-establishment after expiry, the waiters of the next change; and the
/// session worker's inbox (next_work). Thread-safe: one lock, its own.
class state_machine {
 public:
  /// Effects: a machine in `connecting`, generation 0, for a session opened with `o` (kept by reference).
  explicit state_machine(const session_options& o) noexcept : opts_(o) {}

  // -- reading it (any thread) --

  /// Returns: a snapshot.
  state_view view() const noexcept;
  /// Effects: state_view::check_live on the current state. Throws: as it.
  void check_live(std::uint64_t g, const call_name& what) const;
  /// Returns: the current generation, if live. Throws: as check_live.
  std::uint64_t live_generation(const call_name& what) const;
  /// Effects: waits until connected, or until generation `g` is over. Returns: false if `deadline`
  /// passed first. Throws: as check_live(g, what).
  bool wait_connected(clock::time_point deadline, std::uint64_t g, const call_name& what);
  /// Effects: waits until the state is `s` or `timeout` passes. Returns: whether it is `s`.
  bool wait_for(session_state s, std::chrono::milliseconds timeout) const;
  /// Returns: true once a generation later than `g` is connected; false if none is yet (then `w`,
  /// if given, is woken at the next change of state, of re-establishment, or at close).
  /// Throws: errc::session_closed after close(); errc::session_expired if no next session will
  /// come (reestablish_after_expiry is off, or re-establishing was refused for good).
  bool next_session_ready(std::uint64_t g, const std::shared_ptr<wake_target>& w);
  /// Returns: the token of generation `g`'s loss; already fired if that generation is over.
  std::stop_token loss_token(std::uint64_t g) const;

  // -- the handle's side (handle.cpp) --

  /// Effects: the C client reported `state` (a ZOO_*_STATE) for the handle of generation `g`, `zh`:
  /// moves to the state it means, unless that generation is over or the session closed.
  void on_client_state(std::uint64_t g, int state, zhandle_t* zh);
  /// Returns: whether a new handle is wanted: the session expired (or was closed: opening then fails).
  bool reopen_wanted() const noexcept;
  /// Effects: starts the next generation, `connecting`, with a fresh loss signal.
  /// Returns: the loss signal of the generation it replaces, and the new generation.
  /// Throws: errc::session_closed after close().
  std::pair<std::stop_source, std::uint64_t> begin_generation();
  /// How waiting for a new handle's session ended (wait_opened).
  enum class opened { ready, auth_failed, tls_failed, timed_out };
  /// Effects: waits until the new handle is connected, its credentials are refused, its TLS
  /// handshake failed with every server of the connect string, the session is closed (ready: the
  /// next call fails) or `deadline` passes.
  opened wait_opened(clock::time_point deadline);
  /// Effects: the TLS handshake of generation `g`'s handle failed, for `reason` (counted until it
  /// first connects).
  void on_tls_failure(std::uint64_t g, std::string reason);
  /// Returns: the reason of the last TLS handshake that failed.
  std::string tls_failure() const;
  /// Effects: the new handle failed: `closed` if it was the first (the constructor throws), else `expired`.
  void open_failed(bool first);

  // -- the session worker's side (session_thread.cpp) --

  /// What the worker does next (next_work).
  struct work {
    enum class kind { stop, deliver, request_stops, give_up, reopen, send_deletes };
    kind what = kind::stop;
    session_state state = session_state::connecting;  ///< deliver: the change for the listeners
    std::stop_source lost{std::nostopstate};  ///< deliver (an expiry), give_up: request it first
    std::vector<std::stop_source> stops{};    ///< request_stops: to request
    std::uint64_t generation = 0;             ///< send_deletes: the connected generation
  };
  /// Effects: waits until the worker has something to do, in this order: deliver each queued change
  /// (an expiry also fires the loss signal and makes a re-establishment due), request the stops
  /// handed over, re-establish, send the queued deletes once connected; and, while suspended, give
  /// the session up when the loss tolerance has passed (it moves to `expired` then).
  /// Returns: the work; kind::stop once close() began.
  work next_work();
  /// Effects: re-establishing failed: refused for good (auth, chroot; reestablish() may try again)
  /// or to be tried again. Wakes the waiters of the next session.
  void reopen_failed(bool for_good);
  /// Effects: re-establishing was interrupted (allocation failure): try again.
  void reopen_again() noexcept;
  /// Effects: hands `stop` to the worker to request. Returns: false after close() (then nothing is done).
  bool queue_stop(const std::stop_source& stop) noexcept;
  /// Effects: tells the worker that deletes are queued for it (background_deletes::queue).
  void deletes_queued() noexcept;

  // -- closing (session.cpp) --

  /// Effects: marks the session closed and tells the worker to stop. Returns: false if it was already.
  bool close() noexcept;
  /// Returns: the loss signal of the current generation.
  std::stop_source loss() const noexcept;
  /// Effects: wakes and forgets the waiters of the next session (next_session_ready).
  void wake_next_session_waiters() noexcept;
  /// Returns: the changes not delivered to the listeners yet, which it forgets.
  std::deque<session_state> take_events() noexcept;
  /// Effects: moves to `closed` (the last change: close() has told the listeners).
  void finish_close() noexcept;

 private:
  /// Returns: a snapshot (mu_ held).
  state_view view_locked() const noexcept;
  /// Effects: moves to state `s` and queues it for the listeners (mu_ held).
  void post(session_state s);
  /// Returns: how long a suspension may last before the holds count as lost (mu_ held).
  clock::duration loss_tolerance() const;

  /// Where next_work goes on: one pass is wait, then events, stops, reopen, deletes.
  enum class stage { wait, events, stops, reopen, deletes };

  const session_options& opts_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  session_state st_ = session_state::connecting;
  std::uint64_t gen_ = 0;
  std::int64_t sid_ = 0;
  std::chrono::milliseconds negotiated_{0};
  std::size_t tls_failures_ = 0;  // handshakes failed since the generation began, until it connects
  std::string tls_reason_;        // OpenSSL's reason for the last
  bool closed_ = false;
  bool connected_once_ = false;  // on this handle
  bool auth_failed_ = false;     // on this handle
  std::deque<session_state> events_;  // changes not yet delivered to the listeners
  std::stop_source loss_;             // of the current generation: fired when its holds are lost
  clock::time_point suspended_at_{};  // when the current suspension began
  bool reopen_due_ = false;           // expired: open a new handle (after a failed attempt: again)
  bool reopen_refused_ = false;       // the last re-establishment was refused for good (auth, chroot)
  waiters next_waiters_;              // of next_session_ready: woken at every change of state
  // the worker's inbox
  bool stop_worker_ = false;
  std::vector<std::stop_source> stops_;  // to request on the worker (from watch callbacks)
  bool deletes_due_ = false;             // background_deletes has deletes queued for the worker
  stage stage_ = stage::wait;
};

// ---- background deletes (background.cpp) -----------------------------------------------------------

/// The deletes of our own nodes that the caller does not wait for: those queued for the worker
/// (sent once connected), the background requests in flight, and the releases whose reply this
/// session's next acquire of the same lock waits for (settling; see release_settled).
/// Thread-safe: one lock, its own.
class background_deletes {
 public:
  /// Effects: queues `p` for the worker (the caller tells it: state_machine::deletes_queued).
  void queue(pending_delete p);
  /// Returns: the queued deletes, which it forgets.
  std::vector<pending_delete> take() noexcept;

  /// Effects: counts a background request about to be sent; a non-empty `settle` (a lock path)
  /// makes this session's next acquire there wait for its reply (until end_settle).
  void begin(const std::string& settle);
  /// Effects: counts a background request done: its completion ran, or it could not be sent.
  /// Wakes await_idle for the last one (nobody else waits for them: a wake-up per release would
  /// cost a context switch for nothing).
  void end() noexcept;
  /// Effects: waits until no background request is in flight, for up to `timeout`.
  void await_idle(clock::duration timeout) noexcept;

  /// Effects: forgets one settling delete under `lock_path` and wakes the acquires waiting for one.
  void end_settle(const std::string& lock_path) noexcept;
  /// Returns: true unless a delete under `lock_path` is settling; then false, and `w` (if given) is
  /// woken when one settles.
  bool settled(const std::string& lock_path, const std::shared_ptr<wake_target>& w);

 private:
  std::mutex mu_;
  std::condition_variable idle_cv_;
  std::vector<pending_delete> pending_;
  std::size_t inflight_ = 0;  // background requests sent whose completion has not run yet
  bool idle_awaited_ = false;
  // Lock paths of background deletes in flight that this session's next acquire there waits for
  // (one entry per delete), and the acquires waiting for one to settle.
  std::vector<std::string> settling_;
  waiters settle_waiters_;
  std::atomic<std::size_t> settling_count_{0};  // settling_.size(), read without mu_
};

// ---- the listeners (session.cpp) -------------------------------------------------------------------

/// The state listeners of a session. Thread-safe: one lock, its own, held while listeners run (by
/// one thread at a time, which may add or remove listeners without taking it again).
class listener_list {
 public:
  /// Effects: adds `l`. Returns: its id.
  std::uint64_t add(state_listener l);
  /// Effects: removes listener `id` (unknown ids are ignored); waits while listeners run elsewhere.
  void remove(std::uint64_t id) noexcept;
  /// Returns: whether the caller is running a listener right now (and so holds the lock).
  bool in_listener() const noexcept { return dispatcher_.load() == std::this_thread::get_id(); }
  /// Effects: calls every listener with `s`, in the order they were added; a listener removed by
  /// an earlier one is not called, nor is any once `states` is closed (unless `s` is closed, or
  /// `before_close`: a change that happened before close() and is delivered by it).
  /// Exceptions of listeners are swallowed.
  void notify(session_state s, const state_machine& states, bool before_close = false) noexcept;

 private:
  std::mutex mu_;
  std::map<std::uint64_t, state_listener> listeners_;
  std::uint64_t next_ = 1;
  // The thread that holds mu_ to run listeners (none: default id).
  std::atomic<std::thread::id> dispatcher_{};
};

// ---- the watch registry (watches.cpp) --------------------------------------------------------------

/// The watches of one session. Its waiters on one (path, kind) form a group that shares one
/// C-client watcher and one server watch; the watcher's context is the group's id, never a pointer
/// (the C client may call a watcher again on every session event, long after its waiters gave up).
/// A group wakes its live waiters when its watch fires, when the session expires and when the
/// handle is closed. Thread-safe: one lock, its own, held only for bookkeeping and to queue (not
/// wait for) a request, so that the C client's event thread never waits long on it.
class watch_registry {
 public:
  /// Effects: adds `t` to the armed group of (path, children), or to a new one (which keeps a copy
  /// of `path`). Returns: the group's id, the context to arm the watch with.
  std::uint64_t join(std::string_view path, bool children, const std::shared_ptr<wake_target>& t) {
    return join(path, nullptr, children, t);
  }
  /// Effects: as join above; a new group keeps `path` itself (shared, no copy).
  std::uint64_t join(const shared_path& path, bool children, const std::shared_ptr<wake_target>& t) {
    return join(path, &path, children, t);
  }
  /// Returns: the path of the data group of `path`, if one is open (shared: no copy); else a new copy.
  shared_path path_of(std::string_view path);
  /// Effects: removes `t` from the group of (path, children); if it was the last, forgets the group
  /// and calls `remove()` (to remove the watch) before any later join can be sent. Never throws.
  /// A sticky group (join_sticky) keeps its watch when its last waiter leaves while it has a user
  /// (use_sticky).
  template <class Remove>
  void drop(std::string_view path, bool children, const wake_target* t, Remove remove) noexcept {
    std::lock_guard lk{mu_};
    const auto open = open_.find(key{path, children});
    if (open == open_.end()) return;  // fired already
    const auto g = groups_.find(open->second);
    if (!g->second.waiting.remove(t) || (g->second.sticky && users_.contains(path))) return;
    if (g->second.sticky) --sticky_;
    open_.erase(open);  // first: its key views the group's path
    groups_.erase(g);
    remove();
  }
  /// Effects: removes `t` from the data group of `path`, without asking the server (the watch was
  /// not armed). Never throws.
  void leave(std::string_view path, const wake_target* t) noexcept {
    drop(path, false, t, [] {});
  }
  /// Returns: whether a group of (path, children) is armed (or being armed).
  bool watched(std::string_view path, bool children) noexcept {
    std::lock_guard lk{mu_};
    return open_.contains(key{path, children});
  }
  /// What join_sticky found.
  struct sticky_join {
    std::uint64_t id = 0;  ///< the group's id, the context to arm the watch with
    bool send = false;     ///< no watch was armed or on its way: the caller sends the request (or take()s the group)
    bool changed = false;  ///< armed at another data version than the caller's: wake the caller now
    waiters stale;         ///< the waiters of a group armed on an earlier generation, forgotten: wake them
  };
  /// The most sticky groups a session keeps: beyond it, joining a new path forgets an idle one.
  static constexpr std::size_t sticky_bound = 64;
  /// Effects: adds `t` to the sticky data group of `path` on generation `generation` (a semaphore's
  /// node, watched for a change of its lease count: the watch stays armed when its waiters leave,
  /// so that the session's next waiter sends nothing), or to a new one; forgets waiters that are
  /// gone. A new group beyond sticky_bound forgets an idle one first and calls `remove(path)` for
  /// its watch (before any later join can be sent). `version`: the data version the caller read
  /// the node at. Returns: see sticky_join.
  template <class Remove>
  sticky_join join_sticky(const shared_path& path, std::uint64_t generation, std::int32_t version,
                          const std::shared_ptr<wake_target>& t, Remove remove) {
    std::lock_guard lk{mu_};
    auto open = open_.find(key{path, false});
    waiters stale;
    if (open != open_.end()) {
      auto& g = groups_.find(open->second)->second;
      if (!g.sticky || g.generation == generation) {
        g.waiting.remove(nullptr);  // (the waiters that are gone)
        g.waiting.add(t);
        if (!g.sticky) return {open->second, true, false, {}};  // another kind of watch: arm as one-shot
        return {open->second, false, g.version != unknown_version && g.version != version, {}};
      }
      stale = g.waiting.take();
      forget(open);  // armed on an earlier generation's handle, which is gone with its watches
    }
    if (sticky_ >= sticky_bound)
      for (auto it = open_.begin(); it != open_.end(); ++it) {
        auto& g = groups_.find(it->second)->second;
        if (!g.sticky || g.version == unknown_version || (g.waiting.remove(nullptr), !g.waiting.empty())) continue;
        remove(g.path);  // first: `g` goes with forget
        forget(it);
        break;
      }
    const std::uint64_t id = next_++;
    auto& g = groups_.emplace(id, group{path, false, {}, true, generation, unknown_version}).first->second;
    try {
      open_.emplace(key{g.path.view(), false}, id);
      g.waiting.add(t);
    } catch (...) {
      open_.erase(key{g.path.view(), false});
      groups_.erase(id);
      throw;
    }
    ++sticky_;
    return {id, true, false, std::move(stale)};
  }
  /// Effects: counts a user of the sticky group of `path` (a semaphore object): while it has one,
  /// the group keeps its watch when its last waiter leaves. Throws: std::bad_alloc.
  void use_sticky(const std::string& path) {
    std::lock_guard lk{mu_};
    ++users_[path];
  }
  /// Effects: undoes one use_sticky; the last user forgets the group if it has no waiter left and
  /// calls `remove(path)` for its watch (before any later join can be sent). Never throws.
  template <class Remove>
  void unuse_sticky(const std::string& path, Remove remove) noexcept {
    std::lock_guard lk{mu_};
    const auto u = users_.find(path);
    if (u == users_.end() || --u->second != 0) return;
    users_.erase(u);
    const auto open = open_.find(key{path, false});
    if (open == open_.end()) return;
    auto& g = groups_.find(open->second)->second;
    if (!g.sticky || (g.waiting.remove(nullptr), !g.waiting.empty())) return;  // (its last waiter removes it)
    remove();
    forget(open);
  }
  /// Effects: records that the watch of sticky group `id` is armed at data version `version`.
  /// Returns: its waiters, to check against that version (the C client arms the watch with this
  /// reply: later joiners compare their own version).
  std::vector<std::shared_ptr<wake_target>> armed(std::uint64_t id, std::int32_t version);
  /// Effects: forgets group `id` (its watch fired). Returns: its waiters, to wake.
  waiters take(std::uint64_t id) noexcept;
  /// Effects: wakes and forgets every group (the handle is closing or closed, the session closing).
  void wake_all() noexcept;

 private:
  static constexpr std::int32_t unknown_version = -1;  // a sticky watch on its way (data versions are >= 0)
  struct group {
    shared_path path;
    bool children;
    waiters waiting;
    bool sticky = false;             // join_sticky's
    std::uint64_t generation = 0;    // sticky: the generation whose handle armed it
    std::int32_t version = unknown_version;  // sticky: the node's data version when it was armed
  };
  using key = std::pair<std::string_view, bool>;  // (path, children); the path views a group's own
  /// The joins above: a new group keeps `*shared` if given, else a copy of `path`.
  std::uint64_t join(std::string_view path, const shared_path* shared, bool children,
                     const std::shared_ptr<wake_target>& t);
  /// Effects: forgets the open group at `open`. Called with mu_ held.
  void forget(std::map<key, std::uint64_t>::iterator open) noexcept {
    const auto g = groups_.find(open->second);
    if (g->second.sticky) --sticky_;
    open_.erase(open);  // first: its key views the group's path
    groups_.erase(g);
  }

  std::mutex mu_;
  std::unordered_map<std::uint64_t, group> groups_;  // by id = the watcher's context
  std::map<key, std::uint64_t> open_;               // armed groups by (path, kind)
  std::uint64_t next_ = 1;
  std::size_t sticky_ = 0;  // sticky groups in groups_
  std::map<std::string, std::size_t, std::less<>> users_;  // use_sticky's counts by path
};

// ---- the handle, the reaper, the ACL cache ---------------------------------------------------------

/// A recursive mutex owned by the operating system's thread that locks it, whichever fiber runs
/// there: the I/O loop holds it while the client runs completions, and those resume steps of
/// asynchronous acquires on fibers of that thread, which send (so lock it again). Built on
/// small_lock (zklock:operations: an atomic and the futex call) and an owner, which also keeps
/// ThreadSanitizer's view right: it takes a fiber for a thread of its own, and
/// would report a pthread mutex locked again by a fiber of the thread that holds it as a double
/// lock.
class recursive_lock {
 public:
  recursive_lock() = default;
  recursive_lock(const recursive_lock&) = delete;
  recursive_lock& operator=(const recursive_lock&) = delete;
  void lock() noexcept {
    const int me = self();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return;
    }
    lock_.lock();
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
  }
  bool try_lock() noexcept {
    const int me = self();
    if (owner_.load(std::memory_order_relaxed) == me) {
      ++depth_;
      return true;
    }
    if (!lock_.try_lock()) return false;
    owner_.store(me, std::memory_order_relaxed);
    depth_ = 1;
    return true;
  }
  void unlock() noexcept {
    if (--depth_ > 0) return;
    owner_.store(0, std::memory_order_relaxed);
    lock_.unlock();
  }

 private:
  /// Returns: the calling thread's id (never 0).
  static int self() noexcept {
    static std::atomic<int> next{1};
    thread_local const int id = next.fetch_add(1, std::memory_order_relaxed);
    return id;
  }
  small_lock lock_;  // the futex-style lock itself (zklock:operations)
  std::atomic<int> owner_{0};
  int depth_ = 0;  // guarded by the lock
};

/// One handle of the C client (its single-threaded build: zklock's private copy, see
/// cmake/zklockPrivateClient.cmake) and the thread that runs its I/O loop (handle.cpp). The loop
/// polls the socket, reads replies and events and runs their completions and watchers, all on its
/// thread; a request is written to the socket by the thread that makes it (with_handle), so a
/// blocking call crosses one thread (the reply's) and a step of an asynchronous acquire, resumed by
/// its reply on the loop's thread, none. Every call on the handle holds the loop's lock (mu_,
/// recursive: completions send too); the loop lets it go only while it polls.
/// Lock order: mu_, then any of the session's locks (completions and watchers take them), then
/// deferred_mu_. So a thread holding one of the session's locks never waits for mu_: it defers
/// the call instead (defer), and the next call on the handle, or the loop, makes it first.
class io_loop {
 public:
  /// Effects: a loop for generation `g` of session `s` (ctx), no handle yet.
  io_loop(session_impl* s, std::uint64_t g);
  /// Effects: close().
  ~io_loop();
  io_loop(const io_loop&) = delete;
  io_loop& operator=(const io_loop&) = delete;

  handle_ctx ctx;  ///< the context of the handle's watchers, and its requests in flight

  /// Effects: opens the handle (zookeeper_init2 with `watcher` and `context`, which must outlive
  /// it) and starts the loop's thread. Returns: false if the client refused (errno tells why).
  bool open(const std::string& connect, watcher_fn watcher, int timeout_ms, const clientid_t* id, void* context);
  /// Effects: tells the loop to close the handle and end, and waits until it has (the client then
  /// calls no completion or watcher any more). Idempotent. Never on the loop's own thread.
  void close() noexcept;
  /// Effects: calls `f(zh)` holding the loop's lock, zh being the handle, or nullptr once it is
  /// closing; before it, the calls deferred so far. A request it sends goes out at once (the loop
  /// is woken only if the socket could not take all of it).
  /// Returns: what f returns.
  template <class F>
  decltype(auto) with_handle(F&& f) {
    std::lock_guard l{mu_};
    const after_call after{*this};
    run_deferred();
    return f(closing_ ? nullptr : zh_);
  }
  /// Effects: as with_handle, if the loop's lock is free (or the caller holds it); else nothing.
  /// Returns: whether `f` was called.
  template <class F>
  bool try_with_handle(F&& f) {
    std::unique_lock l{mu_, std::try_to_lock};
    if (!l) return false;
    const after_call after{*this};
    run_deferred();
    f(closing_ ? nullptr : zh_);
    return true;
  }
  /// Effects: on the loop's thread, in a completion: makes the calls deferred so far (a thread
  /// that found the loop busy with completions deferred them), so they go out now, not after them.
  void flush_deferred() {
    if (on_loop_thread()) with_handle([](zhandle_t*) {});
  }
  /// Effects: queues `op` to be called with the handle (or nullptr once it is closing) before any
  /// later with_handle's call, or by the loop; takes no lock but its own. Throws: std::bad_alloc.
  void defer(std::function<void(zhandle_t*)> op);
  /// Returns: whether the caller is this loop's thread.
  bool on_loop_thread() const noexcept;

 private:
  struct after_call {
    io_loop& loop;
    ~after_call() { loop.nudge(); }
  };
  void run();
  void run_deferred();
  /// Effects: after a call made off the loop's thread: wakes the loop if the socket did not take
  /// what was sent (the client keeps the rest until the loop sees the socket writable).
  void nudge() noexcept;
  void wake() noexcept;

  recursive_lock mu_;
  zhandle_t* zh_ = nullptr;   // guarded by mu_
  std::shared_ptr<void> sasl_;  // with session_options::sasl: what the handle's SASL callbacks read
  bool sasl_failed_ = false;    // its refusal reported (the loop's thread only)
  bool closing_ = false;      // guarded by mu_
  int fd_ = -1;               // the socket the loop polls, -1 while it runs (guarded by mu_)
  bool polls_write_ = false;  // whether it polls for writing (guarded by mu_)
  int wake_fd_ = -1;          // an eventfd: wakes the loop's poll
  std::atomic<bool> stop_{false};
  std::mutex deferred_mu_;
  std::vector<std::function<void(zhandle_t*)>> deferred_;  // guarded by deferred_mu_
  std::atomic<bool> has_deferred_{false};
  std::thread thread_;
};

/// The C client's handle of the current generation: open_handle replaces it, close_handle closes it.
struct client_handle {
  std::mutex reopen_mu;           ///< one open or close at a time (taken before mu)
  std::shared_mutex mu;           ///< guards loop: shared to copy it; exclusive to replace it
  std::shared_ptr<io_loop> loop;  ///< the handle and its I/O loop (nullptr: none)
  /// Returns: the loop of the current handle, if any (a copy: it stays valid, closed or not).
  std::shared_ptr<io_loop> current() {
    std::shared_lock l{mu};
    return loop;
  }
};

/// Sessions given up locally (a suspension longer than the loss tolerance) whose handle was closed
/// while no server could hear it: the server keeps them, and their ephemeral nodes, until it
/// expires them itself, which after a quorum outage can be a whole timeout after recovery. The
/// reaper attaches to each with its id and password as soon as a server answers and closes it
/// (session_thread.cpp). Thread-safe: one lock, its own; its thread starts at the first add().
class session_reaper {
 public:
  /// Effects: queues `id` to close on the server, through `s`.
  void add(session_impl& s, const clientid_t& id);
  /// Effects: tells the thread to end (it ends after the session it closes now, if any).
  void request_stop() noexcept;
  /// Effects: joins the thread, unless there is none or the caller is it.
  void join() noexcept;

 private:
  void run(session_impl& s);
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<clientid_t> stale_;
  bool stop_ = false;
  std::thread thread_;  // written by add (the worker), joined after the worker
};

/// Lock paths whose ACL lets this session delete its contender nodes (checked once per path:
/// contenders.cpp). A session that queues on many paths keeps one entry per path, so an entry is
/// the path's 128-bit digest (two independent 64-bit hashes), 32 bytes of heap, not the path: two
/// paths with one digest (odds about n² / 2^129 for n paths) would share their check. Thread-safe:
/// one lock, its own.
class path_set {
 public:
  /// Returns: whether `p` is in the set.
  bool contains(std::string_view p) const {
    const digest d = digest_of(p);
    std::lock_guard lk{mu_};
    return set_.contains(d);
  }
  /// Effects: adds `p`.
  void insert(std::string_view p) {
    const digest d = digest_of(p);
    std::lock_guard lk{mu_};
    set_.insert(d);
  }

 private:
  struct digest {
    std::uint64_t a, b;
    bool operator==(const digest&) const = default;
  };
  struct digest_hash {
    std::size_t operator()(const digest& d) const noexcept { return static_cast<std::size_t>(d.a); }
  };
  /// Returns: the standard library's hash of `p`, and its FNV-1a hash (64 bits each).
  static digest digest_of(std::string_view p) noexcept {
    std::uint64_t fnv = 0xcbf29ce484222325ULL;
    for (const char c : p) fnv = (fnv ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
    return {static_cast<std::uint64_t>(std::hash<std::string_view>{}(p)), fnv};
  }
  mutable std::mutex mu_;
  std::unordered_set<digest, digest_hash> set_;
};

// ---- the session -----------------------------------------------------------------------------------

/// session_options::acl in the C client's shape: the ACL of the nodes a session creates, when the
/// options choose one (contenders.cpp). Its strings view the options' own.
struct chosen_acl {
  /// Effects: converts `o.acl` (o must outlive this).
  explicit chosen_acl(const session_options& o);
  chosen_acl(const chosen_acl&) = delete;
  chosen_acl& operator=(const chosen_acl&) = delete;
  std::vector<ACL> entries;
  ACL_vector vector{};  ///< views `entries`; count 0 when the options choose none
};

/// The timers of a session's bounded holds (hold_bounds: the end of a hold at its longest, the
/// delete of a node kept to its shortest): one thread, started by the first timer, runs each timer
/// at its time, one at a time, with no lock held. A timer must not wait on the network.
class hold_timers {
 public:
  /// Effects: runs `f` at `at` (at once if past), unless cancel()ed first or stop()ped.
  /// Returns: its id (never 0); 0 if stopped (then `f` never runs).
  /// Throws: std::bad_alloc; std::system_error if the thread cannot be started.
  std::uint64_t schedule(clock::time_point at, std::function<void()> f);
  /// Effects: the timer `id` will not run, unless it is running now. Never throws.
  void cancel(std::uint64_t id) noexcept;
  /// Effects: drops every timer not run yet and joins the thread (not from a timer). Idempotent.
  void stop() noexcept;
  ~hold_timers() { stop(); }

 private:
  void run();
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::pair<clock::time_point, std::uint64_t>, std::function<void()>> due_;
  std::unordered_map<std::uint64_t, clock::time_point> at_;  // id -> its key's time
  std::uint64_t next_ = 1;
  bool stopped_ = false;
  std::thread thread_;
};

/// A session: its options and parts, and what takes several parts (opening and closing the handle,
/// the worker's loop, close()).
struct session_impl {
  /// Effects: a session of `o`, not connected yet (open_handle connects it).
  explicit session_impl(session_options o) : opts(std::move(o)), acl(opts), states(opts) {}

  const session_options opts;
  chosen_acl acl;  // of the nodes it creates, if opts.acl chooses one
  std::string chroot;
  round_trip_meter round_trips;  // its reads' latencies (look_ahead)

  state_machine states;
  background_deletes deletes;
  listener_list listeners;
  watch_registry watches;
  client_handle handle;
  session_reaper reaper;
  hold_timers timers;
  path_set deletable;  // lock paths whose ACL lets us delete our nodes
  // Whether the lock path of a first acquire is likely missing (as the last one this session
  // looked at was): then the lock node's create goes with the contender's, in the same round trip
  // (or in one transaction: contenders.cpp, fresh_lock).
  std::atomic<bool> fresh_paths{true};
  // The transactions of a fresh lock node and our contender (fresh_lock): how many succeeded in a
  // row (up to fresh_trials_max), and how many are on their way while that streak is shorter (a
  // wrong guess fails the whole transaction and costs a round trip: a burst of first acquires
  // guesses with a few until they tell).
  static constexpr int fresh_trials_max = 8;
  std::atomic<int> fresh_streak{0};
  std::atomic<int> fresh_trials{0};
  std::thread worker;

  // The asynchronous acquires' runner (runner.cpp): made by the first one, drained by close(),
  // stopped by the destructor.
  std::mutex runner_mu;
  std::shared_ptr<async_runner> runner;

  /// Effects: drains and stops the runner, joins the worker (close() from a listener could not)
  /// and the reaper.
  ~session_impl();

  /// Effects: close(): stops the threads, closes the handle, tells the listeners. Idempotent.
  void shutdown() noexcept;

  // -- the handle (handle.cpp) -----------------------------------------------------------------

  /// The handle's session watcher: turns the C client's session events into states.
  static void session_watcher(zhandle_t* zh, int type, int state, const char*, void* vctx);

  /// Effects: closes the current handle, if any (handle.mu must NOT be held, nor may the caller be
  /// its loop's thread), and wakes every watch's waiters (a closed handle fires no watch).
  void close_handle();

  /// Effects: opens a new handle and waits until it is connected, authenticated and its chroot
  /// checked. Throws: std::system_error; the handle is closed again on failure.
  void open_handle(bool first = false);

  // -- the session thread (session_thread.cpp) -------------------------------------------------

  /// The worker's loop: does the state machine's next_work until it says stop.
  void run_worker();

  /// Effects: attaches to session `id` and closes it, so that the server deletes its ephemeral
  /// nodes now. Returns: whether that session is over (closed now, or expired already); false if
  /// no server answered within a third of the session timeout (try again later).
  bool close_on_server(const clientid_t& id);

  // -- background requests (background.cpp) ---------------------------------------------------

  /// Effects: sends what `p` asks for without waiting for the server. Returns: false if it could
  /// not be sent (keep it pending).
  bool send_pending(const pending_delete& p);

  /// Effects: deletes the node p.path and waits for the reply (an unlock() on the caller's thread).
  /// Returns: false if the outcome is unknown (hand it to the worker).
  bool delete_now(const pending_delete& p, int* result = nullptr);

  /// Effects: sends the delete of p.path (no prefix) and returns; its completion retries it later
  /// if the outcome is unknown. Returns: false if it could not be sent (then nothing was done).
  /// A non-empty `settle` (the lock path) makes this session's next acquire there wait for the
  /// reply (see release_settled).
  bool delete_in_background(const pending_delete& p, std::string settle = {});

  /// Effects: hands `p` to the worker, which sends it once connected (unless its session is gone).
  void defer_delete(pending_delete p);

  // -- calls -----------------------------------------------------------------------------------

  /// Effects: sends one request on the handle of `loop` with `send(zh, data)`: a C-client
  /// asynchronous call whose completion is one of reply_to's, given `data`. The caller holds the
  /// loop's lock (io_loop::with_handle): `zh` is its handle (nullptr once closing).
  /// Returns: the request in flight; nullptr if the client refused to send it, with its code in `rc`.
  template <class Send>
  static std::shared_ptr<reply_state> send_locked(io_loop& loop, zhandle_t* zh, Send&& send, int& rc) {
    if (!zh) {  // closed (given up): as the client answers an expired handle
      rc = ZINVALIDSTATE;
      return nullptr;
    }
    auto p = std::make_shared<reply_state>();
    p->self = p;
    p->owner = &loop.ctx;
    {
      std::lock_guard l{p->owner->requests_mu};
      p->next = p->owner->requests;
      if (p->next) p->next->prev = p.get();
      p->owner->requests = p.get();
    }
    rc = send(zh, static_cast<const void*>(p.get()));
    if (rc == ZOK) return p;
    unlist(*p);  // not sent: no completion comes
    p->self.reset();
    return nullptr;
  }

  /// Returns: the loop of generation `g`'s handle. Throws: as states.check_live(g, what).
  std::shared_ptr<io_loop> live_loop(std::uint64_t g, const call_name& what) {
    std::shared_lock hl{handle.mu};  // the generation and its handle change together
    states.check_live(g, what);
    return handle.loop;
  }

  /// Effects: removes `p` from its handle's registry of requests in flight.
  static void unlist(reply_state& p) noexcept;

  /// Effects: waits, holding no lock, for the reply to `p`, or until generation `g` is seen over
  /// (looked at every 100 ms while the reply is late).
  /// Returns: the reply's rc (its content moved into *out, if given); ZINVALIDSTATE if the
  /// generation ended first.
  int await_reply(const std::shared_ptr<reply_state>& p, std::uint64_t g, reply* out);

  /// Effects: sends one request of generation `g` (see send_locked) and waits for its reply.
  /// Returns: its rc, the reply in *out. Throws: errc::session_closed / errc::session_expired
  /// (check_live) if the generation is over before or while it waits, naming `what`.
  template <class Send>
  int request(std::uint64_t g, const call_name& what, reply* out, Send&& send) {
    int rc = ZINVALIDSTATE;
    std::shared_ptr<reply_state> p;
    if (const auto loop = live_loop(g, what))
      p = loop->with_handle([&](zhandle_t* zh) { return send_locked(*loop, zh, send, rc); });
    if (!p) return rc;
    rc = await_reply(p, g, out);
    const auto m = meaning_of(rc);
    if (m == rc_meaning::session_closed || m == rc_meaning::session_expired) states.check_live(g, what);
    return rc;
  }

  /// Effects: request(g, what, out, send) until its outcome is known, waiting for the connection
  /// between tries.
  /// Returns: its rc (answered: ZOK or the server's refusal), or nullopt at the deadline.
  /// Throws: errc::session_closed / errc::session_expired (check_live, answered), naming `what`.
  template <class Send>
  std::optional<int> call(clock::time_point deadline, std::uint64_t g, const call_name& what, reply* out,
                          Send&& send) {
    for (;;) {
      const int rc = request(g, what, out, send);
      if (answered(rc, what)) return rc;
      if (!states.wait_connected(deadline, g, what)) return std::nullopt;
    }
  }
};

/// zklock's own access to a session's implementation (declared in zklock:session, a friend there).
struct session_access {
  /// Returns: the implementation of `s`.
  static session_impl& impl(const session& s) noexcept { return *s.impl_; }
};

/// Returns: the implementation of `s`.
inline session_impl& impl_of(const session& s) noexcept { return session_access::impl(s); }

// -- contender nodes' ACL and parents (contenders.cpp), also for the semaphore node ------------

/// Returns: the ACL of the nodes zklock creates: session_options::acl if it chooses one, else
/// creator-all + world-read with credentials, ZOO_OPEN_ACL_UNSAFE without.
ACL_vector* contender_acl(session_impl& s);

/// Effects: creates every missing ancestor of `path` and `path` itself as container nodes.
/// Returns: ZOK, or nullopt at the deadline.
/// Throws: errc::session_closed / errc::session_expired (session_impl::call); the server's refusal
/// of a create (e.g. no_auth, naming the node and CREATE on its parent).
std::optional<int> ensure_containers(session_impl& s, const std::string& path, std::uint64_t g,
                                     clock::time_point deadline, std::size_t* sent = nullptr);

/// Effects: makes sure the semaphore node `path` exists and stores `leases` ("leases=N"): creates it
/// if missing, as a container (the server reaps it once the last lease of a used semaphore is
/// gone), its missing parents too. Returns: false if `deadline` passed
/// first. Adds the requests sent to `*sent`, if given.
/// Throws: std::system_error(errc::lease_count_mismatch) if it stores another count,
/// errc::path_kind_mismatch if it stores none (a lock's path, or another node); session failures
/// and the server's refusals.
bool ensure_semaphore_node_in(session_impl& s, const std::string& path, std::string_view leases, std::uint64_t g,
                              clock::time_point deadline, std::size_t* sent = nullptr, std::int32_t* version = nullptr);

}  // namespace zklock::detail
