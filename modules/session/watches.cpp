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

/// Effects: on the loop's thread, in its watcher, after a data change of a held node: arms the
/// node's watch again (it is one-shot), whose reply's data says whether the change is a revocation
/// request (see hold_guard::data_seen). Never throws.
void rearm_held_watch(session_impl& s, io_loop& loop, const std::shared_ptr<hold_guard>& g) noexcept;

#if ZKLOCK_HAVE_SET_DATA_WATCHES
// zklock's addition to the C client it builds (tools/zookeeper-client/set_data_watches.c, renamed
// as the rest of it): several data watches armed by one SetWatches request, relative to a zxid.
extern "C" int zklock_zk_zoo_aset_data_watches(zhandle_t* zh, std::int64_t relative_zxid, int count,
                                                const char* const* paths, watcher_fn watcher, void* const* contexts,
                                                void_completion_t completion, const void* data);
#endif

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
  if (type == ZOO_CHANGED_EVENT && h->loop) {
    // A held node's data changed (a revocation request, perhaps): its watch is armed again, and
    // the reply's data says whether it is one. It is no loss.
    woken.wake_all([&](wake_target& t) noexcept {
      if (auto* g = dynamic_cast<hold_guard*>(&t)) {
        if (const auto held = g->weak_from_this().lock()) rearm_held_watch(*h->impl, *h->loop, held);
      } else {
        t.wake();
      }
    });
    return;
  }
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

std::uint64_t watch_registry::join(std::string_view path, const shared_path* shared, bool children,
                                   const std::shared_ptr<wake_target>& t) {
  std::lock_guard lk{mu_};
  auto open = open_.find(key{path, children});
  if (open == open_.end()) {
    const std::uint64_t id = next_++;
    const auto& g = groups_.emplace(id, group{shared ? *shared : shared_path{path}, children, {}}).first->second;
    try {
      open = open_.emplace(key{g.path.view(), children}, id).first;
    } catch (...) {
      groups_.erase(id);
      throw;
    }
  }
  groups_.find(open->second)->second.waiting.add(t);
  return open->second;
}

shared_path watch_registry::path_of(std::string_view path) {
  {
    std::lock_guard lk{mu_};
    if (const auto open = open_.find(key{path, false}); open != open_.end())
      return groups_.find(open->second)->second.path;
  }
  return shared_path{path};
}

std::vector<std::shared_ptr<wake_target>> watch_registry::armed(std::uint64_t id, std::int32_t version) {
  std::lock_guard lk{mu_};
  const auto it = groups_.find(id);
  if (it == groups_.end()) return {};  // fired, or the handle closed
  it->second.version = version;
  return it->second.waiting.live();
}

waiters watch_registry::take(std::uint64_t id) noexcept {
  std::lock_guard lk{mu_};
  const auto it = groups_.find(id);
  if (it == groups_.end()) return {};
  waiters out = it->second.waiting.take();
  const auto open = open_.find(key{it->second.path.view(), it->second.children});
  if (open != open_.end() && open->second == id) {
    forget(open);
  } else {  // (every group is open; kept safe all the same)
    if (it->second.sticky) --sticky_;
    groups_.erase(it);
  }
  return out;
}

void watch_registry::wake_all() noexcept {
  std::unordered_map<std::uint64_t, group> all;
  {
    std::lock_guard lk{mu_};
    open_.clear();  // first: its keys view the groups' paths
    all.swap(groups_);
    sticky_ = 0;
  }
  for (auto& [id, g] : all) g.waiting.wake_all();
}

// ---- listing and watching --------------------------------------------------------------------------

