// SPDX-License-Identifier: Apache-2.0
// bare_client.hpp — what the floor programs (handoff_floor, k_floor, async_floor) share: a connected
// ZooKeeper C client handle, a flag that a client callback raises, the process's CPU time and the
// load average. No lock library here.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <sys/resource.h>
#include <zookeeper/zookeeper.h>

namespace bare {

/// Returns: the user + system CPU time of the whole process (every thread, the C client's included),
/// in seconds: what the peers' runners report as `cpu_window_ms` over their timed window.
inline double cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(r.ru_utime) + s(r.ru_stime);
}

/// Returns: the context switches (voluntary and not) of the whole process so far, every thread included.
inline long long context_switches() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return static_cast<long long>(r.ru_nvcsw) + static_cast<long long>(r.ru_nivcsw);
}

/// Returns: the first three fields of /proc/loadavg, or "" if unreadable.
inline std::string loadavg() {
  std::string out;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {};
    if (std::fgets(buf, sizeof buf, f)) out = buf;
    std::fclose(f);
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == ' ')) out.pop_back();
  return out;
}

/// A connected handle; closed (its threads joined) when destroyed.
struct handle {
  /// Effects: connects to `zk` (30 s session timeout), waiting up to 30 s. Throws: std::runtime_error.
  explicit handle(const std::string& zk, watcher_fn w = nullptr, void* ctx = nullptr) {
    using namespace std::chrono_literals;
    zh = ::zookeeper_init(zk.c_str(), w, 30000, nullptr, ctx, 0);
    if (!zh) throw std::runtime_error("zookeeper_init failed");
    ::zoo_set_servers_resolution_delay(zh, 60000);  // as zklock does: not a resolution per I/O loop pass
    const auto until = std::chrono::steady_clock::now() + 30s;
    while (::zoo_state(zh) != ZOO_CONNECTED_STATE) {
      if (std::chrono::steady_clock::now() > until) throw std::runtime_error("never connected");
      std::this_thread::sleep_for(5ms);  // polling a C handle's state while it connects
    }
  }
  ~handle() { ::zookeeper_close(zh); }
  handle(const handle&) = delete;
  handle& operator=(const handle&) = delete;
  zhandle_t* zh = nullptr;
};

/// A one-shot flag a client callback raises and one thread waits for. It notifies under its mutex,
/// so the waiter cannot return (and end the flag's life) while the callback still uses it.
struct flag {
  std::mutex mu;
  std::condition_variable cv;
  bool set = false;
  /// Effects: sets the flag and wakes the waiter.
  void raise() {
    std::lock_guard lk{mu};
    set = true;
    cv.notify_one();
  }
  /// Effects: waits until the flag is set, then clears it.
  void wait_and_reset() {
    std::unique_lock lk{mu};
    cv.wait(lk, [&] { return set; });
    set = false;
  }
};

}  // namespace bare
