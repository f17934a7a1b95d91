// SPDX-License-Identifier: Apache-2.0
// Watches: the session's registry of watch groups (the waiters of one session on one path and kind
// share one C-client watcher and one server watch), listing with a children watch, watching nodes
// (one, or many pipelined), dropping a watch, and the holder's watch on its own node. The calls run
// on the caller's thread; node_watcher and the completions (on_own_watch, on_pipelined_watch) on
// the handle's loop thread, where they only wake waiters (and resume the steps they wake).
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
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
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;

namespace zklock::detail {

// ---- the watch registry ----------------------------------------------------------------------------

namespace {

void* watch_ctx(std::uint64_t id) noexcept { return reinterpret_cast<void*>(static_cast<std::uintptr_t>(id)); }

/// The watcher of every watch group: `ctx` is the group's id; the session's watch registry is
/// reached through the handle's context (valid while the client runs: it is its io_loop's, which
/// ends after zookeeper_close).
extern "C" void node_watcher(zhandle_t* zh, int type, int state, const char*, void* ctx) {
  // The client also calls node watchers on session events; only expiry matters to a waiter (a
  // reconnect re-arms the watches by itself).
  if (type == ZOO_SESSION_EVENT && state != ZOO_EXPIRED_SESSION_STATE) return;
  const auto* h = static_cast<const handle_ctx*>(zoo_get_context(zh));
  if (!h) return;
  if (h->loop) h->loop->flush_deferred();  // others' sends first (see io_loop::try_with_handle)
  auto woken = h->impl->watches.take(reinterpret_cast<std::uintptr_t>(ctx));
  const steps_here here;  // the acquires it wakes take their next step on this thread, as a reply's
  if (type != ZOO_DELETED_EVENT) {
    woken.wake_all();
    return;
  }
  // A deletion: the algorithm's watch slots learn it (grant_on_deletion counts them).
  woken.wake_all([](wake_target& t) noexcept {
    if (auto* slot = dynamic_cast<watch_slot*>(&t))
      slot->wake_deleted();
    else
      t.wake();
  });
}

}  // namespace

std::uint64_t watch_registry::join(const std::string& path, bool children, const std::shared_ptr<wake_target>& t) {
  std::lock_guard lk{mu_};
  auto open = open_.find(key{path, children});
  if (open == open_.end()) {
    const std::uint64_t id = next_++;
    const auto& g = groups_.emplace(id, group{path, children, {}}).first->second;
    try {
      open = open_.emplace(key{g.path, children}, id).first;
    } catch (...) {
      groups_.erase(id);
      throw;
    }
  }
  groups_.find(open->second)->second.waiting.add(t);
  return open->second;
}

waiters watch_registry::take(std::uint64_t id) noexcept {
  std::lock_guard lk{mu_};
  const auto it = groups_.find(id);
  if (it == groups_.end()) return {};
  waiters out = it->second.waiting.take();
  open_.erase(key{it->second.path, it->second.children});
  groups_.erase(it);
  return out;
}

void watch_registry::wake_all() noexcept {
  std::unordered_map<std::uint64_t, group> all;
  {
    std::lock_guard lk{mu_};
    open_.clear();  // first: its keys view the groups' paths
    all.swap(groups_);
  }
  for (auto& [id, g] : all) g.waiting.wake_all();
}

// ---- listing and watching --------------------------------------------------------------------------

namespace {

/// Effects: arms a data watch on `path` waking `watcher` (none if the node is missing).
/// Returns: whether the node is gone or present; nullopt if `deadline` passed.
/// Throws: std::system_error (session_expired, session_closed, the server's refusal).
std::optional<node_seen> watch_node(session& sess, const std::string& path, const std::shared_ptr<wake_target>& watcher,
                                    clock::time_point deadline) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: watching ", path, "READ", path};
  const std::uint64_t g = s.states.live_generation(what);
  const std::uint64_t group = s.watches.join(path, false, watcher);
  // getData, not exists: on a missing node it leaves no watch behind.
  const auto rc = s.call(deadline, g, what, nullptr, [&](zhandle_t* zh, const void* d) {
    return zoo_awget(zh, path.c_str(), &node_watcher, watch_ctx(group), &reply_to::on_data, d);
  });
  if (!rc || *rc != ZOK) drop_watch(sess, path, false, watcher.get());
  if (!rc) return std::nullopt;
  if (*rc == ZNONODE) return node_seen::gone;
  if (*rc != ZOK) fail(*rc, what);
  return node_seen::present;
}

}  // namespace

std::optional<name_list> list_children(session& sess, const std::string& path,
                                       const std::shared_ptr<wake_target>& watcher, clock::time_point deadline,
                                       bool* missing) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: listing ", path, "READ", path};
  reply kids;
  const std::uint64_t g = s.states.live_generation(what);
  const std::uint64_t group = watcher ? s.watches.join(path, true, watcher) : 0;
  auto rc = s.call(deadline, g, what, &kids, [&](zhandle_t* zh, const void* d) {
    return group ? zoo_awget_children(zh, path.c_str(), &node_watcher, watch_ctx(group), &reply_to::on_names, d)
                 : zoo_aget_children(zh, path.c_str(), 0, &reply_to::on_names, d);
  });
  if (!rc) return std::nullopt;
  if (missing) *missing = *rc == ZNONODE;
  if (*rc == ZNONODE) return name_list{};
  if (*rc != ZOK) fail(*rc, what);
  return std::move(kids.names);
}

