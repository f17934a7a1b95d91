// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario g (herd: a queue of waiters drained).
#include "common.hpp"

namespace peer {

// ---- (g) herd / queue drain -------------------------------------------------------------------------

template <class W>
void herd_round(std::vector<std::unique_ptr<zklock::session>>& ss, const std::string& path, bool report, raw_zk& raw) {
  const int Wn = cfg.herd;
  mutex_t<W> holder{*ss[static_cast<std::size_t>(Wn)], path};
  holder.lock();
  std::atomic<int> seq{0}, holders{0}, violations{0};
  std::atomic<bool> errors{false};
  std::vector<std::int64_t> t_acq(static_cast<std::size_t>(Wn)), t_rel(static_cast<std::size_t>(Wn));
  std::vector<std::thread> ts;
  for (int i = 0; i < Wn; ++i)
    ts.emplace_back([&, i] {
      try {
        mutex_t<W> m{*ss[static_cast<std::size_t>(i)], path};
        if (!m.try_lock_for(kStall)) throw std::runtime_error("herd waiter stalled");
        const auto a = now_ns();
        if (++holders > 1) ++violations;
        const auto idx = static_cast<std::size_t>(seq++);
        t_acq[idx] = a;
        --holders;
        t_rel[idx] = now_ns();
        m.unlock();
      } catch (const std::exception& e) {
        errors = true;
        log(std::string{"g waiter error: "} + e.what());
      }
    });
  const auto q0 = now_ns();
  bool filled = false;
  while (!(filled = raw.count(path) >= Wn + 1) && seconds_since(q0) < 120 && !errors)
    std::this_thread::sleep_for(20ms);
  const double enqueue_s = seconds_since(q0);
  if (filled) std::this_thread::sleep_for(500ms);
  const auto m0 = mntr();
  const auto rel0 = now_ns();
  holder.unlock();
  for (auto& t : ts) t.join();
  const double drain = seconds_since(rel0);
  const auto m1 = mntr();
  if (!filled) throw std::runtime_error("the herd queue never filled");
  if (!report) return;
  const auto done = static_cast<std::size_t>(seq.load());
  std::vector<std::int64_t> h(done);
  for (std::size_t i = 0; i < done; ++i) h[i] = t_acq[i] - (i == 0 ? rel0 : t_rel[i - 1]);
  std::string dec = "[";
  const std::size_t B = std::max<std::size_t>(1, static_cast<std::size_t>(Wn) / 10);
  for (std::size_t b = 0; b < done; b += B) {
    const std::vector<std::int64_t> x(h.begin() + static_cast<std::ptrdiff_t>(b),
                                      h.begin() + static_cast<std::ptrdiff_t>(std::min(done, b + B)));
    dec += (dec.size() > 1 ? "," : "") + json_number(mean_us(x));
  }
  dec += "]";
  std::vector<std::int64_t> hs = h;
  std::sort(hs.begin(), hs.end());
  const double deletes = delta(m0, m1, "zk_cnt_node_deleted_watch_count");
  flush_all(ss);
  json(strategy<W>::lib, "g_herd")
      .integer("waiters", Wn)
      .num("enqueue_s", enqueue_s, 2)
      .num("drain_s", drain, 2)
      .lat("handoff_", hs)
      .num("handoff_max_us", hs.empty() ? kNaN : static_cast<double>(hs.back()) / 1e3)
      .raw("handoff_mean_us_by_decile", dec)
      .num("server_requests_per_handoff", (delta(m0, m1, "zk_packets_received") - 1) / Wn, 2)
      .num("server_watch_fires_per_delete",
           deletes == 0 ? 0.0 : delta(m0, m1, "zk_sum_node_deleted_watch_count") / deletes, 2)
      .num("server_child_watch_fires", delta(m0, m1, "zk_sum_node_children_watch_count"), 0)
      .integer("violations", violations)
      .boolean("errors", errors)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

template <class W>
void scen_herd(raw_zk& raw) {
  log("herd: connecting " + std::to_string(cfg.herd + 1) + " sessions");
  auto ss = open_sessions(cfg.herd + 1);
  herd_round<W>(ss, path_of<W>("g-herd-warmup"), false, raw);  // same sessions, not reported
  herd_round<W>(ss, path_of<W>("g-herd"), true, raw);
}

PEER_SCENARIO(scen_herd, raw_zk&);

}  // namespace peer