namespace {

/// Effects: removes this session's watches of `path` (children or data) from the server and the
/// client, holding the loop's lock of the handle `zh` (nullptr: closing, nothing to do).
void remove_watches(session_impl& s, zhandle_t* zh, const char* path, bool children) noexcept {
  // Removing one watcher only checks it on the server (the server keeps one watch per path and kind
  // for the connection): remove them all, which are ours alone. Connected: ask the server
  // (answered later; the client forgets its watcher with the answer). Otherwise forget it locally
  // only (local=1 does no I/O and calls no completion), so that a reconnect does not re-arm it. The
  // header declares the completion as void_completion_t*, but the client stores and calls the
  // pointer it is given as the function itself.
  static constexpr void_completion_t ignore_reply = [](int, const void*) {};
  if (!zh || s.states.view().closed) return;
  const auto type = children ? ZWATCHTYPE_CHILD : ZWATCHTYPE_DATA;
  const bool connected = zoo_state(zh) == ZOO_CONNECTED_STATE;
  zoo_aremove_all_watches(zh, path, type, connected ? 0 : 1, reinterpret_cast<void_completion_t*>(ignore_reply),
                          nullptr);
}

/// Effects: arms a data watch on `path` waking `watcher` (none if the node is missing).
/// Returns: whether the node is gone or present; nullopt if `deadline` passed.
/// Throws: std::system_error (session_expired, session_closed, the server's refusal).
std::optional<node_seen> watch_node(session& sess, const std::string& path, const std::shared_ptr<wake_target>& watcher,
                                    clock::time_point deadline, std::string* data = nullptr) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: watching ", path, "READ", path};
  const std::uint64_t g = s.states.live_generation(what);
  const std::uint64_t group = s.watches.join(path, false, watcher);
  // getData, not exists: on a missing node it leaves no watch behind.
  reply r;
  const auto rc = s.call(deadline, g, what, data ? &r : nullptr, [&](zhandle_t* zh, const void* d) {
    return zoo_awget(zh, path.c_str(), &node_watcher, watch_ctx(group), &reply_to::on_data, d);
  });
  if (!rc || *rc != ZOK) drop_watch(sess, path, false, watcher.get());
  if (!rc) return std::nullopt;
  if (*rc == ZNONODE) return node_seen::gone;
  if (*rc != ZOK) fail(*rc, what);
  if (data) *data = std::move(r.value);
  return node_seen::present;
}

}  // namespace

std::optional<name_list> list_children(session& sess, const std::string& path,
                                       const std::shared_ptr<wake_target>& watcher, clock::time_point deadline,
                                       bool* missing, std::int32_t* data_version) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: listing ", path, "READ", path};
  reply kids;
  const std::uint64_t g = s.states.live_generation(what);
  const std::uint64_t group = watcher ? s.watches.join(path, true, watcher) : 0;
  auto rc = s.call(deadline, g, what, &kids, [&](zhandle_t* zh, const void* d) {
    if (data_version)  // (the same request, with the node's stat)
      return group ? zoo_awget_children2(zh, path.c_str(), &node_watcher, watch_ctx(group), &reply_to::on_names_stat, d)
                   : zoo_aget_children2(zh, path.c_str(), 0, &reply_to::on_names_stat, d);
    return group ? zoo_awget_children(zh, path.c_str(), &node_watcher, watch_ctx(group), &reply_to::on_names, d)
                 : zoo_aget_children(zh, path.c_str(), 0, &reply_to::on_names, d);
  });
  if (rc && *rc == ZOK && data_version) *data_version = kids.stat.version;
  if (!rc) return std::nullopt;
  if (missing) *missing = *rc == ZNONODE;
  if (*rc == ZNONODE) return name_list{};
  if (*rc != ZOK) fail(*rc, what);
  return std::move(kids.names);
}

namespace {

/// Effects: queues the removal of this session's watches of `path` (children or data) on `loop`
/// (none: nothing to remove), sent by the next request on the handle, or by the loop, which defer
/// wakes. Called with the registry's lock held (deferred: a thread holding one of the session's
/// locks never waits for the handle's), so a later join's request goes after it. Never throws.
void defer_watch_removal(session_impl& s, io_loop* loop, std::string_view path, bool children) noexcept {
  if (!loop) return;
  try {
    loop->defer([&s, p = std::string{path}, children](zhandle_t* zh) { remove_watches(s, zh, p.c_str(), children); });
  } catch (...) {  // allocation failure: the watch stays armed; its event finds no waiter
  }
}

}  // namespace

void drop_watch(session& sess, std::string_view path, bool children, const wake_target* watcher) noexcept {
  session_impl& s = impl_of(sess);
  const auto loop = s.handle.current();
  s.watches.drop(path, children, watcher, [&]() noexcept { defer_watch_removal(s, loop.get(), path, children); });
}

shared_path watched_path(session& sess, std::string_view parent, std::string_view name) {
  if (name.empty()) return impl_of(sess).watches.path_of(parent);
  thread_local std::string full;  // (the thread's scratch: a path found open costs no allocation)
  full.assign(parent).append(1, '/').append(name);
  return impl_of(sess).watches.path_of(full);
}

