// SPDX-License-Identifier: Apache-2.0
// zklock:session_impl — the state behind a zklock::session, shared by the session layer's units.
//
// An implementation partition: imported only by modules/session/*.cpp, never by the primary
// interface, and built from a private file set, so it is neither installed nor visible to
// importers of zklock (nor is the C client it names). Which unit defines what:
//   session.cpp         class session, its state machine (post), listeners, shutdown
//   handle.cpp          opening and closing the C client's handle, its session watcher
//   session_thread.cpp  the session worker (events, loss clock, re-establishment, retries), the reaper
//   background.cpp      deletes sent without waiting (background release, retries), release_node
//   watches.cpp         the watch-group registry, list/watch/drop, own-node watches
//   contenders.cpp      contender creation (pipelined, protected), ACLs, containers
//   nodes.cpp           semaphore node, read_node, create_ephemeral
//   client_log.cpp      the C client's log routing
//   runner.cpp          the runner of asynchronous acquires (zklock:step), started on first use
module;
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
#include <thread>
#include <unordered_set>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock:session_impl;
import :errors;
import :session;
import :operations;
import :step;

namespace zklock::detail {

struct session_impl;

/// The context of a handle's session watcher: which session, which generation of it.
struct handle_ctx {
  session_impl* impl;
  std::uint64_t generation;
};

/// A node (or every child of a lock node that starts with a prefix) we must delete once connected.
struct pending_delete {
  std::string path;        // the node, or the lock node when `prefix` is set
  std::string prefix;      // non-empty: delete children of `path` starting with it
  std::uint64_t generation;
};

/// Returns: whether `rc` leaves a request's outcome unknown (it may or may not have been served).
inline bool unknown_outcome(int rc) noexcept { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

/// Throws: std::system_error with the C client's code `rc` (the zklock category mirrors it).
[[noreturn]] inline void fail(int rc, const std::string& what) { throw_error(static_cast<errc>(rc), what); }

/// Effects: passes one line to the log handler, if any (client_log.cpp). The C client's log callback.
void zk_log_line(const char* message);

/// Effects: sets the C client's process-wide log level from whether a log handler is set
/// (client_log.cpp): called before each handle is opened.
void refresh_client_log_level() noexcept;

/// Effects: wakes and forgets every watch group of `owner`, whose handle is closing or closed
/// (watches.cpp).
void wake_all_groups(const session_impl* owner) noexcept;

struct session_impl {
  explicit session_impl(session_options o) : opts(std::move(o)) {}

  session_options opts;
  std::string chroot;
  round_trip_meter round_trips;  // its reads' latencies (look_ahead)

  mutable std::mutex mu;  // guards everything below but zh
  mutable std::condition_variable cv;
  session_state st = session_state::connecting;
  bool connected_once = false;  // on this handle
  bool auth_failed = false;
  bool closed = false;
  bool stop_worker = false;
  std::uint64_t gen = 0;
  std::int64_t sid = 0;
  std::chrono::milliseconds negotiated{0};
  std::deque<session_state> events;
  std::vector<pending_delete> pending;
  std::size_t inflight = 0;  // background requests sent whose completion has not run yet
  // Lock paths of background deletes in flight that this session's next acquire there waits for
  // (settle_before_requeue; one entry per delete), and the acquires waiting for one to settle.
  std::vector<std::string> settling;
  std::vector<std::weak_ptr<wake_target>> settle_waiters;
  std::atomic<std::size_t> settling_count{0};  // settling.size(), read without mu
  std::unordered_set<std::string> deletable;  // lock paths whose ACL lets us delete our nodes
  std::vector<std::stop_source> stops;  // to request on the worker (from watch callbacks)
  std::stop_source loss;          // of the current generation: fired when its holds are lost
  clock::time_point suspended_at{};  // when the current suspension began
  bool reopen_due = false;        // expired: open a new handle (after a failed attempt: again)
  bool reopen_refused = false;    // the last re-establishment was refused for good (auth, chroot)

  std::mutex reopen_mu;             // one open/close at a time
  std::shared_mutex handle_mu;      // shared: a call on zh; exclusive: replace or close zh
  zhandle_t* zh = nullptr;
  std::unique_ptr<handle_ctx> ctx;

  std::mutex listener_mu;           // held while listeners run
  std::map<std::uint64_t, state_listener> listeners;
  std::uint64_t next_listener = 1;
  // The thread that holds listener_mu to run listeners (none: default id). A listener may add or
  // remove listeners, or close the session, on that thread without taking listener_mu again.
  std::atomic<std::thread::id> dispatcher{};

  std::thread worker;

  // The asynchronous acquires' runner (runner.cpp): made by the first one, drained by close(),
  // stopped by the destructor.
  std::mutex runner_mu;
  std::shared_ptr<async_runner> runner;

  // Waits of asynchronous acquires for the session's next generation (guarded by mu): woken, and
  // forgotten, at the next change of state (post), of re-establishment or at close.
  std::vector<std::weak_ptr<wake_target>> state_waiters;

  /// Effects: wakes and forgets the state waiters (mu held). Never throws.
  void wake_state_waiters() noexcept {
    for (auto& w : state_waiters)
      if (auto t = w.lock()) t->wake();
    state_waiters.clear();
  }

  // Sessions given up locally (a suspension longer than the loss tolerance) whose handle was
  // closed while no server could hear it: the server keeps them, and their ephemeral nodes, until
  // it expires them itself, which after a quorum outage can be a whole timeout after recovery.
  // The reaper attaches to each with its id and password as soon as a server answers and closes it.
  std::vector<clientid_t> stale;
  std::thread reaper;

  ~session_impl();

  // -- state and listeners (session.cpp) -------------------------------------------------------

  /// Returns: whether the caller is running a listener right now (and so holds listener_mu).
  bool in_listener() const noexcept { return dispatcher.load() == std::this_thread::get_id(); }

  /// Effects: calls every listener with `s`, in the order they were added; a listener removed by
  /// an earlier one is not called, nor is any once the session is closed (unless `s` is closed, or
  /// `before_close`: a change that happened before close() and is delivered by it).
  /// Exceptions of listeners are swallowed.
  void notify_listeners(session_state s, bool before_close = false) noexcept;

  /// Effects: moves to state `s` and queues it for the listeners (mu held).
  void post(session_state s);

  /// Effects: waits until connected. Returns: false if `deadline` passed.
  /// Throws: session_expired / session_closed.
  bool wait_connected(clock::time_point deadline, std::uint64_t want_gen);

  /// Returns: the current generation. Throws: session_closed.
  std::uint64_t current_gen() const;

  /// Effects: close(): stops the threads, closes the handle, tells the listeners. Idempotent.
  void shutdown() noexcept;

  // -- the handle (handle.cpp) -----------------------------------------------------------------

  /// The handle's session watcher: turns the C client's session events into states.
  static void session_watcher(zhandle_t* zh, int type, int state, const char*, void* vctx);

  /// Effects: closes the current handle, if any (handle_mu exclusive must NOT be held).
  void close_handle();

  /// Effects: opens a new handle and waits until it is connected, authenticated and its chroot
  /// checked. Throws: std::system_error; the handle is closed again on failure.
  void open_handle(bool first = false);

  // -- the session thread (session_thread.cpp) -------------------------------------------------

  /// Returns: how long a suspension may last before the holds of the session count as lost (mu held).
  clock::duration loss_tolerance() const;

  /// The worker's loop: listeners, the loss clock, re-establishment, pending deletes.
  void run_worker();

  /// The reaper's loop: closes given-up sessions on the server.
  void run_reaper();

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

  /// Effects: forgets one settling delete under `lock_path` and wakes the acquires waiting for one.
  void end_settle(const std::string& lock_path) noexcept;

  /// Effects: hands `p` to the worker, which sends it once connected (unless its session is gone).
  void defer_delete(pending_delete p);

  /// Effects: counts a background request about to be sent (see inflight).
  void begin_background();

  /// Effects: counts a background request done: its completion ran, or it could not be sent.
  void end_background() noexcept;

  // -- calls -----------------------------------------------------------------------------------

  /// Runs `op(zh)` until its outcome is known; Returns: its rc, or nullopt at the deadline.
  template <class Op>
  std::optional<int> call(clock::time_point deadline, std::uint64_t g, Op&& op) {
    for (;;) {
      int rc;
      {
        std::shared_lock hl{handle_mu};
        {
          std::lock_guard lk{mu};
          if (closed) throw_error(errc::session_closed, "zklock");
          if (gen != g || st == session_state::expired) throw_error(errc::session_expired, "zklock");
        }
        rc = op(zh);
      }
      if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE) throw_error(errc::session_expired, "zklock");
      if (rc == ZCLOSING) throw_error(errc::session_closed, "zklock");
      if (!unknown_outcome(rc)) return rc;
      if (!wait_connected(deadline, g)) return std::nullopt;
    }
  }
};

// -- contender nodes' ACL and parents (contenders.cpp), also for the semaphore node ------------

/// Returns: the ACL of the nodes zklock creates: creator-all + world-read with credentials,
/// ZOO_OPEN_ACL_UNSAFE without.
ACL_vector* contender_acl(session_impl& s);

/// Effects: creates every missing ancestor of `path` and `path` itself as container nodes.
/// Returns: ZOK, the first refusal's code, or nullopt at the deadline.
std::optional<int> ensure_containers(session_impl& s, const std::string& path, std::uint64_t g,
                                     clock::time_point deadline, std::size_t* sent = nullptr);

}  // namespace zklock::detail
