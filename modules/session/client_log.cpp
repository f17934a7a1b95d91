// SPDX-License-Identifier: Apache-2.0
// The C client's log, routed to the handler of set_log_handler (or silenced). zk_log_line runs on
// the handles' I/O loop threads and on the callers' (and on ours, for zklock's own lines); the handler is
// set on the caller's thread.
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
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;

namespace zklock {
namespace detail {

namespace {

std::mutex g_log_mu;
std::shared_ptr<const log_handler> g_log;  // empty = silent

// The C client formats a line before it reaches any callback; its process-wide level decides
// whether it formats at all. Without a handler nothing is formatted (level 0 = off), which is silent
// and cheaper; with one, INFO. (A server's address is formatted whatever the level in one place, a
// timed-out connection's message: zklock's client does it in a buffer per thread, Debian's in one
// static buffer that every handle shares: tools/build-zookeeper-client.) Called with g_log_mu held.
void apply_client_log_level() noexcept {
  ::zoo_set_debug_level(g_log ? ZOO_LOG_LEVEL_INFO : static_cast<ZooLogLevel>(0));
}

}  // namespace

void zk_log_line(const char* message) {
  std::shared_ptr<const log_handler> h;
  {
    std::lock_guard lk{g_log_mu};
    h = g_log;
  }
  if (h && *h) (*h)(message ? std::string_view{message} : std::string_view{});
}

void refresh_client_log_level() noexcept {
  std::lock_guard lk{g_log_mu};
  apply_client_log_level();
}

}  // namespace detail

void set_log_handler(log_handler h) {
  auto p = h ? std::make_shared<const log_handler>(std::move(h)) : nullptr;
  std::lock_guard lk{detail::g_log_mu};
  detail::g_log = std::move(p);
  detail::apply_client_log_level();
}

}  // namespace zklock
