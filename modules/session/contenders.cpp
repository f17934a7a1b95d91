// SPDX-License-Identifier: Apache-2.0
// Contender creation: the ephemeral sequential node a lock call queues with. create_and_list sends
// the create and the first listing together (pipelined); a create whose outcome is unknown is
// settled by protected creation (find the node by its unique prefix, adopt it only if this session
// owns it); missing lock nodes are created as containers; the lock node's ACL is checked once per
// path, by the server (the ACL probe). Also the ACL of every node zklock creates. Runs on the
// caller's thread; the pipelined replies arrive on the handle's I/O loop thread.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <iterator>
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
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;

namespace zklock::detail {

namespace {

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

}  // namespace

chosen_acl::chosen_acl(const session_options& o) {
  entries.reserve(o.acl.size());
  for (const zklock::acl_entry& e : o.acl)  // (the C client's Id has char*, and only reads it)
    entries.push_back({e.perms, {const_cast<char*>(e.scheme.c_str()), const_cast<char*>(e.id.c_str())}});
  vector = {static_cast<std::int32_t>(entries.size()), entries.data()};
}

/// Returns: the ACL of the nodes zklock creates: session_options::acl if it chooses one, else
/// creator-all + world-read with credentials or SASL (see above), ZOO_OPEN_ACL_UNSAFE without.
ACL_vector* contender_acl(session_impl& s) {
  if (s.acl.vector.count > 0) return &s.acl.vector;
  return s.opts.auth.empty() && !s.opts.sasl ? &ZOO_OPEN_ACL_UNSAFE : &CREATOR_ALL_WORLD_READ_ACL;
}

/// Creates every missing ancestor of `path` and `path` itself as container nodes: `path` first
/// (usually the only one missing), walking up only while a parent is missing too, then down again.
std::optional<int> ensure_containers(session_impl& s, const std::string& path, std::uint64_t g,
                                     clock::time_point deadline, std::size_t* sent) {
  auto create = [&](const std::string& node) -> std::optional<int> {
    const call_name what{"zklock: creating ", node, "CREATE", parent_of(node)};
    if (sent) ++*sent;
    auto rc = s.call(deadline, g, what, nullptr, [&](zhandle_t* zh, const void* data) {
      return zoo_acreate(zh, node.c_str(), nullptr, -1, contender_acl(s), ZOO_CONTAINER, &reply_to::on_string, data);
    });
    if (rc && *rc != ZOK && *rc != ZNODEEXISTS && *rc != ZNONODE) fail(*rc, what);
    return rc;
  };
  for (;;) {
    std::vector<std::string> below;  // missing nodes under the deepest one that exists, deepest first
    std::string node = path;
    for (;;) {
      const auto rc = create(node);
      if (!rc) return std::nullopt;
      if (*rc != ZNONODE) break;
      below.push_back(node);
      node = std::string{parent_of(node)};  // "/" always exists: a top-level node never says ZNONODE
    }
    if (below.empty()) return ZOK;
    below.erase(below.begin());  // `path` itself: created again below, last
    bool vanished = false;
    for (auto it = below.rbegin(); it != below.rend() && !vanished; ++it) {
      const auto rc = create(*it);
      if (!rc) return std::nullopt;
      vanished = *rc == ZNONODE;  // a parent went meanwhile (deleted by someone): start over
    }
    if (vanished) continue;
    const auto rc = create(path);
    if (!rc) return std::nullopt;
    if (*rc != ZNONODE) return ZOK;
  }
}

namespace {

/// Throws: errc::no_auth: the ACL of `lock_path` would not let this session delete its contender
/// node again (`whom`: for which identities zklock judged it, or empty where the server did).
[[noreturn]] void refuse_undeletable(const std::string& lock_path, std::string_view whom) {
  throw_error(errc::no_auth, "zklock: the ACL of " + lock_path +
                                 " does not let this session delete its contender node again (needs DELETE "
                                 "permission on " + lock_path + std::string{whom} + "): refusing to queue there");
}

/// The one-request path's ACL check (the pipelined one is the ACL probe, below).
/// Effects: once per session and lock path, reads the lock node's ACL and refuses to queue there
/// if it would not let this session delete its contender node again (ZooKeeper checks DELETE on
/// the parent): the create would succeed and the release fail, leaving a node that blocks the
/// queue for the whole session. A missing lock node is fine: zklock creates it with an ACL that
/// lets its creator delete. Returns: nullopt if `deadline` passed, else whether the lock node is
/// missing (as far as this call saw: false once the path was checked). Throws: errc::no_auth.
std::optional<bool> check_deletable(session_impl& s, const std::string& lock_path, std::uint64_t g,
                                    clock::time_point deadline, std::size_t* sent) {
  if (s.deletable.contains(lock_path)) return false;
  const call_name what{"zklock: reading the ACL of ", lock_path, "READ or ADMIN", lock_path};
  reply acl;
  if (sent) ++*sent;
  auto rc = s.call(deadline, g, what, &acl, [&](zhandle_t* zh, const void* data) {
    return zoo_aget_acl(zh, lock_path.c_str(), &reply_to::on_acl, data);
  });
  if (!rc) return std::nullopt;
  s.fresh_paths.store(*rc == ZNONODE, std::memory_order_relaxed);
  if (*rc == ZOK) {
    const std::vector<acl_entry>& entries = acl.acl;
    bool may_delete = acl_may_delete(entries, {});  // as anyone (world, or a scheme zklock cannot judge)
    for (const auth_info& a : s.opts.auth)  // or as one of our digest users
      if (!may_delete && a.scheme == "digest" && a.credential.find(':') != std::string::npos)
        may_delete = acl_may_delete(entries, digest_identity(a.credential));
    if (!may_delete) refuse_undeletable(lock_path, " for world:anyone or one of our digest users");
  } else if (*rc != ZNONODE) {
    fail(*rc, what);
  }
  s.deletable.insert(lock_path);
  return *rc == ZNONODE;
}

std::optional<held_node> create_contender_from(session_impl& s, const std::string& lock_path, const std::string& prefix,
                                               std::string_view data, clock::time_point deadline, std::uint64_t g,
                                               bool maybe_created, std::size_t* sent, std::string_view lock_data);

/// Effects: sends the transaction of `t` (an acl_probe or a fresh_lock: its ops, into its results)
/// if the handle `zh` of `loop` is connected; `t` lives until the reply (its reply_state keeps
/// it), which the client writes the results into. The caller holds the loop's lock, and the ops'
/// paths live until this returns (the client copies the requests at once).
/// Returns: as send_locked (not connected: nullptr, ZCONNECTIONLOSS).
template <class Transaction>
std::shared_ptr<reply_state> send_transaction(io_loop& loop, zhandle_t* handle, const std::shared_ptr<Transaction>& t,
                                              int& rc) {
  return session_impl::send_locked(
      loop, handle,
      [&](zhandle_t* zh, const void* d) {
        if (zoo_state(zh) != ZOO_CONNECTED_STATE) return static_cast<int>(ZCONNECTIONLOSS);
        static_cast<reply_state*>(const_cast<void*>(d))->keep = t;
        return zoo_amulti(zh, static_cast<int>(std::size(t->ops)), t->ops, t->results, &reply_to::on_void, d);
      },
      rc);
}

/// The ACL probe: on a lock path this session has not checked yet, our contender is created by a
/// transaction that also creates, stamps and deletes a probe node beside it (named our node's
/// prefix, without the sequence). The server checks CREATE and DELETE on the lock node for every
/// operation, so the transaction commits only if we may delete our node again, exactly as the
/// server judges it, with no read of the ACL first (one round trip less); other clients never see
/// the probe. All its operations share one zxid, so the probe's stat (from the stamp: a create in
/// a transaction returns no stat) gives our node's czxid, the fencing token. Sent by
/// send_transaction.
///
/// The C client's zoo_amulti (3.8.0) is unsafe on a handle whose session is over: it then skips
/// initialising the later operations' requests and frees their uninitialised paths (a double free,
/// seen in a test that expires a session under a thousand acquires). So the transaction is sent
/// only while the handle is connected (an expiry needs a reconnection first), with one path
/// pointer for every operation (what such a stale request path would hold), and never with a
/// chroot (whose path copies that call would free twice); else the path's ACL is read first.
struct acl_probe {
  static constexpr int create_ours = 0, create_probe = 1, stamp_probe = 2, delete_probe = 3;
  zoo_op_t ops[4];
  zoo_op_result_t results[4]{};
  struct Stat stat {};
  std::vector<char> created;  // our node's name, as the server made it

