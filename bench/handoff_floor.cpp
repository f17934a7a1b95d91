// SPDX-License-Identifier: Apache-2.0
// handoff_floor — what the ZooKeeper C client and server allow at best, without any lock library:
// the floor that zklock's (and Curator's) numbers are compared with in docs/performance.md.
//
//   handoff_floor --zk HOST:PORT [--n 2000]
//
// 1. handoff: session B watches a node (exists); session A deletes it (asynchronously, as zklock's
//    background release does). Measured from A's call to the moment B's waiting thread runs: the
//    critical path of every lock handoff (a holder's delete reaches the server, is committed, and
//    its notification wakes the next waiter). Floor handoffs/s = 1e6 / p50.
// 2. queue: an ephemeral-sequential create and a getChildren sent back to back, waiting for both
//    replies: the one round trip an uncontended acquire needs. With the delete sent in the
//    background, 1e6 / p50 is the floor of uncontended acquire+release cycles/s.
// 3. cycle: the delete of the previous node sent without waiting, then the create and getChildren
//    of the next, waiting for those two replies: an uncontended acquire+release loop with the
//    release in the background, at its floor (the create waits behind the delete on the server).
// 4. read: one exists, for scale.
// One JSON object per line on stdout. Nothing is asserted: a benchmark.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "bare_client.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

using bare::flag;
using bare::handle;

extern "C" void on_event(zhandle_t*, int type, int, const char*, void* ctx) {
  if (type == ZOO_DELETED_EVENT) static_cast<flag*>(ctx)->raise();
}

double p50(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
double p99(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, v.size() * 99 / 100)];
}
double us(clock_type::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }

void report(const char* what, const std::vector<double>& v) {
  const double m = p50(v);
  std::printf("{\"lib\":\"c-client-floor\",\"scenario\":\"%s\",\"n\":%zu,\"p50_us\":%.1f,\"p99_us\":%.1f,\"per_s_at_p50\":%.0f}\n",
              what, v.size(), m, p99(v), m > 0 ? 1e6 / m : 0.0);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string zk;
  int n = 2000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--zk") zk = v;
    else if (k == "--n") n = std::max(10, std::stoi(v));
    else throw std::invalid_argument("unknown flag " + k);
  }
  if (zk.empty()) throw std::invalid_argument("usage: handoff_floor --zk HOST:PORT [--n 2000]");
  ::zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  handle a{zk}, b{zk};
  const std::string base = "/zklock-floor-" + std::to_string(::getpid());
  if (::zoo_create(a.zh, base.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0) != ZOK)
    throw std::runtime_error("cannot create " + base);
  const std::string node = base + "/x";

  // 1. handoff: A's asynchronous delete -> B's waiting thread.
  {
    flag woken;
    std::vector<double> t;
    static constexpr void_completion_t ignore = [](int, const void*) {};
    for (int i = 0; i < n + 100; ++i) {
      if (::zoo_create(a.zh, node.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, nullptr, 0) != ZOK)
        throw std::runtime_error("create failed");
      struct Stat st {};
      if (::zoo_wexists(b.zh, node.c_str(), on_event, &woken, &st) != ZOK) throw std::runtime_error("exists failed");
      const auto t0 = clock_type::now();
      ::zoo_adelete(a.zh, node.c_str(), -1, ignore, nullptr);
      woken.wait_and_reset();
      if (i >= 100) t.push_back(us(clock_type::now() - t0));  // the first 100: warm-up
    }
    report("handoff_delete_to_waiter", t);
  }

  // 2. queue: create + getChildren back to back; 3. the same after an asynchronous delete; 4. one read.
  {
    std::vector<double> q, c, r;
    std::string previous;
    const std::string prefix = base + "/c-";
    for (int i = 0; i < n + 100; ++i) {
      struct done {
        std::mutex mu;
        std::condition_variable cv;
        int left = 2;
        char path[256] = {};
      } d;
      static constexpr string_completion_t on_create = [](int, const char* value, const void* data) {
        auto* dd = static_cast<done*>(const_cast<void*>(data));
        std::lock_guard lk{dd->mu};
        if (value) std::snprintf(dd->path, sizeof dd->path, "%s", value);
        if (--dd->left == 0) dd->cv.notify_one();
      };
      static constexpr strings_completion_t on_list = [](int, const String_vector*, const void* data) {
        auto* dd = static_cast<done*>(const_cast<void*>(data));
        std::lock_guard lk{dd->mu};
        if (--dd->left == 0) dd->cv.notify_one();
      };
      const bool cycle = i % 2 == 1;  // odd rounds: delete the previous node first, without waiting
      const auto t0 = clock_type::now();
      if (cycle) {
        static constexpr void_completion_t ignore_delete = [](int, const void*) {};
        ::zoo_adelete(a.zh, previous.c_str(), -1, ignore_delete, nullptr);
      }
      ::zoo_acreate(a.zh, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, on_create, &d);
      ::zoo_aget_children(a.zh, base.c_str(), 0, on_list, &d);
      {
        std::unique_lock lk{d.mu};
        d.cv.wait(lk, [&] { return d.left == 0; });
      }
      const auto t1 = clock_type::now();
      struct Stat st {};
      ::zoo_exists(a.zh, base.c_str(), 0, &st);
      const auto t2 = clock_type::now();
      if (cycle) {
        ::zoo_delete(a.zh, d.path, -1);
      } else {
        previous = d.path;  // deleted at the start of the next round
      }
      if (i >= 100) {
        (cycle ? c : q).push_back(us(t1 - t0));
        r.push_back(us(t2 - t1));
      }
    }
    report("queue_create_and_list", q);
    report("cycle_background_delete_then_queue", c);
    report("read_exists", r);
  }
  ::zoo_delete(a.zh, base.c_str(), -1);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "handoff_floor: %s\n", e.what());
  return 1;
}
