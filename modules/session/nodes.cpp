// SPDX-License-Identifier: Apache-2.0
// Single nodes outside the contender queue: the semaphore node (which stores the lease count), and
// the plain reads and ephemeral creates of tools (read_node, create_ephemeral). Runs on the
// caller's thread; each call waits through a disconnection for up to connect_timeout.
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
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;
import :nodes;

namespace zklock::detail {

namespace {
/// Returns: what the node `path`, which stores no lease count, is: "a lock's path (N contenders
/// queued)" if lock contenders are under it, else what it stores (one request).
std::string what_node_is(session_impl& s, const std::string& path, std::uint64_t g, clock::time_point deadline) {
  const call_name listing{"zklock: listing ", path};
  reply kids;
  const auto rc = s.call(deadline, g, listing, &kids, [&](zhandle_t* zh, const void* d) {
    return zoo_aget_children(zh, path.c_str(), 0, &reply_to::on_names, d);
  });
  name_list names;
  if (rc && *rc == ZOK) names = std::move(kids.names);
  if (const auto n = sorted_contenders(names, lock_kinds).size(); n != 0)
    return "it is a lock's path (" + std::to_string(n) + (n == 1 ? " contender" : " contenders") + " queued)";
  return "it stores no lease count (a lock's path, or another node)";
}
}  // namespace

bool check_not_semaphore(session& sess, const std::string& lock_path, clock::time_point deadline) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: reading lock node ", lock_path};
  reply node;
  auto rc = s.call(deadline, s.states.live_generation(what), what, &node, [&](zhandle_t* zh, const void* d) {
    return zoo_aget(zh, lock_path.c_str(), 0, &reply_to::on_data, d);
  });
  if (!rc) return false;
  if (*rc == ZNONODE) return true;  // gone meanwhile: the listing decides
  if (*rc != ZOK) fail(*rc, what);
  const std::string_view have = std::string_view{node.value}.substr(0, 64);  // a lease count is short
  if (stores_lease_count(have))
    throw_error(errc::path_kind_mismatch, "zklock: " + lock_path + " is a semaphore's path (it stores \"" +
                                              std::string{have} + "\"): no lock may queue on it");
  return true;
}

bool ensure_semaphore_node_in(session_impl& s, const std::string& path, std::string_view want, std::uint64_t g,
                              clock::time_point deadline, std::size_t* sent, std::int32_t* version) {
  const call_name opening{"zklock: opening semaphore ", path, "READ", path};
  const call_name creating{"zklock: creating semaphore ", path, "CREATE", parent_of(path)};
  for (;;) {
    reply node;
    if (sent) ++*sent;
    auto rc = s.call(deadline, g, opening, &node, [&](zhandle_t* zh, const void* d) {
      return zoo_aget(zh, path.c_str(), 0, &reply_to::on_data, d);
    });
    if (!rc) return false;
    if (*rc == ZOK) {
      const std::string have = node.value.substr(0, 64);
      if (have == want) {
        if (version) *version = node.stat.version;
        return true;
      }
      if (const auto n = leases_stored(have))
        throw_error(errc::lease_count_mismatch,
                    "zklock: " + path + " is a semaphore with N = " + std::to_string(*n) + " leases, opened here with N = " +
                        std::string{want.substr(want.find('=') + 1)} + ": open it with N = " + std::to_string(*n) +
                        ", or remove it while no one uses it (zklock rm " + path + ") and open it again");
      throw_error(errc::path_kind_mismatch, "zklock: " + path + " is not a semaphore: " + what_node_is(s, path, g, deadline));
    }
    if (*rc != ZNONODE) fail(*rc, opening);
    const auto parent = path.substr(0, path.rfind('/'));
    if (!parent.empty() && !ensure_containers(s, parent, g, deadline, sent)) return false;
    if (sent) ++*sent;
    auto rc3 = s.call(deadline, g, creating, nullptr, [&](zhandle_t* zh, const void* d) {
      // A container: the server reaps it once its last lease is gone (nothing piles up), and the
      // next acquire makes it again with its count (create_and_list).
      return zoo_acreate(zh, path.c_str(), want.data(), static_cast<int>(want.size()), contender_acl(s),
                         ZOO_CONTAINER, &reply_to::on_string, d);
    });
    if (!rc3) return false;
    if (*rc3 != ZOK && *rc3 != ZNODEEXISTS) fail(*rc3, creating);
  }
}

std::int32_t ensure_semaphore_node(session& sess, const std::string& path, int leases) {
  session_impl& s = impl_of(sess);
  const auto g = s.states.live_generation(call_name{"zklock: opening semaphore ", path, "READ", path});
  std::int32_t version = -1;
  if (!ensure_semaphore_node_in(s, path, lease_count_text(static_cast<std::size_t>(leases)), g,
                                clock::now() + s.opts.connect_timeout, nullptr, &version))
    throw_error(errc::operation_timeout, "zklock: opening semaphore " + path + ": no connection within connect_timeout");
  return version;
}

std::optional<lease_count> read_lease_count(session& sess, const std::string& path, clock::time_point deadline,
                                            bool gone_ok) {
  session_impl& s = impl_of(sess);
  const call_name reading{"zklock: reading semaphore ", path, "READ", path};
  const auto g = s.states.live_generation(reading);
  reply node;
  auto rc = s.call(deadline, g, reading, &node, [&](zhandle_t* zh, const void* d) {
    return zoo_aget(zh, path.c_str(), 0, &reply_to::on_data, d);
  });
  if (!rc) return std::nullopt;
  if (*rc == ZNONODE && gone_ok) return lease_count{};
  if (*rc != ZOK && *rc != ZNONODE) fail(*rc, reading);
  const auto n = *rc == ZOK ? leases_stored(std::string_view{node.value}.substr(0, 64)) : std::nullopt;
  if (!n) throw_error(errc::path_kind_mismatch, "zklock: " + path + " is not a semaphore: " + what_node_is(s, path, g, deadline));
  return lease_count{*n, node.stat.version};
}