  acl_probe(session_impl& s, const std::string& node_prefix, std::string_view data)
      : created(node_prefix.size() + 16) {  // + the sequence's 10 digits
    const char* path = node_prefix.c_str();  // every operation's (see above)
    zoo_create_op_init(&ops[create_ours], path, data.data(), static_cast<int>(data.size()), contender_acl(s),
                       ZOO_EPHEMERAL_SEQUENTIAL, created.data(), static_cast<int>(created.size()));
    // The probe is never seen, so its ACL is the open one (the stamp needs WRITE on it).
    zoo_create_op_init(&ops[create_probe], path, nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, nullptr, 0);
    zoo_set_op_init(&ops[stamp_probe], path, nullptr, -1, -1, &stat);
    zoo_delete_op_init(&ops[delete_probe], path, -1);
  }
  /// Effects: reports the server's refusal `rc` of the transaction, unless the lock node (or its
  /// parent) is missing: then returns.
  /// Throws: errc::no_auth naming the permission missing, or fail()'s error.
  void refused(const std::string& lock_path, int rc, const call_name& what) const {
    const int first = results[create_ours].err;  // ops after the failed one say ZRUNTIMEINCONSISTENCY
    if (first == ZNONODE) return;
    if (results[delete_probe].err == ZNOAUTH) refuse_undeletable(lock_path, "");
    const call_name creating{"zklock: creating a contender under ", lock_path, "CREATE", lock_path};
    if (first != ZOK && first != ZRUNTIMEINCONSISTENCY) fail(first, creating);
    fail(rc, what);
  }
};

#if ZKLOCK_HAVE_MULTI_CONTAINER
/// A fresh lock node and our contender in one transaction, where the C client reads a container's
/// create result with its stat (tools/build-zookeeper-client): on a path whose lock node is likely
/// missing, with the default ACL (contender_acl: ours lets us delete our node again, so no probe is
/// needed). The container's stat carries the transaction's zxid, which is our node's czxid. A lock
/// node that exists after all fails the whole transaction (nothing is created): the acquire then
/// sends the ACL probe's transaction. Sent as the probe is (send_transaction).
struct fresh_lock {
  static constexpr int create_lock = 0, create_ours = 1;
  zoo_op_t ops[2];
  zoo_op_result_t results[2]{};
  struct Stat stat {};
  std::vector<char> created;  // our node's name, as the server made it

