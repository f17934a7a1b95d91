// SPDX-License-Identifier: Apache-2.0
// zklock::session and the ZooKeeper operations of the lock algorithm. The only unit that sees the
// C client's API.
module;
#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <tuple>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock;

namespace zklock {

const char* to_string(session_state s) noexcept {
  switch (s) {
    case session_state::connecting: return "connecting";
    case session_state::connected: return "connected";
    case session_state::suspended: return "suspended";
    case session_state::expired: return "expired";
    case session_state::closed: return "closed";
  }
  return "unknown";
}

auth_info digest(std::string_view user, std::string_view password) {
  if (user.empty()) throw std::invalid_argument("zklock::digest: empty user name");
  if (user.find(':') != std::string_view::npos)
    throw std::invalid_argument("zklock::digest: user name must not contain ':'");
  std::string cred{user};
  cred += ':';
  cred += password;
  return {"digest", std::move(cred)};
}

namespace {

// ---- the C client's log -----------------------------------------------------------------------

std::mutex g_log_mu;
std::shared_ptr<const log_handler> g_log;  // empty = silent

// The C client formats a line (server endpoints into one static buffer that every handle's threads
// share) before it reaches any callback; its process-wide level decides whether it formats at all.
// Without a handler nothing is formatted (level 0 = off), which is silent, cheaper and free of that
// race; with one, INFO. Called with g_log_mu held.
void apply_client_log_level() noexcept {
  ::zoo_set_debug_level(g_log ? ZOO_LOG_LEVEL_INFO : static_cast<ZooLogLevel>(0));
}

extern "C" void zk_log_line(const char* message) {
  std::shared_ptr<const log_handler> h;
  {
    std::lock_guard lk{g_log_mu};
    h = g_log;
  }
  if (h && *h) (*h)(message ? std::string_view{message} : std::string_view{});
}

// ---- connect-string validation -----------------------------------------------------------------

[[noreturn]] void bad_connect(std::string_view connect, std::string_view why) {
  throw std::invalid_argument("zklock::session: bad connect string \"" + std::string{connect} + "\": " +
                              std::string{why});
}

bool parse_port(std::string_view p) {
  if (p.empty() || p.size() > 5) return false;
  unsigned v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v >= 1 && v <= 65535;
}

/// Returns: the chroot ("" if none). Throws: std::invalid_argument.
std::string validate_connect(std::string_view connect) {
  if (connect.empty()) bad_connect(connect, "empty");
  if (connect.find('\0') != std::string_view::npos) bad_connect(connect, "embedded NUL");
  const auto slash = connect.find('/');
  std::string_view hosts = connect.substr(0, slash);
  std::string chroot;
  if (slash != std::string_view::npos) {
    chroot = std::string{connect.substr(slash)};
    try {
      detail::validate_path(chroot, "chroot");
    } catch (const std::invalid_argument& e) {
      bad_connect(connect, e.what());
    }
  }
  if (hosts.empty()) bad_connect(connect, "no host");
  while (!hosts.empty()) {
    const auto comma = hosts.find(',');
    std::string_view h = hosts.substr(0, comma);
    hosts = comma == std::string_view::npos ? std::string_view{} : hosts.substr(comma + 1);
    if (h.empty()) bad_connect(connect, "empty host in list");
    std::string_view host, port;
    if (h.front() == '[') {  // [ipv6]:port
      const auto close = h.find(']');
      if (close == std::string_view::npos || close + 1 >= h.size() || h[close + 1] != ':')
        bad_connect(connect, "IPv6 host must be written [addr]:port");
      host = h.substr(1, close - 1);
      port = h.substr(close + 2);
    } else {
      const auto colon = h.rfind(':');
      if (colon == std::string_view::npos) bad_connect(connect, "missing port in \"" + std::string{h} + "\"");
      host = h.substr(0, colon);
      port = h.substr(colon + 1);
    }
    if (host.empty()) bad_connect(connect, "empty host name");
    for (char c : host)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == ':'))
        bad_connect(connect, "bad character in host \"" + std::string{host} + "\"");
    if (!parse_port(port)) bad_connect(connect, "port \"" + std::string{port} + "\" is not in 1..65535");
    if (comma == std::string_view::npos) break;
    if (hosts.empty()) bad_connect(connect, "trailing ','");
  }
  return chroot;
}

bool unknown_outcome(int rc) noexcept { return rc == ZCONNECTIONLOSS || rc == ZOPERATIONTIMEOUT; }

}  // namespace

void set_log_handler(log_handler h) {
  auto p = h ? std::make_shared<const log_handler>(std::move(h)) : nullptr;
  std::lock_guard lk{g_log_mu};
  g_log = std::move(p);
  apply_client_log_level();
}

namespace detail {

// ---- watch groups ----------------------------------------------------------------------------

struct session_impl;

namespace {

/// Waiters of one session on one (path, kind): one C-client watcher, one server watch.
struct watch_group {
  const session_impl* owner;
  std::string path;
  bool children;
  std::vector<std::weak_ptr<wake_target>> waiters;
};

// One lock for every session's groups: held only for bookkeeping and to queue (not wait for) a
// request, so the ZooKeeper event thread never waits long on it.
std::mutex g_watch_mu;
std::unordered_map<std::uint64_t, watch_group> g_groups;  // by id = the watcher's context
std::map<std::tuple<const session_impl*, std::string, bool>, std::uint64_t> g_open;  // armed groups
std::uint64_t g_next_group = 1;

void* watch_ctx(std::uint64_t id) noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)); }

/// Effects: forgets group `id` (g_watch_mu held). Returns: its live waiters, to wake.
std::vector<std::shared_ptr<wake_target>> take_group(std::uint64_t id) {
  std::vector<std::shared_ptr<wake_target>> out;
  auto it = g_groups.find(id);
  if (it == g_groups.end()) return out;
  for (auto& w : it->second.waiters)
    if (auto t = w.lock()) out.push_back(std::move(t));
  g_open.erase({it->second.owner, it->second.path, it->second.children});
  g_groups.erase(it);
  return out;
}

extern "C" void node_watcher(zhandle_t*, int type, int state, const char*, void* ctx) {
  // The client also calls node watchers on session events; only expiry matters to a waiter (a
  // reconnect re-arms the watches by itself).
  if (type == ZOO_SESSION_EVENT && state != ZOO_EXPIRED_SESSION_STATE) return;
  std::vector<std::shared_ptr<wake_target>> wake;
  {
    std::lock_guard lk{g_watch_mu};
    wake = take_group(reinterpret_cast<std::uintptr_t>(ctx));
  }
  for (auto& t : wake) {
    if (type == ZOO_DELETED_EVENT) t->node_deleted.store(true);
    t->wake();
  }
}

/// Effects: adds `t` to the armed group of (owner, path, children), or to a new one.
/// Returns: the group's id, the context to arm the watch with.
std::uint64_t join_group(const session_impl* owner, const std::string& path, bool children,
                         const std::shared_ptr<wake_target>& t) {
  std::lock_guard lk{g_watch_mu};
  auto [it, fresh] = g_open.try_emplace({owner, path, children}, 0);
  if (fresh) {
    it->second = g_next_group++;
    g_groups.emplace(it->second, watch_group{owner, path, children, {}});
  }
  g_groups[it->second].waiters.push_back(t);
  return it->second;
}

/// Effects: wakes and forgets every group of `owner` (its handle is closing or closed).
void wake_all_groups(const session_impl* owner) noexcept {
  std::vector<std::shared_ptr<wake_target>> wake;
  {
    std::lock_guard lk{g_watch_mu};
    std::vector<std::uint64_t> ids;
    for (auto& [id, g] : g_groups)
      if (g.owner == owner) ids.push_back(id);
    for (auto id : ids)
      for (auto& t : take_group(id)) wake.push_back(std::move(t));
  }
  for (auto& t : wake) t->wake();
}

}  // namespace

// ---- the session -------------------------------------------------------------------------------

struct handle_ctx {
  struct session_impl* impl;
  std::uint64_t generation;
};

