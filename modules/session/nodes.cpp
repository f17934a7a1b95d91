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
#include <unordered_set>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock;
import :session_impl;

namespace zklock::detail {

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

}  // namespace zklock::detail