  fresh_lock(session_impl& s, const std::string& lock_path, const std::string& node_prefix, std::string_view data)
      : created(node_prefix.size() + 16) {  // + the sequence's 10 digits
    zoo_create_op_init(&ops[create_lock], lock_path.c_str(), nullptr, -1, contender_acl(s), ZOO_CONTAINER, nullptr, 0);
    results[create_lock].stat = &stat;  // (the patched client copies the container's stat there)
    zoo_create_op_init(&ops[create_ours], node_prefix.c_str(), data.data(), static_cast<int>(data.size()),
                       contender_acl(s), ZOO_EPHEMERAL_SEQUENTIAL, created.data(), static_cast<int>(created.size()));
  }
};
#endif

}  // namespace

std::optional<queued_node> create_and_list(session& sess, const std::string& lock_path, const std::string& prefix,
                                           std::string_view data, clock::time_point deadline, std::size_t* sent,
                                           create_sent* turn, bool fresh_likely, std::string_view lock_data) {
  struct turn_guard {  // the turn ends with the create's send, or when this call ends
    create_sent* t;
    void done() noexcept {
      if (t) std::exchange(t, nullptr)->sent();
    }
    ~turn_guard() { done(); }
  } in_turn{turn};
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: queueing under ", lock_path, "CREATE", lock_path};
  const std::uint64_t g = s.states.live_generation(what);
  const std::string node_prefix = lock_path + "/" + prefix;
  // A path checked before takes the plain create; else the ACL probe's transaction. A lock node
  // likely missing (as the last one this session met was: free locks' nodes are containers, which
  // the server removes) is created right before it, in the same round trip.
  bool checked = s.deletable.contains(lock_path);
  bool make_lock = !checked && fresh_likely && s.fresh_paths.load(std::memory_order_relaxed);
  if (!checked && !s.chroot.empty()) {  // no probe (see acl_probe): read the ACL first
    const auto missing = check_deletable(s, lock_path, g, deadline, sent);
    if (!missing) return std::nullopt;
    checked = true;
    make_lock = *missing;
  }
  // A lock node likely missing, with the default ACL: the lock node and ours in one transaction.
  // Until a few of those succeeded in a row, only a few go at once (a wrong guess costs each a
  // round trip); the others send the lock node's create beside the probe's, right either way.
#if ZKLOCK_HAVE_MULTI_CONTAINER
  bool trial = false;
  if (make_lock && s.acl.vector.count == 0 && s.chroot.empty() &&
      s.fresh_streak.load(std::memory_order_relaxed) < session_impl::fresh_trials_max) {
    trial = s.fresh_trials.fetch_add(1, std::memory_order_relaxed) < session_impl::fresh_trials_max;
    if (!trial) s.fresh_trials.fetch_sub(1, std::memory_order_relaxed);
  }
  struct trial_guard {  // a trial ends with this call
    session_impl& s;
    bool on;
    ~trial_guard() {
      if (on) s.fresh_trials.fetch_sub(1, std::memory_order_relaxed);
    }
  } in_trial{s, trial};
  const auto fresh = make_lock && s.acl.vector.count == 0 && s.chroot.empty() &&
                             (trial || s.fresh_streak.load(std::memory_order_relaxed) >= session_impl::fresh_trials_max)
                         ? std::make_shared<fresh_lock>(s, lock_path, node_prefix, data)
                         : nullptr;
  if (fresh) make_lock = false;
#else
  constexpr bool fresh = false;  // (Debian's client: its zoo_amulti cannot read a container's result)
#endif
  const auto probe = checked || fresh ? nullptr : std::make_shared<acl_probe>(s, node_prefix, data);
  std::shared_ptr<reply_state> parent, create, list;
  int prc = ZOK, crc = ZOK, lrc = ZOK;
  const auto loop = s.live_loop(g, what);
  if (!loop) crc = ZINVALIDSTATE;  // given up: as the client answers an expired handle
  // Handed over together, holding the handle's lock: nothing of another thread's goes between them.
  if (loop) loop->with_handle([&](zhandle_t* zh) {
    if (make_lock) {
      parent = session_impl::send_locked(
          *loop, zh,
          [&](zhandle_t* h, const void* d) {
            return zoo_acreate(h, lock_path.c_str(), nullptr, -1, contender_acl(s), ZOO_CONTAINER, &reply_to::on_string,
                               d);
          },
          prc);
      if (parent && sent) ++*sent;
    }
    if (fresh) {
#if ZKLOCK_HAVE_MULTI_CONTAINER
      create = send_transaction(*loop, zh, fresh, crc);
#endif
    } else if (probe) {
      create = send_transaction(*loop, zh, probe, crc);
    } else {
      create = session_impl::send_locked(
          *loop, zh,
          [&](zhandle_t* h, const void* d) {
            return zoo_acreate2(h, node_prefix.c_str(), data.data(), static_cast<int>(data.size()), contender_acl(s),
                                ZOO_EPHEMERAL_SEQUENTIAL, &reply_to::on_string_stat, d);
          },
          crc);
    }
    // Queued behind the creates sent before it: the next acquire of the path may send its own. On
    // a path not checked yet the turn ends with this call instead: the create may fail for a
    // missing lock node, and the one-request path below must still create ours before the next's.
    if (checked && !make_lock) in_turn.done();
    if (create) {
      if (sent) ++*sent;
      // getChildren2: the same request, with the lock node's stat (whose data length tells whether
      // it may be a semaphore's node) in the reply.
      list = session_impl::send_locked(
          *loop, zh,
          [&](zhandle_t* h, const void* d) {
            return zoo_aget_children2(h, lock_path.c_str(), 0, &reply_to::on_names_stat, d);
          },
          lrc);
      if (list && sent) ++*sent;
    }
  });
  // The one-request path, for what the pipelined requests did not settle: checks the ACL first
  // on a path not checked yet (by reading it), and adopts a node whose create's outcome was unknown.
  auto one_by_one = [&](bool maybe_created) -> std::optional<queued_node> {
    if (!s.deletable.contains(lock_path)) {
      std::optional<bool> checked_now;
      try {
        checked_now = check_deletable(s, lock_path, g, deadline, sent);
      } catch (...) {
        if (maybe_created) s.defer_delete({lock_path, prefix, g});
        throw;
      }
      if (!checked_now) {
        if (maybe_created) s.defer_delete({lock_path, prefix, g});
        return std::nullopt;
      }
    }
    auto node = create_contender_from(s, lock_path, prefix, data, deadline, g, maybe_created, sent, lock_data);
    if (!node) return std::nullopt;
    return queued_node{std::move(*node), std::nullopt};
  };
  // Every sent request gets its reply: the server's, ZCONNECTIONLOSS / ZCLOSING, or the end of its
  // generation. Waited for last one first: replies come in the order sent, so the others are in by
  // then (one wake-up, not three). The lock node's create is answered before the one-request paths
  // below run (they rely on its outcome).
  reply created, listed;
  const int list_rc = list ? s.await_reply(list, g, &listed) : lrc;
  if (parent) prc = s.await_reply(parent, g, nullptr);
  if (!create) return one_by_one(false);  // not sent (not connected, or bad arguments)
  const int create_rc = s.await_reply(create, g, &created);
#if ZKLOCK_HAVE_MULTI_CONTAINER
  if (fresh && create_rc == ZOK) {  // the lock node is ours, made with our ACL
    s.deletable.insert(lock_path);
    created.value = fresh->created.data();
    created.stat.czxid = fresh->stat.czxid;
    if (s.fresh_streak.load(std::memory_order_relaxed) < session_impl::fresh_trials_max)
      s.fresh_streak.fetch_add(1, std::memory_order_relaxed);
  } else if (fresh && fresh->results[fresh_lock::create_lock].err == ZNODEEXISTS) {
    // The lock node was there after all (nothing was created): the ACL probe's transaction now.
    s.fresh_paths.store(false, std::memory_order_relaxed);
    s.fresh_streak.store(0, std::memory_order_relaxed);
    if (std::exchange(in_trial.on, false)) s.fresh_trials.fetch_sub(1, std::memory_order_relaxed);
    return create_and_list(sess, lock_path, prefix, data, deadline, sent, std::exchange(in_turn.t, nullptr), false,
                           lock_data);
  }
#endif
  if (create_rc == ZOK) {
    if (probe) {
      s.deletable.insert(lock_path);
      s.fresh_paths.store(parent && prc == ZOK, std::memory_order_relaxed);
      if (parent && prc == ZOK) {  // (the lock node was missing: so may the next one be)
        if (s.fresh_streak.load(std::memory_order_relaxed) < session_impl::fresh_trials_max)
          s.fresh_streak.fetch_add(1, std::memory_order_relaxed);
      } else if (parent) {
        s.fresh_streak.store(0, std::memory_order_relaxed);
      }
      created.value = probe->created.data();
      created.stat.czxid = probe->stat.czxid;
    }
    queued_node q{held_node{std::move(created.value), created.stat.czxid, g}, std::nullopt};
    if (list_rc == ZOK) {
      q.listing = std::move(listed.names);
      q.lock_data_length = listed.stat.dataLength;
      q.lock_data_version = listed.stat.version;
    }
    return q;
  }
  // Not the server's answer (a lost connection, an ending session or handle: e.g. UNKNOWNSESSION for
  // a transaction of a session the server is ending), or our own failure: the create may be done.
  const bool unknown = meaning_of(create_rc) != rc_meaning::answered || create_rc == ZSYSTEMERROR;
  if (probe && !unknown) {
    probe->refused(lock_path, create_rc, what);  // returns if the lock node is missing
    s.fresh_paths.store(true, std::memory_order_relaxed);
  }
  // Failed (missing lock node, NOAUTH, ...) or unknown (the connection was lost, or the generation
  // ended): the one-request path handles each case, adopting a node that was created after all.
  return one_by_one(unknown);
}

namespace {

std::optional<held_node> create_contender_from(session_impl& s, const std::string& lock_path, const std::string& prefix,
                                               std::string_view data, clock::time_point deadline, std::uint64_t g,
                                               bool maybe_created, std::size_t* sent, std::string_view lock_data) {
  const std::string node_prefix = lock_path + "/" + prefix;
  const call_name looking{"zklock: looking for our contender under ", lock_path, "READ", lock_path};
  const call_name creating{"zklock: creating a contender under ", lock_path, "CREATE", lock_path};
  auto give_up = [&]() -> std::optional<held_node> {
    if (maybe_created) s.defer_delete({lock_path, prefix, g});
    return std::nullopt;
  };
  for (;;) {
    if (maybe_created) {
      // Protected creation: find the node by its unique prefix, adopt it only if it is ours.
      reply kids;
      if (sent) ++*sent;
      auto rc = s.call(deadline, g, looking, &kids, [&](zhandle_t* zh, const void* d) {
        return zoo_aget_children(zh, lock_path.c_str(), 0, &reply_to::on_names, d);
      });
      if (!rc) return give_up();
      std::string found;
      if (*rc == ZOK) {
        for (const std::string_view kid : kids.names)
          if (kid.starts_with(prefix)) found = kid;
      } else if (*rc != ZNONODE) {
        // We cannot look (e.g. NOAUTH on reading the lock node): a node of ours may exist. The
        // session tries to remove it (it can only if it may list), and we report the refusal.
        give_up();
        fail(*rc, looking);
      }
      if (!found.empty()) {
        const std::string full = lock_path + "/" + found;
        reply st;
        if (sent) ++*sent;
        auto rc2 = s.call(deadline, g, looking, &st, [&](zhandle_t* zh, const void* d) {
          return zoo_aexists(zh, full.c_str(), 0, &reply_to::on_stat, d);
        });
        if (!rc2) return give_up();
        if (*rc2 == ZOK && st.stat.ephemeralOwner == s.states.view().id) return held_node{full, st.stat.czxid, g};
      }
      maybe_created = false;
    }
    reply created;
    if (sent) ++*sent;
    const int rc = s.request(g, creating, &created, [&](zhandle_t* zh, const void* d) {
      return zoo_acreate2(zh, node_prefix.c_str(), data.data(), static_cast<int>(data.size()), contender_acl(s),
                          ZOO_EPHEMERAL_SEQUENTIAL, &reply_to::on_string_stat, d);
    });
    if (rc == ZOK) return held_node{std::move(created.value), created.stat.czxid, g};
    if (rc == ZNONODE) {  // a lock's node is a container; a semaphore's stores its lease count
      const bool made = lock_data.empty() ? ensure_containers(s, lock_path, g, deadline, sent).has_value()
                                          : ensure_semaphore_node_in(s, lock_path, lock_data, g, deadline, sent);
      if (!made) return give_up();
      continue;
    }
    if (!answered(rc, creating)) {
      maybe_created = true;
      try {
        if (!s.states.wait_connected(deadline, g, creating)) return give_up();
      } catch (...) {
        give_up();
        throw;
      }
      continue;
    }
    fail(rc, creating);
  }
}

}  // namespace

}  // namespace zklock::detail