/// A node (or every child of a lock node that starts with a prefix) we must delete once connected.
struct pending_delete {
  std::string path;        // the node, or the lock node when `prefix` is set
  std::string prefix;      // non-empty: delete children of `path` starting with it
  std::uint64_t generation;
};

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

  // Sessions given up locally (a suspension longer than the loss tolerance) whose handle was
  // closed while no server could hear it: the server keeps them, and their ephemeral nodes, until
  // it expires them itself, which after a quorum outage can be a whole timeout after recovery.
  // The reaper attaches to each with its id and password as soon as a server answers and closes it.
  std::vector<clientid_t> stale;
  std::thread reaper;

  ~session_impl() {
    // close() called from a listener cannot join the worker it runs on: join it here.
    if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
    if (reaper.joinable()) reaper.join();
  }

  /// Returns: whether the caller is running a listener right now (and so holds listener_mu).
  bool in_listener() const noexcept { return dispatcher.load() == std::this_thread::get_id(); }

  /// Effects: calls every listener with `s`, in the order they were added; a listener removed by
  /// an earlier one is not called, nor is any once the session is closed (unless `s` is closed, or
  /// `before_close`: a change that happened before close() and is delivered by it).
  /// Exceptions of listeners are swallowed.
  void notify_listeners(session_state s, bool before_close = false) noexcept {
    std::unique_lock<std::mutex> ll;
    const bool nested = in_listener();  // close() from inside a listener
    if (!nested) {
      ll = std::unique_lock{listener_mu};
      dispatcher.store(std::this_thread::get_id());
    }
    try {
      const auto snapshot = listeners;  // a listener may add or remove listeners
      for (auto& [id, l] : snapshot) {
        if (!listeners.contains(id)) continue;
        if (s != session_state::closed && !before_close) {
          std::lock_guard lk{mu};
          if (closed) break;  // e.g. a listener closed the session: "closed" was the last word
        }
        try {
          l(s);
        } catch (...) {  // a listener's exception must not end the session's thread
        }
      }
    } catch (...) {  // allocation failure while copying: the listeners miss this change
    }
    if (!nested) dispatcher.store(std::thread::id{});
  }

  // -- state ---------------------------------------------------------------------------------

  void post(session_state s) {  // mu held
    if (s == st) return;
    if (s == session_state::suspended) suspended_at = clock::now();
    st = s;
    events.push_back(s);
    cv.notify_all();
  }

  static void session_watcher(zhandle_t* zh, int type, int state, const char*, void* vctx) {
    if (type != ZOO_SESSION_EVENT || !vctx) return;
    auto* c = static_cast<handle_ctx*>(vctx);
    session_impl& s = *c->impl;
    std::lock_guard lk{s.mu};
    // A replaced handle, or one given up: `expired` ends a generation for good. (A handle given up
    // after a long disconnection may still reconnect, its session alive on the server, before the
    // worker closes it: that must not bring the generation back to `connected`.)
    if (c->generation != s.gen || s.closed || s.st == session_state::expired) return;
    if (state == ZOO_CONNECTED_STATE) {
      s.connected_once = true;
      if (const clientid_t* id = zoo_client_id(zh)) s.sid = id->client_id;
      s.negotiated = std::chrono::milliseconds{zoo_recv_timeout(zh)};
      s.post(session_state::connected);
    } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
      s.post(s.connected_once ? session_state::suspended : session_state::connecting);
    } else if (state == ZOO_EXPIRED_SESSION_STATE) {
      s.post(session_state::expired);
    } else if (state == ZOO_AUTH_FAILED_STATE) {
      s.auth_failed = true;
      s.cv.notify_all();
    }
  }

  /// Effects: closes the current handle, if any (handle_mu exclusive must NOT be held).
  void close_handle() {
    std::unique_lock hl{handle_mu};
    if (zh) {
      zookeeper_close(zh);  // joins the client's threads: no callback of it runs after this
      zh = nullptr;
    }
    ctx.reset();
    wake_all_groups(this);  // a closed handle fires no watch: its waiters must hear of it
  }

  /// Effects: opens a new handle and waits until it is connected, authenticated and its chroot
  /// checked. Throws: std::system_error; the handle is closed again on failure.
  void open_handle(bool first = false) {
    std::lock_guard rl{reopen_mu};
    if (!first) {  // the worker and reestablish() may both get here: the second has nothing to do
      std::lock_guard lk{mu};
      if (!closed && st != session_state::expired) return;
    }
    close_handle();
    const auto deadline = clock::now() + opts.connect_timeout;
    std::stop_source old_loss;
    {
      // One step for callers: the new generation and its handle appear together (a call that saw
      // the new generation with no handle yet would hand the C client a null handle).
      std::unique_lock hl{handle_mu};
      {
        std::lock_guard lk{mu};
        if (closed) throw_error(errc::session_closed, "zklock::session");
        old_loss = std::exchange(loss, std::stop_source{});
        ++gen;
        reopen_refused = false;
        connected_once = false;
        auth_failed = false;
        sid = 0;
        post(session_state::connecting);
        ctx = std::make_unique<handle_ctx>(handle_ctx{this, gen});
      }
      {
        std::lock_guard lk{g_log_mu};
        apply_client_log_level();
      }
      errno = 0;
      zh = zookeeper_init2(opts.connect.c_str(), &session_watcher, static_cast<int>(opts.session_timeout.count()),
                           nullptr, ctx.get(), 0, &zk_log_line);
      if (!zh) {
        const int e = errno;
        ctx.reset();
        {
          std::lock_guard lk{mu};
          post(first ? session_state::closed : session_state::expired);
        }
        old_loss.request_stop();
        throw std::system_error(e ? e : EINVAL, std::generic_category(),
                                "zklock::session: the ZooKeeper client refused \"" + opts.connect + "\"");
      }
    }
    old_loss.request_stop();  // holds of the replaced handle are gone, if they were not already
    auto fail = [&](errc e, const std::string& what) {
      close_handle();
      std::lock_guard lk{mu};
      post(first ? session_state::closed : session_state::expired);
      throw_error(e, what);
    };
    {
      std::unique_lock lk{mu};
      if (!cv.wait_until(lk, deadline, [&] { return st == session_state::connected || auth_failed || closed; })) {
        lk.unlock();
        fail(errc::connect_timeout, "zklock::session: no session with \"" + opts.connect + "\" within " +
                                        std::to_string(opts.connect_timeout.count()) + " ms");
      }
      if (auth_failed) {
        lk.unlock();
        fail(errc::auth_failed, "zklock::session: authentication failed");
      }
    }
    if (opts.auth) {
      struct auth_wait {
        std::mutex m;
        std::condition_variable c;
        bool done = false;
        int rc = 0;
      };
      auto w = std::make_shared<auth_wait>();
      auto* held = new std::shared_ptr<auth_wait>(w);  // freed by the completion
      int rc;
      {
        std::shared_lock hl{handle_mu};
        rc = zoo_add_auth(
            zh, opts.auth->scheme.c_str(), opts.auth->credential.data(), static_cast<int>(opts.auth->credential.size()),
            [](int rc2, const void* data) {
              auto* p = static_cast<std::shared_ptr<auth_wait>*>(const_cast<void*>(data));
              {
                std::lock_guard l{(*p)->m};
                (*p)->done = true;
                (*p)->rc = rc2;
              }
              (*p)->c.notify_all();
              delete p;
            },
            held);
      }
      if (rc != ZOK) {
        delete held;
        fail(static_cast<errc>(rc), "zklock::session: addauth");
      }
      std::unique_lock l{w->m};
      if (!w->c.wait_until(l, deadline, [&] { return w->done; })) {
        l.unlock();
        fail(errc::connect_timeout, "zklock::session: no answer to addauth within connect_timeout");
      }
      if (w->rc != ZOK) {
        const int r = w->rc;
        l.unlock();
        fail(static_cast<errc>(r), "zklock::session: authentication (" + opts.auth->scheme + ") refused");
      }
    }
    if (!chroot.empty()) {
      struct Stat stat;
      int rc;
      {
        std::shared_lock hl{handle_mu};
        rc = zoo_exists(zh, "/", 0, &stat);
      }
      if (rc == ZNONODE) fail(errc::chroot_missing, "zklock::session: chroot " + chroot + " does not exist");
      if (rc != ZOK) fail(static_cast<errc>(rc), "zklock::session: checking chroot " + chroot);
    }
  }

  // -- the worker: listeners, re-establishment, background deletes -----------------------------

  /// Returns: how long a suspension may last before the holds of the session count as lost.
  clock::duration loss_tolerance() const {  // mu held
    if (opts.loss_tolerance > std::chrono::milliseconds::zero()) return opts.loss_tolerance;
    const auto t = negotiated > std::chrono::milliseconds::zero() ? negotiated : opts.session_timeout;
    // The client notices silence 2/3 of t after it last heard from the server; the server may
    // expire the session t after it last heard from us, which is a little earlier (and we hear of
    // the silence a little late). Give up before that, with a margin of t/12, so that a waiter is
    // never granted our lock while we still believe we hold it (2/3 + 1/3 had no margin at all).
    return t / 4;
  }

  void run_worker() {
    std::unique_lock lk{mu};
    for (;;) {
      auto wake_now = [&] {
        return stop_worker || !events.empty() || reopen_due || !stops.empty() ||
               (!pending.empty() && st == session_state::connected);
      };
      if (st == session_state::suspended && !loss.stop_requested()) {
        // The client does not report expiry while it cannot reach a server: keep our own clock.
        const auto deadline = suspended_at + loss_tolerance();
        cv.wait_until(lk, deadline, wake_now);
        if (!stop_worker && st == session_state::suspended && clock::now() >= deadline) {
          // The server may have expired us by now. Give the session up: its holds are lost, and a
          // closed handle cannot bring a stale node back when the network returns.
          auto lost = loss;
          post(session_state::expired);
          lk.unlock();
          lost.request_stop();
          std::optional<clientid_t> given_up;
          {
            std::shared_lock hl{handle_mu};
            if (zh)
              if (const clientid_t* id = zoo_client_id(zh); id && id->client_id) given_up = *id;
          }
          close_handle();
          lk.lock();
          if (given_up) {
            stale.push_back(*given_up);
            if (!reaper.joinable()) reaper = std::thread([this] { run_reaper(); });
            cv.notify_all();
          }
          reopen_due = opts.reestablish_after_expiry;
          continue;
        }
      } else if (!pending.empty() && st == session_state::connected) {
        cv.wait_for(lk, std::chrono::milliseconds{200}, [&] { return stop_worker || !events.empty() || !stops.empty(); });
      } else {
        cv.wait(lk, wake_now);
      }
      if (stop_worker) return;
      while (!events.empty()) {
        const session_state s = events.front();
        events.pop_front();
        if (s == session_state::expired) {
          auto lost = loss;
          lk.unlock();
          lost.request_stop();  // on this thread, never ZooKeeper's
          lk.lock();
          reopen_due = reopen_due || opts.reestablish_after_expiry;
        }
        lk.unlock();
        notify_listeners(s);
        lk.lock();
        if (stop_worker) return;
      }
      if (!stops.empty()) {
        auto todo = std::move(stops);
        stops.clear();
        lk.unlock();
        for (auto& st0 : todo) st0.request_stop();  // users' stop callbacks run here
        lk.lock();
        if (stop_worker) return;
      }
      if (reopen_due && !closed) {
        reopen_due = false;
        lk.unlock();
        try {
          open_handle();
        } catch (const std::system_error& e) {
          // Still expired. Refused credentials or a missing chroot stay so: give up (reestablish()
          // may try again); anything else (no server yet) is tried again, each attempt waiting
          // connect_timeout.
          const bool for_good = e.code() == make_error_code(errc::auth_failed) ||
                                e.code() == make_error_code(errc::no_auth) ||
                                e.code() == make_error_code(errc::chroot_missing);
          std::lock_guard l2{mu};
          reopen_refused = for_good;
          reopen_due = opts.reestablish_after_expiry && !closed && !for_good;
          cv.notify_all();
        } catch (...) {  // allocation failure: try again
          std::lock_guard l2{mu};
          reopen_due = opts.reestablish_after_expiry && !closed;
        }
        lk.lock();
        if (stop_worker) return;
      }
      if (!pending.empty() && st == session_state::connected) {
        auto work = std::move(pending);
        pending.clear();
        const auto g = gen;
        lk.unlock();
        std::vector<pending_delete> again;
        for (auto& p : work)
          if (p.generation == g && !send_pending(p)) again.push_back(std::move(p));
        lk.lock();
        for (auto& p : again) pending.push_back(std::move(p));
      }
    }
  }

  // -- the reaper: close given-up sessions on the server ---------------------------------------

  void run_reaper() {
    std::unique_lock lk{mu};
    while (!stop_worker) {
      if (stale.empty()) {
        cv.wait(lk, [&] { return stop_worker || !stale.empty(); });
        continue;
      }
      const auto todo = stale;
      lk.unlock();
      std::vector<std::int64_t> done;
      for (const auto& id : todo)
        if (close_on_server(id)) done.push_back(id.client_id);
      lk.lock();
      std::erase_if(stale, [&](const clientid_t& id) {
        return std::find(done.begin(), done.end(), id.client_id) != done.end();
      });
      if (!stale.empty()) cv.wait_for(lk, std::chrono::milliseconds{250}, [&] { return stop_worker; });
    }
  }

  struct reap_box {
    std::mutex m;
    std::condition_variable c;
    int state = 0;  // ZOO_CONNECTED_STATE or ZOO_EXPIRED_SESSION_STATE once known
  };

  static void reap_watcher(zhandle_t*, int type, int state, const char*, void* ctx) {
    if (type != ZOO_SESSION_EVENT || !ctx) return;
    if (state != ZOO_CONNECTED_STATE && state != ZOO_EXPIRED_SESSION_STATE) return;
    auto* b = static_cast<reap_box*>(ctx);
    {
      std::lock_guard lk{b->m};
      b->state = state;
    }
    b->c.notify_all();
  }

  /// Effects: attaches to session `id` and closes it, so that the server deletes its ephemeral
  /// nodes now. Returns: whether that session is over (closed now, or expired already); false if
  /// no server answered within a third of the session timeout (try again later).
  bool close_on_server(const clientid_t& id) {
    reap_box box;
    zhandle_t* h = zookeeper_init2(opts.connect.c_str(), &reap_watcher, static_cast<int>(opts.session_timeout.count()),
                                   &id, &box, 0, &zk_log_line);
    if (!h) return false;
    int state;
    {
      std::unique_lock l{box.m};
      box.c.wait_for(l, opts.session_timeout / 3, [&] { return box.state != 0; });
      state = box.state;
    }
    zookeeper_close(h);  // connected: sends closeSession; joins the client's threads either way
    return state != 0;
  }

  /// Effects: sends what `p` asks for without waiting for the server: the worker must never block
  /// on the network, since it also keeps the loss clock (a synchronous call can wait a whole
  /// connection timeout, or several while the client reconnects into a partition). A completion
  /// whose outcome is unknown hands the work back to the worker. Returns: false if it could not be
  /// sent (keep it pending).
  bool send_pending(const pending_delete& p) {
    if (p.prefix.empty()) return delete_in_background(p);
    return send_in_background(p, [](zhandle_t* h, background_delete* box) {
      return zoo_aget_children(h, box->p.path.c_str(), 0, &on_prefixed_listing, box);
    });
  }

  /// The listing of a lock node under which a node of ours (by its prefix) may stand: each one found
  /// goes back to the worker as a plain delete. (On the client's completion thread: it must not
  /// take handle_mu, which close_handle() holds while it joins that thread.)
  static void on_prefixed_listing(int rc, const struct String_vector* kids, const void* data) noexcept {
    std::unique_ptr<background_delete> box{static_cast<background_delete*>(const_cast<void*>(data))};
    const background_done done{box->s};
    try {
      if (unknown_outcome(rc)) {
        box->s->defer_delete(std::move(box->p));
        return;
      }
      if (rc != ZOK || !kids) return;  // the lock node is gone, and our node with it
      for (int i = 0; i < kids->count; ++i)
        if (std::string_view{kids->data[i]}.starts_with(box->p.prefix))
          box->s->defer_delete({box->p.path + "/" + kids->data[i], {}, box->p.generation});
    } catch (...) {  // allocation failure: the node goes with the session
    }
  }

  /// Effects: deletes the node p.path and waits for the reply (an unlock() on the caller's thread).
  /// Returns: false if the outcome is unknown (hand it to the worker).
  bool delete_now(const pending_delete& p, int* result = nullptr) {
    std::shared_lock hl{handle_mu};
    if (!zh) return true;
    const int rc = zoo_delete(zh, p.path.c_str(), -1);
    if (result) *result = rc;
    log_refused_delete(p.path, rc);
    return !unknown_outcome(rc);
  }

  /// Returns: whether `rc`, a delete's answer, is the server refusing it (not done, gone already,
  /// to be retried, or gone with the session).
  static bool refused_delete(int rc) noexcept {
    return !(rc == ZOK || rc == ZNONODE || unknown_outcome(rc) || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE ||
             rc == ZCLOSING);
  }

  /// Effects: if the server refused to delete `path` (e.g. NOAUTH: the lock node's ACL lets us
  /// create but not delete), says so through the log handler. Such a delete is not retried (the
  /// answer would not change); the node stays until its session ends. Never throws.
  static void log_refused_delete(const std::string& path, int rc) noexcept {
    if (!refused_delete(rc)) return;  // gone, to be retried, or gone with the session
    try {
      const std::string line = "zklock: the server refused to delete " + path + ": " + zerror(rc) + " (" +
                               std::to_string(rc) + "); it stays until its session ends";
      zk_log_line(line.c_str());
    } catch (...) {  // allocation failure, or a throwing log handler: nothing more to do
    }
  }

  /// A delete sent without waiting for its reply (session_options::background_release).
  struct background_delete {
    session_impl* s;
    pending_delete p;
  };

  /// Effects: counts a background request about to be sent (see inflight).
  void begin_background() {
    std::lock_guard lk{mu};
    ++inflight;
  }

  /// Effects: counts a background request done: its completion ran, or it could not be sent.
  /// Wakes shutdown() when it waits for the last one (nobody else waits for them: a wake-up per
  /// release would cost the worker a context switch for nothing).
  void end_background() noexcept {
    bool last_while_closing;
    {
      std::lock_guard lk{mu};
      last_while_closing = --inflight == 0 && closed;
    }
    if (last_while_closing) cv.notify_all();
  }

  /// Ends a background request when a completion returns, whichever way it returns.
  struct background_done {
    session_impl* s;
    ~background_done() { s->end_background(); }
  };

  /// Effects: sends one background request for `p`: `send(zh, box)` is a zoo_a* call whose
  /// completion owns the box from then on and ends the request with a background_done.
  /// Returns: false if it could not be sent (then nothing was done); true also if the handle is gone.
  template <class Send>
  bool send_in_background(const pending_delete& p, Send send) {
    std::shared_lock hl{handle_mu};
    if (!zh) return true;
    auto box = std::make_unique<background_delete>(background_delete{this, p});
    begin_background();
    if (send(zh, box.get()) != ZOK) {
      end_background();
      return false;
    }
    box.release();  // owned by the completion now, which always comes (reply, loss or close)
    return true;
  }

  /// Effects: sends the delete of p.path (no prefix) and returns; its completion retries it later
  /// if the outcome is unknown. Returns: false if it could not be sent (then nothing was done).
  bool delete_in_background(const pending_delete& p) {
    return send_in_background(p, [](zhandle_t* h, background_delete* box) {
      return zoo_adelete(h, box->p.path.c_str(), -1, &on_background_delete, box);
    });
  }

  static void on_background_delete(int rc, const void* data) noexcept {
    std::unique_ptr<background_delete> box{static_cast<background_delete*>(const_cast<void*>(data))};
    const background_done done{box->s};
    log_refused_delete(box->p.path, rc);
    if (!unknown_outcome(rc)) return;
    try {
      box->s->defer_delete(std::move(box->p));  // the worker deletes it once connected again
    } catch (...) {  // allocation failure: the node goes with the session
    }
  }

  void defer_delete(pending_delete p) {
    std::lock_guard lk{mu};
    if (closed || p.generation != gen || st == session_state::expired) return;  // gone with its session
    pending.push_back(std::move(p));
    cv.notify_all();
  }

  // -- calls -----------------------------------------------------------------------------------

  /// Effects: waits until connected. Returns: false if `deadline` passed.
  /// Throws: session_expired / session_closed.
  bool wait_connected(clock::time_point deadline, std::uint64_t want_gen) {
    std::unique_lock lk{mu};
    auto ready = [&] { return closed || gen != want_gen || st == session_state::connected || st == session_state::expired; };
    if (deadline == clock::time_point::max())
      cv.wait(lk, ready);
    else if (!cv.wait_until(lk, deadline, ready))
      return false;
    if (closed) throw_error(errc::session_closed, "zklock");
    if (gen != want_gen || st == session_state::expired) throw_error(errc::session_expired, "zklock");
    return true;
  }

  std::uint64_t current_gen() const {
    std::lock_guard lk{mu};
    if (closed) throw_error(errc::session_closed, "zklock");
    return gen;
  }

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

  void shutdown() noexcept {
    {
      std::lock_guard lk{mu};
      if (closed) return;
      closed = true;
      stop_worker = true;
      cv.notify_all();
    }
    wake_all_groups(this);  // waiters see `closed` at once, not after the handle is closed
    std::stop_source lost;
    {
      std::lock_guard lk{mu};
      lost = loss;
    }
    lost.request_stop();  // a closed session holds nothing
    // From a listener (on the worker), the worker ends by itself once the listener returns; the
    // destructor joins it.
    if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
    if (reaper.joinable() && reaper.get_id() != std::this_thread::get_id()) reaper.join();
    {
      // Background requests (releases and retried deletes) not answered yet: a handle closed
      // now drops their completions (the C client queues them for its completion thread, which
      // has already stopped), and with them what they own. While connected their replies are one
      // round trip away: wait for them, briefly.
      std::unique_lock lk{mu};
      cv.wait_for(lk, std::min<clock::duration>(opts.connect_timeout, std::chrono::seconds{2}),
                  [&] { return inflight == 0 || st != session_state::connected; });
    }
    close_handle();
    // Changes posted before close() that the worker had not delivered when it stopped (e.g. an
    // `expired` queued behind a slow listener): listeners hear them, in order, before `closed`.
    // Nothing is posted any more (the watcher ignores a closed session), so the queue is final.
    // From a listener (on the worker), the changes after the one being delivered stay undelivered:
    // the listeners after the closing one do not hear that one either.
    std::deque<session_state> undelivered;
    if (worker.get_id() != std::this_thread::get_id()) {
      std::lock_guard lk{mu};
      undelivered.swap(events);
    }
    for (const session_state s : undelivered) notify_listeners(s, true);
    notify_listeners(session_state::closed);
    std::lock_guard lk{mu};
    st = session_state::closed;
    cv.notify_all();
  }
};

}  // namespace detail