void open_semaphore_watch(session& sess, const std::string& path) { impl_of(sess).watches.use_sticky(path); }

void close_semaphore_watch(session& sess, const std::string& path) noexcept {
  session_impl& s = impl_of(sess);
  const auto loop = s.handle.current();
  s.watches.unuse_sticky(path, [&]() noexcept { defer_watch_removal(s, loop.get(), path, false); });
}

namespace {

/// The context of a watch request whose reply no waiter waits for: the slot it arms, and the loop
/// whose thread runs the completion.
struct slot_watch_box {
  session_impl* s;
  io_loop* loop;
  std::shared_ptr<watch_slot> slot;
  clock::time_point sent;
  std::uint64_t sticky_group = 0;  // a sticky group's watch (watch_registry::join_sticky): its id
};

/// Effects: the reply to the request that arms sticky group `box.sticky_group` (a semaphore's
/// node): armed, its waiters that read the node at another data version are woken (a change they
/// have not seen); not armed, the group is forgotten and all its waiters are woken (gone: as
/// deleted; else with the failure). On the loop's thread.
void on_sticky_watch(slot_watch_box& box, int rc, const struct Stat* stat) noexcept {
  if (rc == ZOK && stat) {
    std::vector<std::shared_ptr<wake_target>> joined;
    try {
      joined = box.s->watches.armed(box.sticky_group, stat->version);
    } catch (...) {  // allocation failure: wake them all, to list again
      rc = ZSYSTEMERROR;
    }
    if (rc == ZOK) {
      const steps_here here;
      for (const auto& t : joined)
        if (auto* slot = dynamic_cast<watch_slot*>(t.get()); slot && slot->expect_version != stat->version) slot->wake();
      return;
    }
  }
  box.loop->flush_deferred();  // others' sends first (see io_loop::try_with_handle)
  auto woken = box.s->watches.take(box.sticky_group);
  const steps_here here;
  woken.wake_all([rc](wake_target& t) noexcept {
    if (auto* slot = dynamic_cast<watch_slot*>(&t))
      rc == ZNONODE ? slot->wake_deleted() : slot->wake_failed(rc == ZOK ? ZSYSTEMERROR : rc);
    else
      t.wake();
  });
}

extern "C" void on_slot_watch(int rc, const char*, int, const struct Stat* stat, const void* data) {
  std::unique_ptr<slot_watch_box> box{static_cast<slot_watch_box*>(const_cast<void*>(data))};
  if (rc == ZOK || rc == ZNONODE) box->s->round_trips.note(clock::now() - box->sent);  // a read's latency
  if (box->sticky_group != 0) return on_sticky_watch(*box, rc, stat);
  if (rc == ZOK) {  // armed: its event wakes the slot
    // Unless its waiter dropped it while the request was on its way: the drop found no watch to
    // remove (the client arms it with this reply, just before this call). Removed now, unless
    // another waiter of the session watches the node (its request, sent later, arms the same watch).
    if (box->slot->dropped()) {
      if (!box->s->watches.watched(box->slot->path, false))
        box->loop->with_handle([&](zhandle_t* zh) { remove_watches(*box->s, zh, box->slot->path.c_str(), false); });
    } else if (stat && box->slot->expect_version >= 0 && stat->version != box->slot->expect_version) {
      // A semaphore's lease count changed after its waiter read it, before this watch was armed:
      // the change the watch would have shown (its waiter lists again and reads the new count).
      const steps_here here;
      box->slot->wake();
    }
    return;
  }
  box->loop->flush_deferred();  // others' sends first (see io_loop::try_with_handle)
  box->s->watches.leave(box->slot->path, box->slot.get());  // nothing armed
  const steps_here here;  // an acquire it wakes takes its next step on this thread, as a reply's
  if (rc == ZNONODE)
    box->slot->wake_deleted();  // gone already: as if deleted now
  else
    box->slot->wake_failed(rc);
}

}  // namespace

