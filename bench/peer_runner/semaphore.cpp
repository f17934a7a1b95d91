// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario e (counting semaphore, hold 0 and 20 ms) and scenario m (leases of several
// permits at once, hold 0 and 5 ms).
#include <stdexcept>
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

// ---- (m) semaphore, leases of several permits ------------------------------------------------------
//
// N = 8 permits, 16 clients (each its own session and semaphore object on one path); client t asks
// for k = 1 + t % 3 permits at a time (1, 2 and 3 mixed), all k at once (try_acquire_lease_for(k,
// 60 s): an empty hold is a stall), holds 0 or 5 ms, releases them, DUR s. A shared counter of the
// permits held (k added after the acquire returns, checked <= N, k subtracted before the release)
// counts violations. Curator's side is bench/curator-multi/MultiPermit.java
// (InterProcessSemaphoreV2.acquire(k, 60 s)); the same definition there.

template <class W>
void scen_semaphore_multi(int hold_ms, raw_zk& raw) {
  constexpr int T = 16, kPermits = 8;
  const auto want = [](int i) { return 1 + i % 3; };
  const auto path = path_of<W>("m-sem-multi-hold" + std::to_string(hold_ms));
  auto ss = open_sessions(T);
  auto sems = one_each<semaphore_t<W>>(ss, path, kPermits);
  std::atomic<int> cur{0}, max_cur{0}, violations{0}, stalls{0};
  std::atomic<long long> n{0}, permits{0};
  std::vector<std::vector<std::int64_t>> waits(T);
  const auto m0 = mntr();  // (the warm-up's acquisitions are counted too: a rounding error)
  const auto r = run_timed(
      T, cfg.dur,
      [&](int i) {
        auto& s = *sems[static_cast<std::size_t>(i)];
        if (auto l = s.try_acquire_lease_for(want(i), kStall)) l.unlock();
      },
      [&](int i) {
        auto& s = *sems[static_cast<std::size_t>(i)];
        const int k = want(i);
        const auto s0 = now_ns();
        zklock::lock_hold l = s.try_acquire_lease_for(k, kStall);
        if (!l) {
          ++stalls;
          return;
        }
        const auto a = now_ns();
        if (l.permits() != k) throw std::runtime_error("lease of " + std::to_string(l.permits()) + " permits, asked " +
                                                       std::to_string(k));
        const int c = cur += k;
        atomic_max(max_cur, c);
        if (c > kPermits) ++violations;
        if (hold_ms) std::this_thread::sleep_for(std::chrono::milliseconds{hold_ms});
        cur -= k;
        l.unlock();
        ++n;
        permits += k;
        waits[static_cast<std::size_t>(i)].push_back(a - s0);
      });
  std::vector<std::int64_t> all;
  for (auto& w : waits) all.insert(all.end(), w.begin(), w.end());
  const auto m1 = mntr();
  sems.clear();
  flush_all(ss);
  json(strategy<W>::lib, "m_semaphore_multi_hold" + std::to_string(hold_ms))
      .integer("clients", T)
      .integer("permits", kPermits)
      .str("permits_per_lease", "1+t%3")
      .num("hold_ms", hold_ms)
      .num("duration_s", r.elapsed_s, 2)
      .integer("acquisitions", n)
      .integer("permits_granted", permits)
      .num("leases_s", static_cast<double>(n) / r.elapsed_s)
      .num("permits_s", static_cast<double>(permits) / r.elapsed_s)
      .lat("wait_", all)
      .integer("max_concurrent_permits", max_cur)
      .integer("violations", violations)
      .integer("stalls", stalls)
      .boolean("errors", r.errors)
      .num("cpu_window_ms", r.cpu_s * 1e3, 1)
      .num("cpu_us_per_acq", n ? r.cpu_s * 1e6 / static_cast<double>(n) : kNaN)
      .num("server_requests_per_lease", n ? delta(m0, m1, "zk_packets_received") / static_cast<double>(n) : kNaN, 2)
      .integer("leftover_nodes", raw.ephemerals(path))
      .emit();
}

PEER_SCENARIO(scen_semaphore_multi, int, raw_zk&);

}  // namespace peer