// ---- session -------------------------------------------------------------------------------------

namespace {
session_options from_connect(std::string_view connect) {
  session_options o;
  o.connect = std::string{connect};
  return o;
}
}  // namespace

session::session(std::string_view connect) : session(from_connect(connect)) {}

session::session(session_options options) {
  std::string chroot = validate_connect(options.connect);
  if (options.session_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: session_timeout must be positive");
  if (options.connect_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: connect_timeout must be positive");
  if (options.session_timeout > std::chrono::hours{24})
    throw std::invalid_argument("zklock::session: session_timeout is unreasonably long");
  if (options.auth && options.auth->scheme.empty())
    throw std::invalid_argument("zklock::session: auth scheme is empty");
  if (options.auth && (options.auth->scheme.find('\0') != std::string::npos ||
                       options.auth->credential.find('\0') != std::string::npos))
    throw std::invalid_argument("zklock::session: auth scheme or credential contains a NUL character");
  if (options.auth && options.auth->scheme.size() + options.auth->credential.size() > 64 * 1024)
    throw std::invalid_argument("zklock::session: auth scheme and credential are over 64 KiB (the server would drop the connection)");
  if (options.loss_tolerance < std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: loss_tolerance must not be negative (zero = the default)");
  if (options.look_ahead_round_trip < std::chrono::microseconds::zero())
    throw std::invalid_argument("zklock::session: look_ahead_round_trip must not be negative (zero = always)");
  impl_ = std::make_unique<detail::session_impl>(std::move(options));
  impl_->chroot = std::move(chroot);
  impl_->open_handle(true);  // throws; nothing else to undo yet
  {
    // The changes so far happened before anyone could add a listener: they are not "later".
    std::lock_guard lk{impl_->mu};
    impl_->events.clear();
  }
  impl_->worker = std::thread([p = impl_.get()] { p->run_worker(); });
}

session::~session() { close(); }

void session::close() noexcept {
  if (impl_) impl_->shutdown();
}

session_state session::state() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->st;
}

std::int64_t session::id() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->sid;
}

std::uint64_t session::generation() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->gen;
}

