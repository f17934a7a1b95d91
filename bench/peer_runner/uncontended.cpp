// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenarios a (uncontended mutex) and b (re-entrant mutex).
#include "common.hpp"

namespace peer {

// ---- (a) uncontended, (b) re-entrant ----------------------------------------------------------------

template <class W>
void scen_uncontended(zklock::session& s, raw_zk& raw) {
  const auto path = path_of<W>("a-uncontended");
  mutex_t<W> m{s, path};
  for (int i = 0; i < cfg.warm; ++i) {
    m.lock();
    m.unlock();
  }
  const auto N = static_cast<std::size_t>(cfg.n);
  std::vector<std::int64_t> cyc(N), acq(N), rel(N);
  const auto z0 = mntr();
  const double c0 = cpu_seconds();
  const auto t0 = now_ns();
  for (std::size_t i = 0; i < N; ++i) {
    const auto s0 = now_ns();
    m.lock();
    const auto a = now_ns();
    m.unlock();
    const auto e = now_ns();
    cyc[i] = e - s0;
    acq[i] = a - s0;
    rel[i] = e - a;
  }
  const double el = seconds_since(t0);
  const double cpu = cpu_seconds() - c0;
  const auto z1 = mntr();
  s.flush();
  json(strategy<W>::lib, "a_uncontended")
      .integer("n", cfg.n)
      .lat("", cyc)
      .num("ops_s", cfg.n / el)
      .lat("acquire_", acq)
      .lat("release_", rel)
      .num("mntr_requests_per_cycle", (delta(z0, z1, "zk_packets_received") - 1) / cfg.n, 2)
      .num("cpu_window_ms", cpu * 1e3, 1)
      .num("cpu_us_per_acq", cpu * 1e6 / cfg.n)
      .num("cpu_util", cpu / el, 2)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

template <class W>
void scen_reentrant(zklock::session& s, raw_zk& raw) {
  const auto path = path_of<W>("b-reentrant");
  recursive_t<W> m{s, path};
  for (int i = 0; i < cfg.warm; ++i) {
    m.lock();
    m.lock();
    m.unlock();
    m.unlock();
  }
  const auto N = static_cast<std::size_t>(cfg.n);
  std::vector<std::int64_t> cyc(N), a2(N), r1(N);
  const double c0 = cpu_seconds();
  const auto t0 = now_ns();
  for (std::size_t i = 0; i < N; ++i) {
    const auto s0 = now_ns();
    m.lock();
    const auto x = now_ns();
    m.lock();
    const auto y = now_ns();
    m.unlock();
    const auto z = now_ns();
    m.unlock();
    const auto e = now_ns();
    cyc[i] = e - s0;
    a2[i] = y - x;
    r1[i] = z - y;
  }
  const double el = seconds_since(t0);
  const double cpu = cpu_seconds() - c0;
  s.flush();
  json(strategy<W>::lib, "b_reentrant")
      .boolean("supported", true)
      .str("type", "basic_mutex<{reentrancy = reentrancy_per_thread}> (zklock::recursive_mutex)")
      .integer("n", cfg.n)
      .lat("", cyc)
      .num("ops_s", cfg.n / el)
      .lat("reacquire_", a2)
      .lat("inner_release_", r1)
      .num("cpu_us_per_acq", cpu * 1e6 / cfg.n)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

PEER_SCENARIO(scen_uncontended, zklock::session&, raw_zk&);
PEER_SCENARIO(scen_reentrant, zklock::session&, raw_zk&);

}  // namespace peer
