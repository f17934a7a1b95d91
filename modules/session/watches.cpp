// SPDX-License-Identifier: Apache-2.0
// Watches: the registry of watch groups (the waiters of one session on one path and kind share one
// C-client watcher and one server watch), listing with a children watch, watching nodes (one, or
// many pipelined), dropping a watch, and the holder's watch on its own node. The calls run on the
// caller's thread; node_watcher and the completions (on_own_watch, on_pipelined_watch) on the C
// client's completion thread, where they only wake waiters.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock;
import :session_impl;

namespace zklock::detail {

// ---- the watch-group registry ----------------------------------------------------------------------

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
// Armed groups by (session, path, kind); the path is a view of the group's own (one copy per group).
std::map<std::tuple<const session_impl*, std::string_view, bool>, std::uint64_t> g_open;
std::uint64_t g_next_group = 1;

void* watch_ctx(std::uint64_t id) noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)); }

/// Effects: forgets group `id` (g_watch_mu held). Returns: its live waiters, to wake.
std::vector<std::shared_ptr<wake_target>> take_group(std::uint64_t id) {
  std::vector<std::shared_ptr<wake_target>> out;
  auto it = g_groups.find(id);
  if (it == g_groups.end()) return out;
  for (auto& w : it->second.waiters)
    if (auto t = w.lock()) out.push_back(std::move(t));
  g_open.erase({it->second.owner, std::string_view{it->second.path}, it->second.children});
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
  auto open = g_open.find({owner, std::string_view{path}, children});
  if (open == g_open.end()) {
    const std::uint64_t id = g_next_group++;
    const auto& g = g_groups.emplace(id, watch_group{owner, path, children, {}}).first->second;
    try {
      open = g_open.emplace(std::tuple{owner, std::string_view{g.path}, children}, id).first;
    } catch (...) {
      g_groups.erase(id);
      throw;
    }
  }
  g_groups[open->second].waiters.push_back(t);
  return open->second;
}

/// Effects: removes `t` from the group of (owner, path, data) without asking the server (the watch
/// was not armed). Never throws.
void leave_group(const session_impl* owner, const std::string& path, const wake_target* t) noexcept {
  std::lock_guard lk{g_watch_mu};
  auto open = g_open.find({owner, std::string_view{path}, false});
  if (open == g_open.end()) return;
  auto& waiters = g_groups[open->second].waiters;
  std::erase_if(waiters, [&](const std::weak_ptr<wake_target>& w) {
    auto p = w.lock();
    return !p || p.get() == t;
  });
  if (waiters.empty()) {
    const std::uint64_t id = open->second;
    g_open.erase(open);  // first: its key views the group's path
    g_groups.erase(id);
  }
}

}  // namespace

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

// ---- listing and watching --------------------------------------------------------------------------

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
  auto open = g_open.find({&s, std::string_view{path}, children});
  if (open == g_open.end()) return;  // fired already
  auto& waiters = g_groups[open->second].waiters;
  std::erase_if(waiters, [&](const std::weak_ptr<wake_target>& w) {
    auto t = w.lock();
    return !t || t.get() == watcher;
  });
  if (!waiters.empty()) return;
  const std::uint64_t id = open->second;
  g_open.erase(open);  // first: its key views the group's path
  g_groups.erase(id);
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

// ---- the holder's watch on its own node ------------------------------------------------------------

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

}  // namespace zklock::detail