namespace {

/// The outcome of joining the watch of one slot (arm_watches).
struct slot_join {
  std::uint64_t group = 0;
  bool send = true;      // its request is to be sent (else its sticky group's watch is armed or on its way)
  bool changed = false;  // that sticky watch was armed at another data version: wake the slot
  bool sticky = false;
};

/// Effects: undoes the join `j` of `slot`: leaves a one-shot group; forgets a sticky group it was to
/// arm, waking its waiters with `rc` (nothing is armed for them); else leaves the sticky group.
/// Never throws.
void unjoin(session_impl& s, const std::shared_ptr<watch_slot>& slot, const slot_join& j, int rc) noexcept {
  if (!j.sticky) {
    s.watches.leave(slot->path, slot.get());
  } else if (j.send) {
    s.watches.take(j.group).wake_all([rc](wake_target& t) noexcept {
      if (auto* w = dynamic_cast<watch_slot*>(&t))
        w->wake_failed(rc);
      else
        t.wake();
    });
  } else {
    s.watches.drop(slot->path, false, slot.get(), [] {});  // (sticky: never removes the watch)
  }
  slot->wake_failed(rc);  // (also if an event took its group meanwhile)
}

#if ZKLOCK_HAVE_SET_DATA_WATCHES
/// The context of a waiter's first watches sent as one request (zoo_aset_data_watches): our own
/// node's first, then the slots'.
struct set_watches_box {
  session_impl* s;
  io_loop* loop;
  clock::time_point sent;
  std::string own_path;
  std::weak_ptr<hold_guard> guard;
  unsigned ticket = 0;  // the guard's claim (hold_guard::watch_claims)
  std::vector<std::shared_ptr<watch_slot>> slots;
};

/// Effects: forgets the C client's watchers of `path` (they were made active as the request was
/// queued, and the client would arm them again after a reconnection) unless another waiter of the
/// session watches it. On the loop's thread.
void forget_unwatched(const set_watches_box& box, const char* path) noexcept {
  if (box.s->watches.watched(path, false)) return;
  box.loop->with_handle([&](zhandle_t* zh) { remove_watches(*box.s, zh, path, false); });
}

/// The reply to the request of `data` (a set_watches_box). The events of nodes gone or changed came
/// before it (node_watcher woke their waiters). Taken: every other watch is armed. Not taken (the
/// connection was lost, the session ended): none is, and each waiter learns it as from its own
/// request's failure.
extern "C" void on_set_watches(int rc, const void* data) {
  std::unique_ptr<set_watches_box> box{static_cast<set_watches_box*>(const_cast<void*>(data))};
  const auto g = box->guard.lock();
  if (rc == ZOK) {
    box->s->round_trips.note(clock::now() - box->sent);  // a read's latency
    if (g) g->watch_result_for(box->ticket, true);
    for (const auto& slot : box->slots)  // dropped while the request was on its way: removed now
      if (slot->dropped()) forget_unwatched(*box, slot->path.c_str());
    return;
  }
  box->loop->flush_deferred();  // others' sends first (see io_loop::try_with_handle)
  box->s->watches.leave(box->own_path, g.get());
  forget_unwatched(*box, box->own_path.c_str());
  if (g) {
    g->watch_result_for(box->ticket, false);
    if (rc == ZSESSIONEXPIRED) g->wake();  // our node is gone already
  }
  const steps_here here;  // an acquire it wakes takes its next step on this thread, as a reply's
  for (const auto& slot : box->slots) {
    box->s->watches.leave(slot->path, slot.get());  // nothing armed
    forget_unwatched(*box, slot->path.c_str());
    if (!slot->fired()) slot->wake_failed(rc);  // (an event before the failure told it already)
  }
}
#endif

}  // namespace

