// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario f (failed try and timed try while held).
#include "common.hpp"

namespace peer {

// ---- (f) failed try / timeout -------------------------------------------------------------------

template <class W>
void scen_failed_try(raw_zk& raw) {
  const auto path = path_of<W>("f-trylock");
  auto ss = open_sessions(2);
  mutex_t<W> holder{*ss[0], path}, trier{*ss[1], path};
  std::this_thread::sleep_for(500ms);  // the peers' settle delay before the watch baseline
  const auto mb = mntr();
  holder.lock();
  const int NT = std::max(50, cfg.n / 4), NTO = 20;
  constexpr auto timeout = 50ms;
  for (int i = 0; i < 20; ++i)
    if (trier.try_lock()) throw std::logic_error("a try succeeded while the lock was held");
  const auto m0 = mntr();
  std::vector<std::int64_t> f0, ft;
  for (int i = 0; i < NT; ++i) {
    const auto s0 = now_ns();
    const bool ok = trier.try_lock();
    f0.push_back(now_ns() - s0);
    if (ok) throw std::logic_error("a try succeeded while the lock was held");
  }
  const auto m01 = mntr();
  for (int i = 0; i < NTO; ++i) {
    const auto s0 = now_ns();
    const bool ok = trier.try_lock_for(timeout);
    ft.push_back(now_ns() - s0);
    if (ok) throw std::logic_error("a timed try succeeded while the lock was held");
  }
  const auto during = raw.count(path);
  const auto m1 = mntr();
  holder.unlock();
  std::this_thread::sleep_for(200ms);
  flush_all(ss);
  const auto after = raw.count(path);
  const auto m2 = mntr();
  const auto s0 = now_ns();
  const bool ok = trier.try_lock();  // the lock is free now: a try must succeed
  const double ok_us = static_cast<double>(now_ns() - s0) / 1e3;
  if (ok) trier.unlock();
  json(strategy<W>::lib, "f_failed_try")
      .integer("n_try0", NT)
      .str("try0_kind", "try_lock()")
      .lat("try0_", f0)
      .integer("n_timed", NTO)
      .integer("timeout_ms", timeout.count())
      .str("timed_kind", "try_lock_for(50ms) -> false")
      .lat("timed_", ft)
      .num("timed_overshoot_mean_ms", mean_us(ft) / 1e3 - static_cast<double>(timeout.count()), 2)
      .integer("nodes_while_held", during)
      .integer("orphan_nodes_after_release", after)
      .num("server_watches_added_while_held", delta(mb, m1, "zk_watch_count"), 0)
      .num("server_watches_left_after_release", delta(mb, m2, "zk_watch_count"), 0)
      .num("server_requests_per_try0", (delta(m0, m01, "zk_packets_received") - 1) / NT, 2)
      .boolean("try_on_free_lock_ok", ok)
      .num("try_on_free_lock_us", ok_us)
      .emit();
}

PEER_SCENARIO(scen_failed_try, raw_zk&);

}  // namespace peer
