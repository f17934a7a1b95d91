// SPDX-License-Identifier: Apache-2.0
// scale — how zklock behaves with many locks and long queues (issue "Speed", part "Scale").
//
//   scale --zk HOST:PORT [--locks 10000] [--threads 4] [--waiters 100,1000] [--sessions 10]
//         [--mode blocking|async|both] [--async-waiters 1000] [--async-paths 10000] [--async-limit 600]
//
// 1. One session holds --locks distinct locks at once (--threads threads lock them): time, locks/s,
//    resident memory per lock object (constructed, then held), sizeof.
// 2. For each W in --waiters: a holder plus W waiters on one lock (W threads, each with its own lock
//    object, spread over --sessions sessions), all queued before the holder lets go; then the queue
//    drains (each waiter releases as soon as it holds). Reports the handoff latency (from one
//    grant's release to the next grant; its mean per tenth of the drain shows whether it depends on
//    the queue left), server requests per handoff during the drain (the server's "mntr"
//    zk_packets_received, every session's pings included), requests and wake-ups per acquire (the
//    hooks, the queueing included), resident memory per waiter,
//    and the longest listing the server sent (bytes), for the predecessor watch at every W and the
//    children watch at the smallest W.
// 3. --mode async (or both; blocking, the default, runs 1 and 2 only): one thread issues pending
//    asynchronous acquires, --async-waiters on one lock path and --async-paths across as many
//    paths; resident memory per pending acquire and the handoff rate (see scale_async.cpp). Each
//    wait (for the queue to fill, for the grants) fails after --async-limit seconds.
// One JSON object per line on stdout; progress on stderr. Timings are not asserted; 3 exits 1 if
// an acquire fails or grants come out of queue order.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "four_letter.hpp"
#include "scale_common.hpp"

import zklock;

// 3. (--mode async or both) in scale_async.cpp: pending asynchronous acquires, one thread.
bool async_scale(const zklock::session_options& o, const std::string& base, int waiters, int paths,
                 std::chrono::seconds limit);