std::size_t arm_watches(session& sess, std::uint64_t g, const std::vector<std::shared_ptr<watch_slot>>& slots,
                        const own_watch* own) {
  session_impl& s = impl_of(sess);
  std::size_t sent = 0;
  // Our own node's watch goes in the slots' request where the client can send one for them all
  // (zoo_aset_data_watches; not for a semaphore node's sticky watch, whose reply must bring the
  // node's version), relative to our node's creation: else by itself, first.
  bool combine = false;
#if ZKLOCK_HAVE_SET_DATA_WATCHES
  if (own && own->node.czxid > 0 && s.states.view().state == session_state::connected)
    combine = std::any_of(slots.begin(), slots.end(), [](const auto& w) { return w->expect_version < 0; });
#endif
  if (own && !combine) {
    watch_own_node(sess, own->node, own->guard);
    ++sent;
    own = nullptr;
  }
  // From here until it is sent, a throw leaves our own node's watch not armed.
  auto own_not_armed = [&]() noexcept {
    if (own) std::exchange(own, nullptr)->guard->watch_result(false);
  };
  if (slots.empty()) return sent;
  const call_name watching{"zklock: watching ", slots.front()->path};
  std::vector<std::unique_ptr<slot_watch_box>> boxes;
  std::vector<slot_join> joins;
  std::vector<int> rcs(slots.size(), ZINVALIDSTATE);  // not sent: as the client answers an expired handle
  std::uint64_t own_group = 0;
  try {
    s.states.check_live(g, watching);  // (not the live generation: the waiter's node is of `g`)
    boxes.reserve(slots.size());
    joins.reserve(slots.size());
  } catch (...) {
    own_not_armed();
    throw;
  }
  const auto current = s.handle.current();
  // A sticky group forgotten to stay within its bound: its watch is removed (as drop_watch does).
  auto evict = [&](std::string_view path) noexcept { defer_watch_removal(s, current.get(), path, false); };
  try {
    if (own) {
      own->guard->watching(own->node);
      own_group = s.watches.join(own->node.path, false, own->guard);
    }
    for (const auto& slot : slots) {
      if (slot->expect_version >= 0) {
        auto j = s.watches.join_sticky(slot->path, g, slot->expect_version, slot, evict);
        j.stale.wake_all();  // (they wait on a generation that is over: they learn it by looking again)
        joins.push_back(slot_join{j.id, j.send, j.changed, true});
      } else {
        joins.push_back(slot_join{s.watches.join(slot->path, false, slot)});
      }
      boxes.push_back(std::make_unique<slot_watch_box>(slot_watch_box{&s, nullptr, slot, {}}));
      if (joins.back().sticky) boxes.back()->sticky_group = joins.back().group;
    }
  } catch (...) {  // (the slots' waiter gives them up: waking them wakes nobody)
    for (std::size_t i = 0; i < joins.size(); ++i) unjoin(s, slots[i], joins[i], ZSYSTEMERROR);
    if (own && own_group != 0) s.watches.leave(own->node.path, own->guard.get());
    own_not_armed();
    throw;
  }
  std::shared_ptr<io_loop> loop;
  try {
    loop = s.live_loop(g, watching);
  } catch (...) {  // the generation ended meanwhile
    for (std::size_t i = 0; i < joins.size(); ++i) unjoin(s, slots[i], joins[i], ZINVALIDSTATE);
    if (own) s.watches.leave(own->node.path, own->guard.get());
    own_not_armed();
    throw;
  }
  for (std::size_t i = 0; i < slots.size(); ++i)
    if (!joins[i].send) rcs[i] = ZOK;  // armed already (or on its way) by another waiter of the session
  int own_rc = ZINVALIDSTATE;
  if (loop) {
    loop->with_handle([&](zhandle_t* zh) {
      const auto now = clock::now();
#if ZKLOCK_HAVE_SET_DATA_WATCHES
      if (own && zh) {
        // One request: our node first, then every contender's slot (a sticky one goes below).
        std::vector<const char*> paths{own->node.path.c_str()};
        std::vector<void*> contexts{watch_ctx(own_group)};
        std::unique_ptr<set_watches_box> box;
        std::vector<std::size_t> in;
        try {
          box = std::make_unique<set_watches_box>(
              set_watches_box{&s, loop.get(), now, own->node.path, own->guard, own->guard->watch_claims(), {}});
          for (std::size_t i = 0; i < slots.size(); ++i) {
            if (joins[i].sticky) continue;
            paths.push_back(slots[i]->path.c_str());
            contexts.push_back(watch_ctx(joins[i].group));
            box->slots.push_back(slots[i]);
            in.push_back(i);
          }
        } catch (...) {  // allocation failure: nothing sent (below: each learns it failed)
          own_rc = ZSYSTEMERROR;
          for (std::size_t i = 0; i < slots.size(); ++i)
            if (!joins[i].sticky) rcs[i] = ZSYSTEMERROR;
          in.clear();
          box.reset();
        }
        if (box) {
          own_rc = zklock_zk_zoo_aset_data_watches(zh, own->node.czxid, static_cast<int>(paths.size()), paths.data(),
                                                   &node_watcher, contexts.data(), &on_set_watches, box.get());
          for (const std::size_t i : in) rcs[i] = own_rc;
          if (own_rc == ZOK) {
            box.release();  // owned by the completion now, which always comes
            ++sent;
          }
        }
      }
#endif
      for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!joins[i].send || (own && !joins[i].sticky)) continue;
        ++sent;
        boxes[i]->loop = loop.get();
        boxes[i]->sent = now;
        // getData, not exists: on a missing node it leaves no watch behind.
        rcs[i] = zh ? zoo_awget(zh, slots[i]->path.c_str(), &node_watcher, watch_ctx(joins[i].group), &on_slot_watch,
                                boxes[i].get())
                    : static_cast<int>(ZINVALIDSTATE);
        if (rcs[i] == ZOK) boxes[i].release();  // owned by the completion now, which always comes
      }
    });
  }
  if (own && own_rc != ZOK) {  // not sent: not armed (the client made nothing active)
    s.watches.leave(own->node.path, own->guard.get());
    own->guard->watch_result(false);
  }
  // Not sent: the slot fires with the failure at once (its waiter lists again and learns there).
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (rcs[i] == ZOK) {
      if (joins[i].changed) slots[i]->wake();  // the node changed since its waiter read it
      continue;
    }
    unjoin(s, slots[i], joins[i], rcs[i]);
  }
  return sent;
}