std::size_t store_lease_count(session& sess, const std::string& path, std::size_t leases) {
  session_impl& s = impl_of(sess);
  const call_name reading{"zklock: reading semaphore ", path, "READ", path};
  const call_name writing{"zklock: changing the lease count of semaphore ", path, "WRITE", path};
  const auto g = s.states.live_generation(writing);
  const auto deadline = clock::now() + s.opts.connect_timeout;
  const std::string want = lease_count_text(leases);
  for (;;) {
    reply node;
    auto rc = s.call(deadline, g, reading, &node, [&](zhandle_t* zh, const void* d) {
      return zoo_aget(zh, path.c_str(), 0, &reply_to::on_data, d);
    });
    if (!rc) throw_error(errc::operation_timeout, writing.text() + ": no connection within connect_timeout");
    if (*rc == ZNONODE) {  // removed while idle (or never made): made with the new count
      if (!ensure_semaphore_node_in(s, path, want, g, deadline, nullptr))
        throw_error(errc::operation_timeout, writing.text() + ": no connection within connect_timeout");
      return 0;
    }
    if (*rc != ZOK) fail(*rc, reading);
    const auto before = leases_stored(std::string_view{node.value}.substr(0, 64));
    if (!before) throw_error(errc::path_kind_mismatch, "zklock: " + path + " is not a semaphore: " + what_node_is(s, path, g, deadline));
    const std::int32_t version = node.stat.version;
    rc = s.call(deadline, g, writing, nullptr, [&](zhandle_t* zh, const void* d) {
      return zoo_aset(zh, path.c_str(), want.data(), static_cast<int>(want.size()), version, &reply_to::on_stat, d);
    });
    if (!rc) throw_error(errc::operation_timeout, writing.text() + ": no connection within connect_timeout");
    if (*rc == ZOK) return *before;
    if (*rc != ZBADVERSION && *rc != ZNONODE) fail(*rc, writing);  // (another change came between: again)
  }
}

lease_usage read_lease_usage(session& sess, const std::string& path) {
  session_impl& s = impl_of(sess);
  const call_name reading{"zklock: reading semaphore ", path, "READ", path};
  const auto g = s.states.live_generation(reading);
  const auto deadline = clock::now() + s.opts.connect_timeout;
  reply node, kids;
  auto rc = s.call(deadline, g, reading, &node, [&](zhandle_t* zh, const void* d) {
    return zoo_aget(zh, path.c_str(), 0, &reply_to::on_data, d);
  });
  if (!rc) throw_error(errc::operation_timeout, reading.text());
  if (*rc == ZNONODE) return {};
  if (*rc != ZOK) fail(*rc, reading);
  const auto max = leases_stored(std::string_view{node.value}.substr(0, 64));
  if (!max) throw_error(errc::path_kind_mismatch, "zklock: " + path + " is not a semaphore: " + what_node_is(s, path, g, deadline));
  rc = s.call(deadline, g, reading, &kids, [&](zhandle_t* zh, const void* d) {
    return zoo_aget_children(zh, path.c_str(), 0, &reply_to::on_names, d);
  });
  if (!rc) throw_error(errc::operation_timeout, reading.text());
  if (*rc == ZNONODE) return {};
  if (*rc != ZOK) fail(*rc, reading);
  const auto queue = sorted_contenders(kids.names, lease_kinds);
  std::size_t held = 0;  // the holders: the leases at the head that fit (zklock.detail:rules, semaphore_rule)
  for (const contender& c : queue) {
    if (held + c.weight > *max) break;
    held += c.weight;
  }
  return {*max, held};
}

std::optional<node_info> read_node(session& sess, const std::string& path) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: reading ", path, "READ", path};
  const auto deadline = clock::now() + s.opts.connect_timeout;
  reply node;
  auto rc = s.call(deadline, s.states.live_generation(what), what, &node, [&](zhandle_t* zh, const void* d) {
    return zoo_aget(zh, path.c_str(), 0, &reply_to::on_data, d);
  });
  if (!rc) throw_error(errc::operation_timeout, what.text());
  if (*rc == ZNONODE) return std::nullopt;
  if (*rc != ZOK) fail(*rc, what);
  if (node.value.size() > 4096) node.value.resize(4096);  // what a holder's node stores is short
  return node_info{std::move(node.value), node.stat.czxid, node.stat.ephemeralOwner};
}

bool create_ephemeral(session& sess, const std::string& path, std::string_view data) {
  session_impl& s = impl_of(sess);
  const call_name what{"zklock: creating ", path, "CREATE", parent_of(path)};
  const auto deadline = clock::now() + s.opts.connect_timeout;
  auto rc = s.call(deadline, s.states.live_generation(what), what, nullptr, [&](zhandle_t* zh, const void* d) {
    return zoo_acreate(zh, path.c_str(), data.data(), static_cast<int>(data.size()), contender_acl(s), ZOO_EPHEMERAL,
                       &reply_to::on_string, d);
  });
  if (!rc) throw_error(errc::operation_timeout, what.text());
  if (*rc == ZOK) return true;
  if (*rc == ZNONODE) return false;
  if (*rc != ZNODEEXISTS) fail(*rc, what);
  // Ours, if an earlier try's reply was lost (s.call sends again after a connection loss).
  const auto info = read_node(sess, path);
  return info && info->ephemeral_owner == s.states.view().id;
}

}  // namespace zklock::detail
