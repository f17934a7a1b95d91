// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario d (read/write lock), with its stall monitor.
#include "common.hpp"

#include <random>

namespace peer {

// ---- (d) read/write lock --------------------------------------------------------------------------

/// Watches a lock path from its own handle; when no acquisition happened for 1.5 s while
/// contenders are queued, records the queue once (R = read node, W = write node, by sequence).
class stall_monitor {
 public:
  stall_monitor(std::string path, const std::atomic<long long>& progress)
      : raw_(cfg.zk), path_(std::move(path)), progress_(progress), th_([this] { run(); }) {}
  ~stall_monitor() { stop(); }
  stall_monitor(const stall_monitor&) = delete;
  stall_monitor& operator=(const stall_monitor&) = delete;
  void stop() {
    stop_ = true;
    if (th_.joinable()) th_.join();
  }
  int episodes() const { return episodes_; }
  const std::string& first() const { return first_; }

 private:
  void run() {
    long long last = progress_.load();
    auto since = clk::now();
    bool inside = false;
    while (!stop_) {
      std::this_thread::sleep_for(250ms);
      const long long p = progress_.load();
      if (p != last) {
        last = p;
        since = clk::now();
        inside = false;
        continue;
      }
      if (inside || clk::now() - since < 1500ms) continue;
      auto ch = raw_.children(path_);
      if (!ch || ch->empty()) continue;
      inside = true;
      ++episodes_;
      if (!first_.empty()) continue;
      auto seq = [](const std::string& x) { return x.size() >= 10 ? x.substr(x.size() - 10) : x; };
      std::sort(ch->begin(), ch->end(), [&](const auto& a, const auto& b) { return seq(a) < seq(b); });
      for (const auto& x : *ch) {
        first_ += first_.empty() ? "" : " ";
        first_ += x.find("READ") != std::string::npos ? "R" : "W";
        try {
          first_ += std::to_string(std::stoll(seq(x)));
        } catch (const std::exception&) {
          first_ += "?";
        }
      }
    }
  }
  raw_zk raw_;
  std::string path_;
  const std::atomic<long long>& progress_;
  std::atomic<bool> stop_{false};
  int episodes_ = 0;
  std::string first_;
  std::thread th_;
};

template <class W>
void scen_rw(raw_zk& raw) {
  constexpr int T = 8;
  constexpr auto hold = 1ms;
  const auto path = path_of<W>("d-rw");
  auto ss = open_sessions(T);
  auto ls = one_each<shared_t<W>>(ss, path);
  std::atomic<int> readers{0}, writers{0}, max_readers{0}, max_writers{0}, violations{0}, stalls{0};
  std::atomic<long long> nr{0}, nw{0}, progress{0};
  std::vector<std::vector<std::int64_t>> rw(T), ww(T);
  std::vector<std::mt19937> rnd;
  for (int i = 0; i < T; ++i) rnd.emplace_back(static_cast<std::mt19937::result_type>(1000 + i));
  timed_run r;
  std::string first_stall;
  int episodes = 0;
  {
    stall_monitor mon{path, progress};
    r = run_timed(
        T, cfg.dur,
        [&](int i) {
          auto& l = *ls[static_cast<std::size_t>(i)];
          if (l.try_lock_shared_for(kRwStall)) l.unlock_shared();
          if (l.try_lock_for(kRwStall)) l.unlock();
        },
        [&](int i) {
          auto& l = *ls[static_cast<std::size_t>(i)];
          const bool read = std::uniform_int_distribution<int>{0, 99}(rnd[static_cast<std::size_t>(i)]) < 90;
          const auto s0 = now_ns();
          if (!(read ? l.try_lock_shared_for(kRwStall) : l.try_lock_for(kRwStall))) {
            ++stalls;
            return;
          }
          const auto a = now_ns();
          ++progress;
          if (read) {
            atomic_max(max_readers, ++readers);
            if (writers != 0) ++violations;
            std::this_thread::sleep_for(hold);
            if (writers != 0) ++violations;
            --readers;
            ++nr;
            rw[static_cast<std::size_t>(i)].push_back(a - s0);
            l.unlock_shared();
          } else {
            const int w = ++writers;
            atomic_max(max_writers, w);
            if (w != 1 || readers != 0) ++violations;
            std::this_thread::sleep_for(hold);
            if (writers != 1 || readers != 0) ++violations;
            --writers;
            ++nw;
            ww[static_cast<std::size_t>(i)].push_back(a - s0);
            l.unlock();
          }
        });
    mon.stop();
    first_stall = mon.first();
    episodes = mon.episodes();
  }
  std::vector<std::int64_t> ra, wa;
  for (int i = 0; i < T; ++i) {
    ra.insert(ra.end(), rw[i].begin(), rw[i].end());
    wa.insert(wa.end(), ww[i].begin(), ww[i].end());
  }
  ls.clear();
  const auto ops = nr + nw;
  flush_all(ss);
  json(strategy<W>::lib, "d_rwlock")
      .integer("threads", T)
      .num("hold_ms", 1.0)
      .num("duration_s", r.elapsed_s, 2)
      .num("ops_s", static_cast<double>(ops) / r.elapsed_s)
      .integer("reads", nr)
      .integer("writes", nw)
      .lat("read_wait_", ra)
      .lat("write_wait_", wa)
      .integer("max_concurrent_readers", max_readers)
      .integer("max_concurrent_writers", max_writers)
      .integer("violations", violations)
      .integer("stalls", stalls)
      .integer("stall_timeout_s", std::chrono::seconds{kRwStall}.count())
      .integer("stall_episodes", episodes)
      .str("first_stall_queue", first_stall)
      .boolean("errors", r.errors)
      .num("cpu_window_ms", r.cpu_s * 1e3, 1)
      .num("cpu_us_per_op", ops ? r.cpu_s * 1e6 / static_cast<double>(ops) : kNaN)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

PEER_SCENARIO(scen_rw, raw_zk&);

}  // namespace peer
