// SPDX-License-Identifier: Apache-2.0
// scale_common — what bench/scale.cpp and bench/scale_async.cpp share: resident memory, the server's
// "mntr" numbers and a raw C-client view of a lock node's queue (zklock offers no raw listing).
#pragma once

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include <zookeeper/zookeeper.h>
#include "fiber_stacks.hpp"
#include "four_letter.hpp"

namespace scale {

using clock_type = std::chrono::steady_clock;

/// Returns: this process's resident set size in bytes.
inline std::int64_t rss_bytes() {
  std::ifstream f{"/proc/self/statm"};
  std::int64_t size = 0, resident = 0;
  f >> size >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
}

using zkt::fiber_stacks;
using zkt::fiber_stacks_now;

/// Returns: the bytes the heap has handed out and not got back (every malloc arena).
inline std::int64_t heap_bytes() { return static_cast<std::int64_t>(::mallinfo2().uordblks); }

/// Returns: the CPU time (user + system) of the whole process, every thread included, in microseconds.
inline double cpu_us() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return static_cast<double>(r.ru_utime.tv_sec + r.ru_stime.tv_sec) * 1e6 +
         static_cast<double>(r.ru_utime.tv_usec + r.ru_stime.tv_usec);
}

/// Returns: the context switches (voluntary and not) of the whole process so far, every thread included.
inline long long context_switches() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  return static_cast<long long>(r.ru_nvcsw) + static_cast<long long>(r.ru_nivcsw);
}

/// Returns: `key`'s value in the "mntr" answer of the first host of `zk`, or -1.
inline long long mntr(const std::string& zk, const std::string& key) {
  const auto values = zkt::mntr(zk);
  const auto it = values.find(key);
  return it == values.end() ? -1 : static_cast<long long>(it->second);
}

/// Returns: the number after `label` in the answer of the four-letter word `word` from the first
/// host of `zk` (e.g. "Total watches:" of "wchs"), or -1.
inline long long four_letter_number(const std::string& zk, std::string_view word, std::string_view label) {
  const std::string answer = zkt::four_letter_to(zk, word);
  const auto at = answer.find(label);
  if (at == std::string::npos) return -1;
  return std::stoll(answer.substr(at + label.size()));
}

/// What a poll reads while acquires queue. Not "mntr": on a server holding tens of thousands of
/// nodes one "mntr" costs it about 4.5 ms of CPU (its 500 lines of metrics), and a poll every 20 ms
/// took a fifth of a core from the server under measurement; "wchs" costs it about 0.3 ms.
/// Returns: the server's data watches, as (path, connection) pairs ("wchs": what exists watches
/// arm), or "mntr"'s zk_watch_count (data and child watches) where "wchs" is not allowed; -1 if neither.
inline long long watch_count(const std::string& zk) {
  const long long n = four_letter_number(zk, "wchs", "Total watches:");
  return n >= 0 ? n : mntr(zk, "zk_watch_count");
}

/// Returns: milliseconds since t0.
inline double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

/// A raw C-client handle, to look at the server's view of a queue.
class raw_view {
 public:
  explicit raw_view(const std::string& zk) {
    using namespace std::chrono_literals;
    ::zoo_set_debug_level(static_cast<ZooLogLevel>(0));
    zh_ = ::zookeeper_init(zk.c_str(), nullptr, 30000, nullptr, nullptr, 0);
    if (!zh_) throw std::runtime_error("zookeeper_init failed");
    const auto until = clock_type::now() + 30s;
    while (::zoo_state(zh_) != ZOO_CONNECTED_STATE) {
      if (clock_type::now() > until) throw std::runtime_error("raw handle never connected");
      std::this_thread::sleep_for(10ms);  // polling a C handle's state
    }
  }
  ~raw_view() { ::zookeeper_close(zh_); }
  raw_view(const raw_view&) = delete;
  raw_view& operator=(const raw_view&) = delete;

  /// Returns: the number of children of `path`, and the size of the listing's reply payload in
  /// bytes (a 4-byte count, then a 4-byte length and the bytes of each name).
  std::pair<std::size_t, std::size_t> listing(const std::string& path) {
    // (a poll while acquires queue uses children(): this allocates the names in this process)
    String_vector kids{};
    if (::zoo_get_children(zh_, path.c_str(), 0, &kids) != ZOK) return {0, 0};
    std::size_t bytes = 4;
    for (int i = 0; i < kids.count; ++i) bytes += 4 + std::string_view{kids.data[i]}.size();
    const auto n = static_cast<std::size_t>(kids.count);
    ::deallocate_String_vector(&kids);
    return {n, bytes};
  }

  /// Returns: the number of children of `path` (its stat's count: a reply of a few bytes, so that
  /// polling it while acquires queue adds nothing to this process's memory), 0 if it is absent.
  std::size_t children(const std::string& path) {
    Stat st{};
    if (::zoo_exists(zh_, path.c_str(), 0, &st) != ZOK) return 0;
    return static_cast<std::size_t>(st.numChildren);
  }

 private:
  zhandle_t* zh_ = nullptr;
};

}  // namespace scale