namespace {

using scale::clock_type;
using scale::ms_since;
using scale::raw_view;
using scale::rss_bytes;
using namespace std::chrono_literals;

struct config {
  std::string zk;
  int locks = 10'000;
  int threads = 4;
  std::vector<int> waiters{100, 1000};
  int sessions = 10;
  std::string mode = "blocking";  // blocking (1 and 2), async (3) or both
  int async_waiters = 1000;
  int async_paths = 10'000;
  int async_limit = 600;  // seconds
} cfg;

std::vector<int> int_list(const std::string& v) {
  std::vector<int> out;
  for (const auto& x : zkt::split(v, ',')) out.push_back(std::stoi(x));
  return out;
}

void parse(int argc, char** argv) {
  for (const auto& [k, v] : zkt::flag_pairs(argc, argv)) {
    if (k == "--zk") cfg.zk = v;
    else if (k == "--locks") cfg.locks = std::max(1, std::stoi(v));
    else if (k == "--threads") cfg.threads = std::max(1, std::stoi(v));
    else if (k == "--waiters") cfg.waiters = int_list(v);
    else if (k == "--sessions") cfg.sessions = std::max(1, std::stoi(v));
    else if (k == "--mode") cfg.mode = v;
    else if (k == "--async-waiters") cfg.async_waiters = std::max(1, std::stoi(v));
    else if (k == "--async-paths") cfg.async_paths = std::max(1, std::stoi(v));
    else if (k == "--async-limit") cfg.async_limit = std::max(1, std::stoi(v));
    else throw std::invalid_argument("unknown flag " + k);
  }
  if (cfg.zk.empty()) throw std::invalid_argument("--zk HOST:PORT is required");
  if (cfg.mode != "blocking" && cfg.mode != "async" && cfg.mode != "both")
    throw std::invalid_argument("--mode is blocking, async or both");
}

/// Returns: `key`'s value in the server's "mntr" answer (the first host of --zk), or -1.
long long mntr(const std::string& key) { return scale::mntr(cfg.zk, key); }

zklock::session_options options(bool background) {
  zklock::session_options o;
  o.connect = cfg.zk;
  o.session_timeout = 30s;
  o.connect_timeout = 30s;
  o.background_release = background;
  return o;
}

// ---- 1. many locks, one session -------------------------------------------------------------------

void many_locks(const std::string& base) {
  zklock::session s{options(false)};
  const auto rss0 = rss_bytes();
  // owner_mutex: the thread that unlocks a lock below need not be the one that locked it
  std::vector<std::unique_ptr<zklock::owner_mutex>> locks;
  locks.reserve(static_cast<std::size_t>(cfg.locks));
  for (int i = 0; i < cfg.locks; ++i)
    locks.push_back(std::make_unique<zklock::owner_mutex>(s, base + "/l" + std::to_string(i)));
  const auto rss_constructed = rss_bytes();
  auto run = [&](bool lock_them) {
    std::atomic<int> next{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < cfg.threads; ++t)
      ts.emplace_back([&] {
        for (int i; (i = next++) < cfg.locks;) {
          if (lock_them) locks[static_cast<std::size_t>(i)]->lock();
          else locks[static_cast<std::size_t>(i)]->unlock();
        }
      });
    for (auto& t : ts) t.join();
  };
  const auto t0 = clock_type::now();
  run(true);  // first use of every path: creates its lock node too
  const double lock_ms = ms_since(t0);
  const auto rss_held = rss_bytes();
  const auto t1 = clock_type::now();
  run(false);
  const double unlock_ms = ms_since(t1);
  const auto t2 = clock_type::now();
  run(true);  // the lock nodes exist now
  const double relock_ms = ms_since(t2);
  run(false);
  std::printf(
      "{\"scenario\":\"many_locks\",\"locks\":%d,\"threads\":%d,\"sizeof_mutex\":%zu,"
      "\"rss_per_lock_object_bytes\":%.0f,\"rss_per_held_lock_bytes\":%.0f,"
      "\"first_lock_all_ms\":%.0f,\"first_locks_s\":%.0f,\"unlock_all_ms\":%.0f,"
      "\"relock_all_ms\":%.0f,\"relocks_s\":%.0f}\n",
      cfg.locks, cfg.threads, sizeof(zklock::owner_mutex), double(rss_constructed - rss0) / cfg.locks,
      double(rss_held - rss_constructed) / cfg.locks, lock_ms, cfg.locks / (lock_ms / 1000), unlock_ms, relock_ms,
      cfg.locks / (relock_ms / 1000));
  std::fflush(stdout);
}

// ---- 2. one long queue -----------------------------------------------------------------------------

std::atomic<std::uint64_t> g_requests{0};
std::atomic<std::uint64_t> g_acquires{0};
std::atomic<std::uint64_t> g_wakeups{0};

struct counting_hooks {
  static constexpr bool enabled = true;
  static void on_acquire(const zklock::acquire_stats& s) noexcept {
    g_requests += s.requests;
    g_wakeups += s.wakeups;
    ++g_acquires;
  }
  static void on_release(const zklock::release_stats&) noexcept {}
};

template <class Watch>
struct counted_policies : zklock::default_policies {
  using watch = Watch;
  using hooks = counting_hooks;
};
template <class Watch>
using counted_mutex = zklock::basic_mutex<counted_policies<Watch>>;

template <class Watch>
void long_queue(const std::string& base, int waiters, const char* watch_name) {
  const std::string path = base + "/q-" + watch_name + "-" + std::to_string(waiters);
  std::vector<std::unique_ptr<zklock::session>> ss;
  for (int i = 0; i < cfg.sessions; ++i) ss.push_back(std::make_unique<zklock::session>(options(false)));
  zklock::session holder_s{options(false)};
  counted_mutex<Watch> holder{holder_s, path};
  holder.lock();
  raw_view raw{cfg.zk};

  const auto rss0 = rss_bytes();
  std::mutex mu;
  // when each waiter got the lock, which is also when its release begins (it unlocks at once)
  std::vector<clock_type::time_point> grants;
  grants.reserve(static_cast<std::size_t>(waiters));
  std::atomic<int> queued{0};
  std::vector<std::unique_ptr<counted_mutex<Watch>>> ms;
  for (int i = 0; i < waiters; ++i)
    ms.push_back(std::make_unique<counted_mutex<Watch>>(*ss[static_cast<std::size_t>(i % cfg.sessions)], path));
  std::vector<std::thread> ts;
  g_requests = 0;
  g_acquires = 0;
  g_wakeups = 0;
  for (int i = 0; i < waiters; ++i)
    ts.emplace_back([&, i] {
      auto& m = *ms[static_cast<std::size_t>(i)];
      ++queued;
      m.lock();
      const auto got = clock_type::now();
      m.unlock();
      std::lock_guard lk{mu};
      grants.push_back(got);
    });
  // Wait until every waiter's node is on the server (the holder's ls shows the queue).
  const auto fill_start = clock_type::now();
  while (raw.listing(path).first < static_cast<std::size_t>(waiters) + 1) {
    if (clock_type::now() - fill_start > 120s) throw std::runtime_error("the queue never filled");
    std::this_thread::sleep_for(20ms);  // polling the server while threads start
  }
  // ... and every waiter waits: its watches are armed (predecessor: a data watch on its own node,
  // sent first, then on the two ahead of it, which may share server watches with other waiters of
  // its session; children: one children watch per session).
  // Until then the drain would compete with waiters still reading their first listing.
  const long long armed = std::is_same_v<Watch, zklock::watch_predecessor> ? waiters : cfg.sessions;
  for (long long seen; (seen = mntr("zk_watch_count")) < armed;) {
    if (clock_type::now() - fill_start > 120s) {
      std::fprintf(stderr, "scale: only %lld of %lld watches armed\n", seen, armed);
      std::_Exit(1);  // waiter threads are still blocked
    }
    std::this_thread::sleep_for(20ms);  // polling the server while threads start
  }
  const double fill_ms = ms_since(fill_start);
  const auto rss_queued = rss_bytes();
  const std::size_t listing_bytes = raw.listing(path).second;
  const long long packets0 = mntr("zk_packets_received");
  const auto t0 = clock_type::now();
  holder.unlock();
  for (auto& t : ts) t.join();
  const double drain_ms = ms_since(t0);
  const long long packets1 = mntr("zk_packets_received");
  // handoff i: from the moment the previous holder began its release (its grant) to this grant
  // (grants are in queue order); not from its unlock()'s return, which would leave out the release
  std::sort(grants.begin(), grants.end());
  std::vector<double> handoff_us;
  for (std::size_t i = 1; i < grants.size(); ++i)
    handoff_us.push_back(std::chrono::duration<double, std::micro>(grants[i] - grants[i - 1]).count());
  // the mean handoff in each tenth of the drain (first tenth: the longest queue left)
  std::string deciles;
  for (std::size_t d = 0; d < 10 && !handoff_us.empty(); ++d) {
    const std::size_t from = d * handoff_us.size() / 10, to = (d + 1) * handoff_us.size() / 10;
    double sum = 0;
    for (std::size_t i = from; i < to; ++i) sum += handoff_us[i];
    deciles += (d ? "," : "") + std::to_string(static_cast<long>(to > from ? sum / double(to - from) : 0));
  }
  std::sort(handoff_us.begin(), handoff_us.end());
  auto pct = [&](double p) {
    return handoff_us.empty() ? 0.0 : handoff_us[std::min(handoff_us.size() - 1, std::size_t(p * handoff_us.size()))];
  };
  std::printf(
      "{\"scenario\":\"long_queue\",\"watch\":\"%s\",\"waiters\":%d,\"sessions\":%d,\"fill_ms\":%.0f,"
      "\"drain_ms\":%.0f,\"handoffs_s\":%.0f,\"handoff_p50_us\":%.0f,\"handoff_p90_us\":%.0f,"
      "\"handoff_mean_us_by_decile\":[%s],\"server_requests_per_handoff\":%.2f,"
      "\"requests_per_acquire\":%.2f,\"wakeups_per_acquire\":%.2f,\"rss_per_waiter_bytes\":%.0f,"
      "\"sizeof_mutex\":%zu,\"listing_bytes\":%zu}\n",
      watch_name, waiters, cfg.sessions, fill_ms, drain_ms, waiters / (drain_ms / 1000), pct(0.5), pct(0.9),
      deciles.c_str(), packets0 < 0 || packets1 < 0 ? -1.0 : double(packets1 - packets0) / waiters,
      double(g_requests) / std::max<std::uint64_t>(1, g_acquires), double(g_wakeups) / std::max<std::uint64_t>(1, g_acquires),
      double(rss_queued - rss0) / waiters, sizeof(counted_mutex<Watch>), listing_bytes);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "scale: %s\nusage: scale --zk HOST:PORT [--locks 10000] [--threads 4] [--waiters 100,1000] "
                 "[--sessions 10]\n       [--mode blocking|async|both] [--async-waiters 1000] [--async-paths 10000]\n"
                 "       [--async-limit 600]\n",
                 e.what());
    return 2;
  }
  try {
    const std::string base = "/bench/scale/" + std::to_string(::getpid());
    const bool async_ok =
        cfg.mode == "blocking" || async_scale(options(false), base, cfg.async_waiters, cfg.async_paths,
                                               std::chrono::seconds{cfg.async_limit});
    if (cfg.mode == "async") return async_ok ? 0 : 1;
    std::fprintf(stderr, "scale: %d locks in one session\n", cfg.locks);
    many_locks(base);
    for (int w : cfg.waiters) {
      std::fprintf(stderr, "scale: %d waiters, predecessor watch\n", w);
      long_queue<zklock::watch_predecessor>(base, w, "predecessor");
    }
    const int smallest = *std::min_element(cfg.waiters.begin(), cfg.waiters.end());
    std::fprintf(stderr, "scale: %d waiters, children watch\n", smallest);
    long_queue<zklock::watch_children>(base, smallest, "children");
    if (!async_ok) return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "scale: %s\n", e.what());
    return 1;
  }
  return 0;
}