std::chrono::milliseconds session::negotiated_timeout() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->negotiated;
}

std::uint64_t session::add_state_listener(state_listener l) {
  std::unique_lock<std::mutex> ll;
  if (!impl_->in_listener()) ll = std::unique_lock{impl_->listener_mu};  // else ours already
  const auto id = impl_->next_listener++;
  impl_->listeners.emplace(id, std::move(l));
  return id;
}

void session::remove_state_listener(std::uint64_t id) noexcept {
  std::unique_lock<std::mutex> ll;
  if (!impl_->in_listener()) ll = std::unique_lock{impl_->listener_mu};  // else ours already
  impl_->listeners.erase(id);
}

bool session::wait_for(session_state s, std::chrono::milliseconds timeout) const {
  if (timeout < std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session::wait_for: negative timeout (" + std::to_string(timeout.count()) + " ms)");
  std::unique_lock lk{impl_->mu};
  return impl_->cv.wait_for(lk, timeout, [&] { return impl_->st == s; });
}

void session::flush() {
  detail::session_impl& s = *impl_;
  const auto deadline = detail::clock::now() + s.opts.connect_timeout;
  auto rc = s.call(deadline, s.current_gen(), [](zhandle_t* zh) {
    struct Stat st {};
    return zoo_exists(zh, "/", 0, &st);  // "/" is the chroot when there is one: it exists
  });
  if (!rc) throw_error(errc::operation_timeout, "zklock::session::flush");
  if (*rc != ZOK) throw_error(static_cast<errc>(*rc), "zklock::session::flush");
}

void session::reestablish() {
  {
    std::lock_guard lk{impl_->mu};
    if (impl_->closed) throw_error(errc::session_closed, "zklock::session::reestablish");
    if (impl_->st != session_state::expired) return;
  }
  impl_->open_handle();
}

const session_options& session::options() const noexcept { return impl_->opts; }

// ---- the operations of the lock algorithm ----------------------------------------------------------

namespace detail {

namespace {

constexpr std::size_t path_buffer = 1200;

// The ACL of every node zklock creates (lock nodes and their missing parents, contender nodes,
// semaphore nodes) in a session with credentials: the creator may do everything — ZooKeeper's
// "auth" id stands for every identity the session authenticated with, e.g. digest user:hash, so
// all sessions of one digest user share these rights — and everybody else may only read (list
// the queue, read a holder's data, watch). ZooKeeper checks CREATE and DELETE on the parent, so
// a stranger can neither queue under such a lock node nor delete a holder's node: both give
// NOAUTH (errc::no_auth). A lock node that already existed keeps its own ACL, which then decides.
char g_auth_scheme[] = "auth";
char g_auth_id[] = "";
char g_world_scheme[] = "world";
char g_world_id[] = "anyone";
ACL g_creator_all_world_read[] = {{ZOO_PERM_ALL, {g_auth_scheme, g_auth_id}},
                                  {ZOO_PERM_READ, {g_world_scheme, g_world_id}}};
ACL_vector CREATOR_ALL_WORLD_READ_ACL{2, g_creator_all_world_read};

/// Returns: the ACL of the nodes zklock creates: creator-all + world-read with credentials
/// (see above), ZOO_OPEN_ACL_UNSAFE without.
ACL_vector* contender_acl(session_impl& s) {
  return s.opts.auth ? &CREATOR_ALL_WORLD_READ_ACL : &ZOO_OPEN_ACL_UNSAFE;
}

/// Creates every missing ancestor of `path` and `path` itself as container nodes.
std::optional<int> ensure_containers(session_impl& s, const std::string& path, std::uint64_t g,
                                     clock::time_point deadline, std::size_t* sent = nullptr) {
  for (std::size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string prefix = path.substr(0, pos);
    if (sent) ++*sent;
    auto rc = s.call(deadline, g, [&](zhandle_t* zh) {
      return zoo_create(zh, prefix.c_str(), nullptr, -1, contender_acl(s), ZOO_CONTAINER, nullptr, 0);
    });
    if (!rc) return std::nullopt;
    if (*rc != ZOK && *rc != ZNODEEXISTS) return rc;
  }
  return ZOK;
}

[[noreturn]] void fail(int rc, const std::string& what) { throw_error(static_cast<errc>(rc), what); }

/// Effects: once per session and lock path, reads the lock node's ACL and refuses to queue there
/// if it would not let this session delete its contender node again (ZooKeeper checks DELETE on
/// the parent): the create would succeed and the release fail, leaving a node that blocks the
/// queue for the whole session. A missing lock node is fine: zklock creates it with an ACL that
/// lets its creator delete. Returns: false if `deadline` passed. Throws: errc::no_auth.
bool check_deletable(session_impl& s, const std::string& lock_path, std::uint64_t g, clock::time_point deadline,
                     std::size_t* sent) {
  {
    std::lock_guard lk{s.mu};
    if (s.deletable.contains(lock_path)) return true;
  }
  ACL_vector acl{};
  struct Stat st {};
  if (sent) ++*sent;
  auto rc = s.call(deadline, g, [&](zhandle_t* zh) { return zoo_get_acl(zh, lock_path.c_str(), &acl, &st); });
  if (!rc) return false;
  if (*rc == ZOK) {
    std::vector<acl_entry> entries;
    for (int i = 0; i < acl.count; ++i)
      entries.push_back({acl.data[i].perms, acl.data[i].id.scheme ? acl.data[i].id.scheme : "",
                         acl.data[i].id.id ? acl.data[i].id.id : ""});
    deallocate_ACL_vector(&acl);
    const std::string me =
        s.opts.auth && s.opts.auth->scheme == "digest" ? digest_identity(s.opts.auth->credential) : std::string{};
    if (!acl_may_delete(entries, me))
      throw_error(errc::no_auth, "zklock: the ACL of " + lock_path +
                                     " does not let this session delete its contender node again (no DELETE "
                                     "permission for world:anyone or our digest user): refusing to queue there");
  } else if (*rc != ZNONODE) {
    fail(*rc, "zklock: reading the ACL of " + lock_path);
  }
  std::lock_guard lk{s.mu};
  s.deletable.insert(lock_path);
  return true;
}

}  // namespace

namespace {

std::optional<held_node> create_contender_from(session_impl& s, const std::string& lock_path, const std::string& prefix,
                                               std::string_view data, clock::time_point deadline, std::uint64_t g,
                                               bool maybe_created, std::size_t* sent);

/// The replies of a pipelined create + listing, filled in by the client's completion thread.
struct pipelined_replies {
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;
  int create_rc = ZSYSTEMERROR;
  std::string created;
  std::int64_t czxid = 0;
  int list_rc = ZSYSTEMERROR;
  std::vector<std::string> kids;

  void done() {
    // notify under the lock: the waiter may destroy *this as soon as it sees outstanding == 0
    std::lock_guard lk{mu};
    --outstanding;
    cv.notify_all();
  }
};

extern "C" void on_pipelined_create(int rc, const char* name, const struct Stat* st, const void* data) {
  auto* r = static_cast<pipelined_replies*>(const_cast<void*>(data));
  {
    std::lock_guard lk{r->mu};
    r->create_rc = rc;
    if (rc == ZOK) {
      try {
        r->created = name ? name : "";
      } catch (...) {
        r->create_rc = ZSYSTEMERROR;  // allocation failure: treated as an unknown outcome below
      }
      r->czxid = st ? st->czxid : 0;
    }
  }
  r->done();
}

extern "C" void on_pipelined_list(int rc, const struct String_vector* kids, const void* data) {
  auto* r = static_cast<pipelined_replies*>(const_cast<void*>(data));
  {
    std::lock_guard lk{r->mu};
    r->list_rc = rc;
    if (rc == ZOK && kids) {
      try {
        r->kids.reserve(static_cast<std::size_t>(kids->count));
        for (int i = 0; i < kids->count; ++i) r->kids.emplace_back(kids->data[i]);
      } catch (...) {
        r->list_rc = ZSYSTEMERROR;  // the caller lists again
      }
    }
  }
  r->done();
}

}  // namespace

std::optional<queued_node> create_and_list(session& sess, const std::string& lock_path, const std::string& prefix,
                                           std::string_view data, clock::time_point deadline, std::size_t* sent) {
  session_impl& s = sess.impl();
  const std::uint64_t g = s.current_gen();
  if (!check_deletable(s, lock_path, g, deadline, sent)) return std::nullopt;
  const std::string node_prefix = lock_path + "/" + prefix;
  pipelined_replies r;
  {
    std::shared_lock hl{s.handle_mu};  // as a synchronous call: the handle stays open meanwhile
    {
      std::lock_guard lk{s.mu};
      if (s.closed) throw_error(errc::session_closed, "zklock");
      if (s.gen != g || s.st == session_state::expired) throw_error(errc::session_expired, "zklock");
    }
    r.outstanding = 2;
    const int crc = zoo_acreate2(s.zh, node_prefix.c_str(), data.data(), static_cast<int>(data.size()),
                                 contender_acl(s), ZOO_EPHEMERAL_SEQUENTIAL, &on_pipelined_create, &r);
    if (crc == ZOK && sent) ++*sent;
    if (crc != ZOK) {
      // Not sent (the handle is not connected, or bad arguments): the one-request path decides.
      hl.unlock();
      auto node = create_contender_from(s, lock_path, prefix, data, deadline, g, false, sent);
      if (!node) return std::nullopt;
      return queued_node{std::move(*node), std::nullopt};
    }
    const int lrc = zoo_aget_children(s.zh, lock_path.c_str(), 0, &on_pipelined_list, &r);
    if (lrc == ZOK && sent) ++*sent;
    std::unique_lock lk{r.mu};
    if (lrc != ZOK) --r.outstanding;  // no completion will come for it
    // Every sent request gets its completion: its reply, or ZCONNECTIONLOSS / ZCLOSING.
    r.cv.wait(lk, [&] { return r.outstanding == 0; });
  }
  if (r.create_rc == ZOK) {
    queued_node q{held_node{std::move(r.created), r.czxid, g}, std::nullopt};
    if (r.list_rc == ZOK) q.listing = std::move(r.kids);
    return q;
  }
  // Failed (missing lock node, NOAUTH, ...) or unknown (the connection was lost): the one-request
  // path handles each case, adopting a node that was created after all.
  auto node = create_contender_from(s, lock_path, prefix, data, deadline, g,
                                    unknown_outcome(r.create_rc) || r.create_rc == ZSYSTEMERROR, sent);
  if (!node) return std::nullopt;
  return queued_node{std::move(*node), std::nullopt};
}

std::optional<held_node> create_contender(session& sess, const std::string& lock_path, const std::string& prefix,
                                          std::string_view data, clock::time_point deadline) {
  session_impl& s = sess.impl();
  const std::uint64_t g = s.current_gen();
  if (!check_deletable(s, lock_path, g, deadline, nullptr)) return std::nullopt;
  return create_contender_from(s, lock_path, prefix, data, deadline, g, false, nullptr);
}

namespace {

std::optional<held_node> create_contender_from(session_impl& s, const std::string& lock_path, const std::string& prefix,
                                               std::string_view data, clock::time_point deadline, std::uint64_t g,
                                               bool maybe_created, std::size_t* sent) {
  const std::string node_prefix = lock_path + "/" + prefix;
  auto give_up = [&]() -> std::optional<held_node> {
    if (maybe_created) s.defer_delete({lock_path, prefix, g});
    return std::nullopt;
  };
  for (;;) {
    if (maybe_created) {
      // Protected creation: find the node by its unique prefix, adopt it only if it is ours.
      String_vector kids{};
      if (sent) ++*sent;
      auto rc = s.call(deadline, g, [&](zhandle_t* zh) { return zoo_get_children(zh, lock_path.c_str(), 0, &kids); });
      if (!rc) return give_up();
      std::string found;
      if (*rc == ZOK) {
        for (int i = 0; i < kids.count; ++i)
          if (std::string_view{kids.data[i]}.starts_with(prefix)) found = kids.data[i];
        deallocate_String_vector(&kids);
      } else if (*rc != ZNONODE) {
        // We cannot look (e.g. NOAUTH on reading the lock node): a node of ours may exist. The
        // session tries to remove it (it can only if it may list), and we report the refusal.
        give_up();
        fail(*rc, "zklock: looking for our contender under " + lock_path);
      }
      if (!found.empty()) {
        const std::string full = lock_path + "/" + found;
        struct Stat st {};
        if (sent) ++*sent;
        auto rc2 = s.call(deadline, g, [&](zhandle_t* zh) { return zoo_exists(zh, full.c_str(), 0, &st); });
        if (!rc2) return give_up();
        std::int64_t mine;
        {
          std::lock_guard lk{s.mu};
          mine = s.sid;
        }
        if (*rc2 == ZOK && st.ephemeralOwner == mine) return held_node{full, st.czxid, g};
      }
      maybe_created = false;
    }
    char created[path_buffer];
    struct Stat st {};
    std::optional<int> rc;
    {
      std::shared_lock hl{s.handle_mu};
      {
        std::lock_guard lk{s.mu};
        if (s.closed) throw_error(errc::session_closed, "zklock");
        if (s.gen != g || s.st == session_state::expired) throw_error(errc::session_expired, "zklock");
      }
      if (sent) ++*sent;
      rc = zoo_create2(s.zh, node_prefix.c_str(), data.data(), static_cast<int>(data.size()), contender_acl(s),
                       ZOO_EPHEMERAL_SEQUENTIAL, created, sizeof created, &st);
    }
    if (*rc == ZOK) return held_node{created, st.czxid, g};
    if (*rc == ZNONODE) {
      auto rc2 = ensure_containers(s, lock_path, g, deadline, sent);
      if (!rc2) return give_up();
      if (*rc2 != ZOK) fail(*rc2, "zklock: creating " + lock_path);
      continue;
    }
    if (*rc == ZSESSIONEXPIRED || *rc == ZINVALIDSTATE) throw_error(errc::session_expired, "zklock");
    if (*rc == ZCLOSING) throw_error(errc::session_closed, "zklock");
    if (unknown_outcome(*rc)) {
      maybe_created = true;
      try {
        if (!s.wait_connected(deadline, g)) return give_up();
      } catch (...) {
        give_up();
        throw;
      }
      continue;
    }
    fail(*rc, "zklock: creating a contender under " + lock_path);
  }
}

}  // namespace

std::optional<std::vector<std::string>> list_children(session& sess, const std::string& path,
                                                      const std::shared_ptr<wake_target>& watcher,
                                                      clock::time_point deadline) {
  session_impl& s = sess.impl();
  String_vector kids{};
  const std::uint64_t group = watcher ? join_group(&s, path, true, watcher) : 0;
  auto rc = s.call(deadline, s.current_gen(), [&](zhandle_t* zh) {
    return group ? zoo_wget_children(zh, path.c_str(), &node_watcher, watch_ctx(group), &kids)
                 : zoo_get_children(zh, path.c_str(), 0, &kids);
  });
  if (!rc) return std::nullopt;
  std::vector<std::string> out;
  if (*rc == ZNONODE) return out;
  if (*rc != ZOK) fail(*rc, "zklock: listing " + path);
  out.reserve(static_cast<std::size_t>(kids.count));
  for (int i = 0; i < kids.count; ++i) out.emplace_back(kids.data[i]);
  deallocate_String_vector(&kids);
  return out;
}

std::optional<node_seen> watch_node(session& sess, const std::string& path, const std::shared_ptr<wake_target>& watcher,
                                    clock::time_point deadline) {
  session_impl& s = sess.impl();
  char buf[1];
  struct Stat st {};
  const std::uint64_t group = join_group(&s, path, false, watcher);
  // getData, not exists: on a missing node it leaves no watch behind.
  auto rc = s.call(deadline, s.current_gen(), [&](zhandle_t* zh) {
    int len = sizeof buf;
    return zoo_wget(zh, path.c_str(), &node_watcher, watch_ctx(group), buf, &len, &st);
  });
  if (!rc) {
    drop_watch(sess, path, false, watcher.get());
    return std::nullopt;
  }
  if (*rc == ZNONODE) {
    drop_watch(sess, path, false, watcher.get());
    return node_seen::gone;
  }
  if (*rc != ZOK) {
    drop_watch(sess, path, false, watcher.get());
    fail(*rc, "zklock: watching " + path);
  }
  return node_seen::present;
}

void drop_watch(session& sess, const std::string& path, bool children, const wake_target* watcher) noexcept {
  session_impl& s = sess.impl();
  std::shared_lock hl{s.handle_mu};
  bool usable, connected;
  {
    std::lock_guard lk{s.mu};
    usable = s.zh && !s.closed;
    connected = s.st == session_state::connected;
  }
  std::lock_guard lk{g_watch_mu};  // held while queueing the removal: a later join is sent after it
  auto open = g_open.find({&s, path, children});
  if (open == g_open.end()) return;  // fired already
  auto& waiters = g_groups[open->second].waiters;
  std::erase_if(waiters, [&](const std::weak_ptr<wake_target>& w) {
    auto t = w.lock();
    return !t || t.get() == watcher;
  });
  if (!waiters.empty()) return;
  g_groups.erase(open->second);
  g_open.erase(open);
  // Removing one watcher only checks it on the server (the server keeps one watch per path and
  // kind for the connection): remove them all, which are ours alone. Connected: ask the server
  // (queued now, answered later; the client forgets its watcher with the answer). Disconnected:
  // forget it locally only (local=1 does no I/O), so that a reconnect does not re-arm it.
  // The header declares the completion as void_completion_t*, but the client stores and calls the
  // pointer it is given as the function itself.
  static constexpr void_completion_t ignore_reply = [](int, const void*) {};
  const auto type = children ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA;
  if (usable && connected)
    zoo_aremove_all_watches(s.zh, path.c_str(), type, 0, reinterpret_cast<void_completion_t*>(ignore_reply), nullptr);
  else if (usable)
    zoo_remove_all_watches(s.zh, path.c_str(), type, 1);
}

std::error_code release_node(session& sess, const held_node& n) noexcept {
  session_impl& s = sess.impl();
  try {
    pending_delete p{n.path, {}, n.generation};
    {
      std::lock_guard lk{s.mu};
      if (s.closed || s.gen != n.generation || s.st == session_state::expired) return {};
      if (s.st != session_state::connected) {
        s.pending.push_back(std::move(p));
        s.cv.notify_all();
        return {};
      }
    }
    if (s.opts.background_release && s.delete_in_background(p)) return {};
    int rc = ZOK;
    if (!s.delete_now(p, &rc)) s.defer_delete(std::move(p));
    if (session_impl::refused_delete(rc)) return make_error_code(static_cast<errc>(rc));
  } catch (...) {  // allocation failure: nothing sensible left to do
  }
  return {};
}

std::string session_password(const session& sess) {
  session_impl& s = sess.impl();
  std::shared_lock hl{s.handle_mu};
  if (!s.zh) return {};
  const clientid_t* id = zoo_client_id(s.zh);
  return id ? std::string{id->passwd, sizeof id->passwd} : std::string{};
}

void watch_held_node(session& sess, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept {
  if (!session_alive_for(sess, n)) {
    g->wake();
    return;
  }
  try {
    const auto seen = watch_node(sess, n.path, g, clock::now() + sess.impl().opts.connect_timeout);
    if (seen && *seen == node_seen::gone) g->wake();
    g->watch_result(seen && *seen != node_seen::gone);
  } catch (const std::system_error&) {
    g->wake();  // expired or closed meanwhile: lost
  } catch (...) {  // allocation failure: not watched
    g->watch_result(false);
  }
}

namespace {

/// The context of an own-node watch request whose reply we do not wait for.
struct own_watch_box {
  const session_impl* s;
  std::string path;
  std::weak_ptr<hold_guard> guard;
};

/// Effects: removes `t` from the group of (owner, path, data) without asking the server (the watch
/// was not armed). Never throws.
void leave_group(const session_impl* owner, const std::string& path, const wake_target* t) noexcept {
  std::lock_guard lk{g_watch_mu};
  auto open = g_open.find({owner, path, false});
  if (open == g_open.end()) return;
  auto& waiters = g_groups[open->second].waiters;
  std::erase_if(waiters, [&](const std::weak_ptr<wake_target>& w) {
    auto p = w.lock();
    return !p || p.get() == t;
  });
  if (waiters.empty()) {
    g_groups.erase(open->second);
    g_open.erase(open);
  }
}

extern "C" void on_own_watch(int rc, const char*, int, const struct Stat*, const void* data) {
  std::unique_ptr<own_watch_box> box{static_cast<own_watch_box*>(const_cast<void*>(data))};
  auto g = box->guard.lock();
  if (rc == ZOK) {
    if (g) g->watch_result(true);
    return;
  }
  leave_group(box->s, box->path, g.get());
  if (!g) return;
  g->watch_result(false);
  if (rc == ZNONODE || rc == ZSESSIONEXPIRED) g->wake();  // our node is gone already
}

}  // namespace

void watch_own_node(session& sess, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept {
  session_impl& s = sess.impl();
  try {
    auto box = std::make_unique<own_watch_box>(own_watch_box{&s, n.path, g});
    const std::uint64_t group = join_group(&s, n.path, false, g);
    int rc;
    {
      std::shared_lock hl{s.handle_mu};
      {
        std::lock_guard lk{s.mu};
        rc = (s.closed || !s.zh || s.gen != n.generation || s.st != session_state::connected) ? ZCONNECTIONLOSS : ZOK;
      }
      if (rc == ZOK) rc = zoo_awget(s.zh, n.path.c_str(), &node_watcher, watch_ctx(group), &on_own_watch, box.get());
    }
    if (rc == ZOK) {
      box.release();  // owned by the completion now, which always comes
      return;
    }
    leave_group(&s, n.path, g.get());
  } catch (...) {  // allocation failure: not watched
  }
  g->watch_result(false);
}

namespace {

/// The replies of pipelined watches (watch_nodes), filled in by the client's completion thread.
struct pipelined_watches {
  struct request {
    pipelined_watches* all;
    std::size_t index;
  };
  std::mutex mu;
  std::condition_variable cv;
  int outstanding = 0;
  std::vector<int> rc;
  std::vector<request> requests;  // the completions' contexts (stable: sized once)
};

extern "C" void on_pipelined_watch(int rc, const char*, int, const struct Stat*, const void* data) {
  const auto* req = static_cast<const pipelined_watches::request*>(data);
  pipelined_watches& all = *req->all;
  // notify under the lock: the waiter may destroy `all` as soon as it sees outstanding == 0
  std::lock_guard lk{all.mu};
  all.rc[req->index] = rc;
  --all.outstanding;
  all.cv.notify_all();
}

}  // namespace

std::optional<std::vector<node_seen>> watch_nodes(session& sess, const std::vector<std::shared_ptr<watch_slot>>& slots,
                                                  clock::time_point deadline) {
  session_impl& s = sess.impl();
  const std::uint64_t g = s.current_gen();
  const std::size_t n = slots.size();
  std::vector<node_seen> seen(n, node_seen::present);
  std::vector<std::uint64_t> groups(n, 0);  // non-zero: the slot is in this group
  // Any way out but success leaves none of the slots watched.
  bool done = false;
  struct undo {
    session& sess;
    const std::vector<std::shared_ptr<watch_slot>>& slots;
    std::vector<std::uint64_t>& groups;
    bool& done;
    ~undo() {
      if (done) return;
      for (std::size_t i = 0; i < slots.size(); ++i)
        if (groups[i]) drop_watch(sess, slots[i]->path, false, slots[i].get());
    }
  } guard{sess, slots, groups, done};
  for (std::size_t i = 0; i < n; ++i) groups[i] = join_group(&s, slots[i]->path, false, slots[i]);

  pipelined_watches r;
  r.rc.assign(n, ZSYSTEMERROR);
  for (std::size_t i = 0; i < n; ++i) r.requests.push_back({&r, i});
  std::vector<std::size_t> todo(n);
  for (std::size_t i = 0; i < n; ++i) todo[i] = i;
  while (!todo.empty()) {
    {
      std::shared_lock hl{s.handle_mu};  // as a synchronous call: the handle stays open meanwhile
      {
        std::lock_guard lk{s.mu};
        if (s.closed) throw_error(errc::session_closed, "zklock");
        if (s.gen != g || s.st == session_state::expired) throw_error(errc::session_expired, "zklock");
      }
      std::unique_lock lk{r.mu};
      for (const std::size_t i : todo) {
        // getData, not exists: on a missing node it leaves no watch behind.
        const int rc = zoo_awget(s.zh, slots[i]->path.c_str(), &node_watcher, watch_ctx(groups[i]),
                                 &on_pipelined_watch, &r.requests[i]);
        if (rc == ZOK)
          ++r.outstanding;
        else
          r.rc[i] = rc;  // not sent: decided below as if it were the reply
      }
      // Every sent request gets its completion: its reply, or ZCONNECTIONLOSS / ZCLOSING.
      r.cv.wait(lk, [&] { return r.outstanding == 0; });
    }
    std::vector<std::size_t> again;
    for (const std::size_t i : todo) {
      const int rc = r.rc[i];
      if (rc == ZOK) continue;
      if (rc == ZNONODE) {  // gone already: nothing armed
        seen[i] = node_seen::gone;
        leave_group(&s, slots[i]->path, slots[i].get());
        groups[i] = 0;
      } else if (unknown_outcome(rc)) {
        again.push_back(i);
      } else if (rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE) {
        throw_error(errc::session_expired, "zklock");
      } else if (rc == ZCLOSING) {
        throw_error(errc::session_closed, "zklock");
      } else {
        fail(rc, "zklock: watching " + slots[i]->path);
      }
    }
    todo = std::move(again);
    if (!todo.empty() && !s.wait_connected(deadline, g)) return std::nullopt;
  }
  done = true;
  return seen;
}

void run_on_session_thread(session& sess, std::stop_source stop) noexcept {
  session_impl& s = sess.impl();
  std::unique_lock lk{s.mu};
  if (s.closed) {  // no worker any more: the session is closed, every hold is lost anyway
    lk.unlock();
    stop.request_stop();
    return;
  }
  try {
    s.stops.push_back(std::move(stop));
  } catch (...) {
    return;
  }
  s.cv.notify_all();
}

bool await_next_session(session& sess, std::uint64_t generation, clock::time_point deadline) {
  session_impl& s = sess.impl();
  std::unique_lock lk{s.mu};
  const auto settled = [&] {
    return s.closed || (s.gen > generation && s.st == session_state::connected) ||
           !s.opts.reestablish_after_expiry || (s.reopen_refused && s.st == session_state::expired);
  };
  if (deadline == clock::time_point::max())
    s.cv.wait(lk, settled);
  else if (!s.cv.wait_until(lk, deadline, settled))
    return false;
  if (s.closed) throw_error(errc::session_closed, "zklock");
  if (s.gen > generation && s.st == session_state::connected) return true;
  if (!s.opts.reestablish_after_expiry)
    throw_error(errc::session_expired, "zklock: the session expired (reestablish_after_expiry is off)");
  throw_error(errc::session_expired, "zklock: the session expired and a new one was refused");
}

}  // namespace detail

bool session::await_next_generation(std::uint64_t generation, std::chrono::steady_clock::time_point deadline) {
  return detail::await_next_session(*this, generation, deadline);
}

namespace detail {

std::stop_token loss_token(const session& sess, std::uint64_t generation) {
  session_impl& s = sess.impl();
  std::lock_guard lk{s.mu};
  if (s.gen == generation && !s.closed) return s.loss.get_token();
  std::stop_source gone;
  gone.request_stop();
  return gone.get_token();
}

round_trip_meter& round_trips(session& sess) noexcept { return sess.impl().round_trips; }

bool look_ahead(session& sess) noexcept {
  session_impl& s = sess.impl();
  const auto limit = s.opts.look_ahead_round_trip;
  if (limit == std::chrono::microseconds::zero()) return true;
  if (limit == std::chrono::microseconds::max()) return false;
  const auto rtt = s.round_trips.estimate();
  // In microseconds: a limit near max() would overflow as nanoseconds.
  return !rtt || std::chrono::duration_cast<std::chrono::microseconds>(*rtt) > limit;
}

bool session_alive_for(const session& sess, const held_node& n) noexcept {
  session_impl& s = sess.impl();
  std::lock_guard lk{s.mu};
  return !s.closed && s.gen == n.generation && s.st != session_state::expired;
}

void ensure_semaphore_node(session& sess, const std::string& path, int leases) {
  session_impl& s = sess.impl();
  const auto g = s.current_gen();
  const auto deadline = clock::now() + s.opts.connect_timeout;
  const std::string want = "leases=" + std::to_string(leases);
  for (;;) {
    char buf[64];
    int len = sizeof buf;
    struct Stat st {};
    auto rc = s.call(deadline, g, [&](zhandle_t* zh) {
      len = sizeof buf;
      return zoo_get(zh, path.c_str(), 0, buf, &len, &st);
    });
    if (!rc) throw_error(errc::operation_timeout, "zklock: opening semaphore " + path);
    if (*rc == ZOK) {
      const std::string have{buf, static_cast<std::size_t>(std::max(len, 0))};
      if (have == want) return;
      throw_error(errc::lease_count_mismatch,
                  "zklock: semaphore " + path + " stores \"" + have + "\", opened with " + want);
    }
    if (*rc != ZNONODE) fail(*rc, "zklock: opening semaphore " + path);
    const auto parent = path.substr(0, path.rfind('/'));
    if (!parent.empty()) {
      auto rc2 = ensure_containers(s, parent, g, deadline);
      if (!rc2) throw_error(errc::operation_timeout, "zklock: opening semaphore " + path);
      if (*rc2 != ZOK) fail(*rc2, "zklock: creating " + parent);
    }
    auto rc3 = s.call(deadline, g, [&](zhandle_t* zh) {
      return zoo_create(zh, path.c_str(), want.data(), static_cast<int>(want.size()), contender_acl(s),
                        ZOO_PERSISTENT, nullptr, 0);
    });
    if (!rc3) throw_error(errc::operation_timeout, "zklock: opening semaphore " + path);
    if (*rc3 != ZOK && *rc3 != ZNODEEXISTS) fail(*rc3, "zklock: creating semaphore " + path);
  }
}

std::optional<node_info> read_node(session& sess, const std::string& path) {
  session_impl& s = sess.impl();
  const auto deadline = clock::now() + s.opts.connect_timeout;
  std::string buf(4096, '\0');
  int len = 0;
  struct Stat st {};
  auto rc = s.call(deadline, s.current_gen(), [&](zhandle_t* zh) {
    len = static_cast<int>(buf.size());
    return zoo_get(zh, path.c_str(), 0, buf.data(), &len, &st);
  });
  if (!rc) throw_error(errc::operation_timeout, "zklock: reading " + path);
  if (*rc == ZNONODE) return std::nullopt;
  if (*rc != ZOK) fail(*rc, "zklock: reading " + path);
  buf.resize(static_cast<std::size_t>(std::max(len, 0)));
  return node_info{std::move(buf), st.czxid, st.ephemeralOwner};
}

bool create_ephemeral(session& sess, const std::string& path, std::string_view data) {
  session_impl& s = sess.impl();
  const auto deadline = clock::now() + s.opts.connect_timeout;
  auto rc = s.call(deadline, s.current_gen(), [&](zhandle_t* zh) {
    return zoo_create(zh, path.c_str(), data.data(), static_cast<int>(data.size()), contender_acl(s), ZOO_EPHEMERAL,
                      nullptr, 0);
  });
  if (!rc) throw_error(errc::operation_timeout, "zklock: creating " + path);
  if (*rc == ZOK) return true;
  if (*rc == ZNONODE) return false;
  if (*rc != ZNODEEXISTS) fail(*rc, "zklock: creating " + path);
  // Ours, if an earlier try's reply was lost (s.call sends again after a connection loss).
  const auto info = read_node(sess, path);
  std::lock_guard lk{s.mu};
  return info && info->ephemeral_owner == s.sid;
}

}  // namespace detail
}  // namespace zklock