void watch_refused(std::string_view path, int rc) {
  if (rc == ZNONODE || meaning_of(rc) != rc_meaning::answered) return;
  fail(rc, call_name{"zklock: watching ", path, "READ", path});
}

// ---- the holder's watch on its own node ------------------------------------------------------------

void watch_held_node(session& sess, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept {
  if (!session_alive_for(sess, n)) {
    g->wake();
    return;
  }
  try {
    g->watching(n);
    std::string data;
    const auto seen = watch_node(sess, n.path, g, clock::now() + impl_of(sess).opts.connect_timeout, &data);
    if (seen && *seen == node_seen::gone) g->wake();
    g->watch_result(seen && *seen != node_seen::gone);
    if (seen && *seen == node_seen::present) g->data_seen(data);
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

extern "C" void on_own_watch(int rc, const char* value, int len, const struct Stat*, const void* data) {
  std::unique_ptr<own_watch_box> box{static_cast<own_watch_box*>(const_cast<void*>(data))};
  auto g = box->guard.lock();
  if (rc == ZOK) {
    if (g) {
      g->watch_result(true);
      g->data_seen(value && len > 0 ? std::string_view{value, static_cast<std::size_t>(len)} : std::string_view{});
    }
    return;
  }
  box->s->watches.leave(box->path, g.get());
  if (!g) return;
  g->watch_result(false);
  if (rc == ZNONODE || rc == ZSESSIONEXPIRED) g->wake();  // our node is gone already
}

}  // namespace

namespace {

/// Effects: sends the data watch of our node `n` for `g` through `loop`'s handle if `loop` is the
/// handle of n's generation (`loop` null: none; the caller checked the rest), whose completion
/// records whether it is armed and reads the node's data; else records it not armed. Never throws.
void send_own_watch(session_impl& s, io_loop* loop, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept {
  try {
    auto box = std::make_unique<own_watch_box>(own_watch_box{&s, n.path, g});
    const std::uint64_t group = s.watches.join(n.path, false, g);
    int rc = ZCONNECTIONLOSS;
    if (loop && loop->ctx.generation == n.generation)
      rc = loop->with_handle([&](zhandle_t* zh) {  // (recursive: the loop's own thread may call it)
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

}  // namespace

void rearm_held_watch(session_impl& s, io_loop& loop, const std::shared_ptr<hold_guard>& g) noexcept {
  try {
    const held_node n = g->watched_node();
    if (n.path.empty() || g->released()) return;
    g->watch_result(false);  // it fired
    if (g->claim_watch()) send_own_watch(s, &loop, n, g);  // on the loop's thread, in its watcher
  } catch (...) {  // allocation failure: not watched
    g->watch_result(false);
  }
}

void watch_own_node(session& sess, const held_node& n, const std::shared_ptr<hold_guard>& g) noexcept {
  session_impl& s = impl_of(sess);
  std::shared_ptr<io_loop> loop;
  try {
    g->watching(n);
    const state_view v = s.states.view();
    if (v.live(n.generation) && v.state == session_state::connected) loop = s.handle.current();
  } catch (...) {  // allocation failure: not watched
  }
  send_own_watch(s, loop.get(), n, g);
}

}  // namespace zklock::detail
