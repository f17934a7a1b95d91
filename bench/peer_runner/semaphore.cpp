// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario e (counting semaphore, hold 0 and 20 ms).
#include "common.hpp"

namespace peer {

// ---- (e) semaphore ---------------------------------------------------------------------------------

template <class W>
void scen_semaphore(int hold_ms, raw_zk& raw) {
  constexpr int T = 16, kLeases = 4;
  const auto path = path_of<W>("e-sem-hold" + std::to_string(hold_ms));
  auto ss = open_sessions(T);
  auto sems = one_each<semaphore_t<W>>(ss, path, kLeases);
  std::atomic<int> cur{0}, max_cur{0}, violations{0}, stalls{0};
  std::atomic<long long> n{0};
  std::vector<std::vector<std::int64_t>> waits(T);
  const auto m0 = mntr();  // (the warm-up's acquisitions are counted too: a rounding error)
  const auto r = run_timed(
      T, cfg.dur,
      [&](int i) {
        auto& s = *sems[static_cast<std::size_t>(i)];
        if (s.try_acquire_for(kStall)) s.release();
      },
      [&](int i) {
        auto& s = *sems[static_cast<std::size_t>(i)];
        const auto s0 = now_ns();
        if (!s.try_acquire_for(kStall)) {
          ++stalls;
          return;
        }
        const auto a = now_ns();
        const int c = ++cur;
        atomic_max(max_cur, c);
        if (c > kLeases) ++violations;
        if (hold_ms) std::this_thread::sleep_for(std::chrono::milliseconds{hold_ms});
        --cur;
        s.release();
        ++n;
        waits[static_cast<std::size_t>(i)].push_back(a - s0);
      });
  std::vector<std::int64_t> all;
  for (auto& w : waits) all.insert(all.end(), w.begin(), w.end());
  const auto m1 = mntr();
  sems.clear();
  flush_all(ss);
  json(strategy<W>::lib, "e_semaphore_hold" + std::to_string(hold_ms))
      .integer("clients", T)
      .integer("leases", kLeases)
      .num("hold_ms", hold_ms)
      .num("duration_s", r.elapsed_s, 2)
      .integer("acquisitions", n)
      .num("leases_s", static_cast<double>(n) / r.elapsed_s)
      .lat("wait_", all)
      .integer("max_concurrent", max_cur)
      .integer("violations", violations)
      .integer("stalls", stalls)
      .boolean("errors", r.errors)
      .num("cpu_window_ms", r.cpu_s * 1e3, 1)
      .num("cpu_us_per_acq", n ? r.cpu_s * 1e6 / static_cast<double>(n) : kNaN)
      .num("server_requests_per_lease", n ? delta(m0, m1, "zk_packets_received") / static_cast<double>(n) : kNaN, 2)
      .integer("leftover_nodes", raw.ephemerals(path))
      .emit();
}

PEER_SCENARIO(scen_semaphore, int, raw_zk&);

}  // namespace peer