void drop_watch(session& sess, const std::string& path, bool children, const wake_target* watcher) noexcept {
  session_impl& s = impl_of(sess);
  const auto loop = s.handle.current();
  // The registry's lock is held while the removal is queued (deferred: a thread holding one of the
  // session's locks never waits for the handle's), so a later join's request goes after it.
  s.watches.drop(path, children, watcher, [&]() noexcept {
    if (!loop) return;
    try {
      loop->defer([&s, p = path, children](zhandle_t* zh) {
        // Removing one watcher only checks it on the server (the server keeps one watch per path
        // and kind for the connection): remove them all, which are ours alone. Connected: ask the
        // server (answered later; the client forgets its watcher with the answer). Otherwise forget
        // it locally only (local=1 does no I/O and calls no completion), so that a reconnect does
        // not re-arm it. The header declares the completion as void_completion_t*, but the client
        // stores and calls the pointer it is given as the function itself.
        static constexpr void_completion_t ignore_reply = [](int, const void*) {};
        if (!zh || s.states.view().closed) return;
        const auto type = children ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA;
        const bool connected = zoo_state(zh) == ZOO_CONNECTED_STATE;
        zoo_aremove_all_watches(zh, p.c_str(), type, connected ? 0 : 1,
                                reinterpret_cast<void_completion_t*>(ignore_reply), nullptr);
      });  // sent by the next request on the handle, or by the loop, which defer wakes
    } catch (...) {  // allocation failure: the watch stays armed; its event finds no waiter
    }
  });
}

std::optional<std::vector<node_seen>> watch_nodes(session& sess, const std::vector<std::shared_ptr<watch_slot>>& slots,
                                                  clock::time_point deadline) {
  session_impl& s = impl_of(sess);
  const std::size_t n = slots.size();
  const call_name watching{"zklock: watching ", n ? std::string_view{slots.front()->path} : "contenders"};
  const std::uint64_t g = s.states.live_generation(watching);
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
  for (std::size_t i = 0; i < n; ++i) groups[i] = s.watches.join(slots[i]->path, false, slots[i]);

  std::vector<std::size_t> todo(n);
  for (std::size_t i = 0; i < n; ++i) todo[i] = i;
  std::vector<int> rcs(n, ZSYSTEMERROR);
  std::vector<std::shared_ptr<reply_state>> sent(n);
  while (!todo.empty()) {
    if (const auto loop = s.live_loop(g, watching)) {
      loop->with_handle([&](zhandle_t* zh) {
        for (const std::size_t i : todo) {
          // getData, not exists: on a missing node it leaves no watch behind. Not sent: rcs[i] is
          // decided below as if it were the reply.
          sent[i] = session_impl::send_locked(
              *loop, zh,
              [&](zhandle_t* h, const void* d) {
                return zoo_awget(h, slots[i]->path.c_str(), &node_watcher, watch_ctx(groups[i]), &reply_to::on_data, d);
              },
              rcs[i]);
        }
      });
    } else {
      for (const std::size_t i : todo) rcs[i] = ZINVALIDSTATE;  // given up: as the client answers an expired handle
    }
    // Every sent request gets its reply: the server's, ZCONNECTIONLOSS / ZCLOSING, or the end of
    // its generation (then check_live below says which).
    for (const std::size_t i : todo)
      if (sent[i]) rcs[i] = s.await_reply(std::exchange(sent[i], nullptr), g, nullptr);
    if (std::ranges::any_of(todo, [&](std::size_t i) { return rcs[i] == ZINVALIDSTATE || rcs[i] == ZCLOSING; }))
      s.states.check_live(g, watching);
    std::vector<std::size_t> again;
    for (const std::size_t i : todo) {
      const int rc = rcs[i];
      const call_name what{"zklock: watching ", slots[i]->path, "READ", slots[i]->path};
      if (rc == ZOK) continue;
      if (rc == ZNONODE) {  // gone already: nothing armed
        seen[i] = node_seen::gone;
        s.watches.leave(slots[i]->path, slots[i].get());
        groups[i] = 0;
      } else if (!answered(rc, what)) {
        again.push_back(i);
      } else {
        fail(rc, what);
      }
    }
    todo = std::move(again);
    if (!todo.empty() && !s.states.wait_connected(deadline, g, watching)) return std::nullopt;
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
    const auto seen = watch_node(sess, n.path, g, clock::now() + impl_of(sess).opts.connect_timeout);
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
  session_impl* s;
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
  box->s->watches.leave(box->path, g.get());
  if (!g) return;
  g->watch_result(false);
  if (rc == ZNONODE || rc == ZSESSIONEXPIRED) g->wake();  // our node is gone already
}

}  // namespace

void watch_own_node(session& sess, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept {
  session_impl& s = impl_of(sess);
  try {
    auto box = std::make_unique<own_watch_box>(own_watch_box{&s, n.path, g});
    const std::uint64_t group = s.watches.join(n.path, false, g);
    int rc = ZCONNECTIONLOSS;
    const state_view v = s.states.view();
    if (v.live(n.generation) && v.state == session_state::connected)
      if (const auto loop = s.handle.current(); loop && loop->ctx.generation == n.generation)
        rc = loop->with_handle([&](zhandle_t* zh) {
          return zh ? zoo_awget(zh, n.path.c_str(), &node_watcher, watch_ctx(group), &on_own_watch, box.get())
                    : static_cast<int>(ZCONNECTIONLOSS);
        });
    if (rc == ZOK) {
      box.release();  // owned by the completion now, which always comes
      return;
    }
    s.watches.leave(n.path, g.get());
  } catch (...) {  // allocation failure: not watched
  }
  g->watch_result(false);
}

}  // namespace zklock::detail
