// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenarios c (contended mutex, T threads) and k (contended with a 5 ms hold).
#include "common.hpp"

namespace peer {
namespace {

/// Returns: the warm-up of c and k: client i takes and releases its lock once (which also creates
/// the lock node).
template <class L>
std::function<void(int)> take_once(std::vector<std::unique_ptr<L>>& ms) {
  return [&ms](int i) {
    ms[static_cast<std::size_t>(i)]->lock();
    ms[static_cast<std::size_t>(i)]->unlock();
  };
}

/// Returns: the sum of the threads' `counts`, and their `samples` in one vector.
std::pair<long long, std::vector<std::int64_t>> pooled(const std::vector<long long>& counts,
                                                       const std::vector<std::vector<std::int64_t>>& samples) {
  long long total = 0;
  std::vector<std::int64_t> all;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    total += counts[i];
    all.insert(all.end(), samples[i].begin(), samples[i].end());
  }
  return {total, all};
}

}  // namespace

// ---- (c) contended mutex ------------------------------------------------------------------------

template <class W>
void scen_contended(int T, raw_zk& raw) {
  const auto path = path_of<W>("c-contended-" + std::to_string(T));
  auto ss = open_sessions(T);
  auto ms = one_each<mutex_t<W>>(ss, path);
  std::atomic<int> holders{0}, max_holders{0}, violations{0}, stalls{0};
  std::vector<long long> counts(static_cast<std::size_t>(T));
  std::vector<std::vector<std::int64_t>> waits(static_cast<std::size_t>(T));
  const auto m0 = mntr();  // (the warm-up's T acquisitions are counted too: a rounding error)
  const auto r = run_timed(
      T, cfg.dur,
      take_once(ms),
      [&](int i) {
        auto& m = *ms[static_cast<std::size_t>(i)];
        const auto s0 = now_ns();
        if (!m.try_lock_for(kStall)) {
          ++stalls;
          return;
        }
        const auto a = now_ns();
        const int h = ++holders;
        if (h > 1) ++violations;
        atomic_max(max_holders, h);
        --holders;
        m.unlock();
        ++counts[static_cast<std::size_t>(i)];
        waits[static_cast<std::size_t>(i)].push_back(a - s0);
      });
  auto [total, all] = pooled(counts, waits);
  std::sort(all.begin(), all.end());
  const auto m1 = mntr();
  ms.clear();
  flush_all(ss);
  json(strategy<W>::lib, "c_contended_T" + std::to_string(T))
      .integer("threads", T)
      .num("duration_s", r.elapsed_s, 2)
      .integer("acquisitions", total)
      .num("handoffs_s", static_cast<double>(total) / r.elapsed_s)
      .lat("wait_", all)
      .num("wait_p999_us", pct(all, 99.9))
      .integer("per_thread_min", *std::min_element(counts.begin(), counts.end()))
      .integer("per_thread_max", *std::max_element(counts.begin(), counts.end()))
      .integer("violations", violations)
      .integer("max_holders", max_holders)
      .integer("stalls", stalls)
      .boolean("errors", r.errors)
      .num("cpu_window_ms", r.cpu_s * 1e3, 1)
      .num("cpu_us_per_acq", total ? r.cpu_s * 1e6 / static_cast<double>(total) : kNaN)
      .num("cpu_util", r.cpu_s / r.elapsed_s, 2)
      .num("server_requests_per_handoff", total ? delta(m0, m1, "zk_packets_received") / static_cast<double>(total) : kNaN, 2)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

// ---- (k) contended mutex with a hold time -----------------------------------------------------------
// 8 clients, each holds 5 ms, DUR s. The gap of a handoff is the next holder's acquire return minus
// the previous holder's time just before unlock() (one shared timestamp): what the lock costs
// between two holds.

template <class W>
void scen_contended_hold(raw_zk& raw) {
  constexpr int T = 8;
  constexpr auto hold = 5ms;
  const auto path = path_of<W>("k-contended-hold");
  auto ss = open_sessions(T);
  auto ms = one_each<mutex_t<W>>(ss, path);
  std::atomic<int> holders{0}, violations{0}, stalls{0};
  std::atomic<std::int64_t> last_release{0};
  std::vector<long long> counts(static_cast<std::size_t>(T));
  std::vector<std::vector<std::int64_t>> gaps(static_cast<std::size_t>(T));
  const auto r = run_timed(
      T, cfg.dur,
      take_once(ms),
      [&](int i) {
        auto& m = *ms[static_cast<std::size_t>(i)];
        if (!m.try_lock_for(kStall)) {
          ++stalls;
          return;
        }
        const auto a = now_ns();
        if (++holders > 1) ++violations;
        if (const auto prev = last_release.load(); prev != 0) gaps[static_cast<std::size_t>(i)].push_back(a - prev);
        std::this_thread::sleep_for(hold);
        --holders;
        last_release = now_ns();
        m.unlock();
        ++counts[static_cast<std::size_t>(i)];
      });
  auto [total, all] = pooled(counts, gaps);
  ms.clear();
  flush_all(ss);
  json(strategy<W>::lib, "k_contended_hold5_T8")
      .integer("threads", T)
      .num("hold_ms", 5)
      .num("duration_s", r.elapsed_s, 2)
      .integer("acquisitions", total)
      .num("handoffs_s", static_cast<double>(total) / r.elapsed_s)
      .num("cpu_window_ms", r.cpu_s * 1e3, 1)
      .lat("gap_", all)
      .integer("per_thread_min", *std::min_element(counts.begin(), counts.end()))
      .integer("per_thread_max", *std::max_element(counts.begin(), counts.end()))
      .integer("violations", violations)
      .integer("stalls", stalls)
      .boolean("errors", r.errors)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

PEER_SCENARIO(scen_contended, int, raw_zk&);
PEER_SCENARIO(scen_contended_hold, raw_zk&);

}  // namespace peer
