// SPDX-License-Identifier: Apache-2.0
// hold_timers: the thread that ends bounded holds at their longest and deletes the nodes of holds
// released before their shortest (hold_bounds), and the calls the lock templates use for them.
module;
#include <pthread.h>
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
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

std::uint64_t hold_timers::schedule(clock::time_point at, std::function<void()> f) {
  std::lock_guard lk{mu_};
  if (stopped_) return 0;
  const std::uint64_t id = next_++;
  due_.emplace(std::pair{at, id}, std::move(f));
  try {
    at_.emplace(id, at);
    if (!thread_.joinable()) thread_ = std::thread{[this] { run(); }};
  } catch (...) {
    due_.erase(std::pair{at, id});
    at_.erase(id);
    throw;
  }
  cv_.notify_one();
  return id;
}

void hold_timers::cancel(std::uint64_t id) noexcept {
  std::lock_guard lk{mu_};
  const auto it = at_.find(id);
  if (it == at_.end()) return;
  due_.erase(std::pair{it->second, id});
  at_.erase(it);
}

void hold_timers::stop() noexcept {
  std::thread t;
  {
    std::lock_guard lk{mu_};
    stopped_ = true;
    due_.clear();
    at_.clear();
    t = std::move(thread_);
  }
  cv_.notify_one();
  if (t.joinable()) t.join();
}

void hold_timers::run() {
  ::pthread_setname_np(::pthread_self(), "zklock-holds");  // for ps, top, perf and gdb
  std::unique_lock lk{mu_};
  while (!stopped_) {
    if (due_.empty()) {
      cv_.wait(lk);
      continue;
    }
    const auto first = due_.begin();
    // A copy: while this waits, cancel() or stop() may erase the timer (and the time it refers to).
    const clock::time_point at = first->first.first;
    if (clock::now() < at) {
      cv_.wait_until(lk, at);
      continue;
    }
    auto f = std::move(first->second);
    at_.erase(first->first.second);
    due_.erase(first);
    lk.unlock();
    try {
      f();
    } catch (...) {  // a timer that could not do its work (an allocation): nothing to tell
    }
    lk.lock();
  }
}

std::uint64_t schedule_hold_timer(session& s, clock::time_point at, std::function<void()> f) {
  return impl_of(s).timers.schedule(at, std::move(f));
}

void cancel_hold_timer(session& s, std::uint64_t id) noexcept { impl_of(s).timers.cancel(id); }

}  // namespace zklock::detail
