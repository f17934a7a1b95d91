// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario o (ZooKeeper requests per primitive, through the counting proxy).
#include "common.hpp"

namespace peer {

// ---- (o) ZooKeeper requests per primitive, through the counting proxy -------------------------------

/// Turns the proxy's {"req": {op: n}, "notifications": n, ...} into per-cycle numbers.
void emit_ops(const char* lib, const std::string& prim, const std::string& raw_json, int k) {
  std::string per = "{";
  double total = 0;
  const auto rq = raw_json.find("\"req\"");
  const auto open = raw_json.find('{', rq == std::string::npos ? 0 : rq);
  const auto close = raw_json.find('}', open);
  if (rq != std::string::npos && open != std::string::npos && close != std::string::npos) {
    for (const auto& kv : split(raw_json.substr(open + 1, close - open - 1), ',')) {
      const auto colon = kv.find(':');
      if (colon == std::string::npos) continue;
      std::string name = kv.substr(0, colon);
      std::erase_if(name, [](char c) { return c == '"' || c == ' '; });
      const double v = std::stod(kv.substr(colon + 1)) / k;
      if (name == "ping") continue;
      total += v;
      per += (per.size() > 1 ? "," : "") + ("\"" + json_escape(name) + "\":") + json_number(v, 2);
    }
  }
  per += "}";
  double notifications = kNaN;
  if (const auto p = raw_json.find("\"notifications\":"); p != std::string::npos)
    notifications = std::stod(raw_json.substr(p + 16)) / k;
  json(lib, "o_opcount_" + prim)
      .num("cycles", k)
      .num("zk_requests_per_cycle", total, 2)
      .raw("ops_per_cycle", per)
      .num("watch_notifications_per_cycle", notifications, 2)
      .raw("proxy_raw", raw_json)
      .emit();
}

template <class W>
void scen_opcounts(raw_zk& raw) {
  if (cfg.proxy.empty() || cfg.ctrl == 0) {
    log("no --proxy/--ctrl: skipping o");
    return;
  }
  const char* lib = strategy<W>::lib;
  auto pc = open_session(cfg.proxy);  // counted
  auto dc = open_session(cfg.zk);     // not counted
  constexpr int K = 50;
  auto count = [](const std::function<void()>& warm, const std::function<void()>& op, int k) {
    for (int i = 0; i < 3; ++i) warm();
    proxy_ctrl("reset");
    for (int i = 0; i < k; ++i) op();
    return proxy_ctrl("get");
  };
  mutex_t<W> m{*pc, path_of<W>("o-mutex")};
  const std::function<void()> mutex_op = [&] {
    m.lock();
    m.unlock();
  };
  emit_ops(lib, "mutex_acquire_release", count(mutex_op, mutex_op, K), K);
  const std::function<void()> fresh = [&] {
    mutex_t<W> x{*pc, path_of<W>("o-mutex")};
    x.lock();
    x.unlock();
  };
  emit_ops(lib, "mutex_new_lock_object_per_use", count(fresh, fresh, K), K);
  recursive_t<W> rm{*pc, path_of<W>("o-reentrant")};
  const std::function<void()> re = [&] {
    rm.lock();
    rm.lock();
    rm.unlock();
    rm.unlock();
  };
  emit_ops(lib, "reentrant_acq2_rel2", count(re, re, K), K);
  shared_t<W> rw{*pc, path_of<W>("o-rw")};
  const std::function<void()> rd = [&] {
    rw.lock_shared();
    rw.unlock_shared();
  };
  emit_ops(lib, "read_acquire_release", count(rd, rd, K), K);
  const std::function<void()> wr = [&] {
    rw.lock();
    rw.unlock();
  };
  emit_ops(lib, "write_acquire_release", count(wr, wr, K), K);
  semaphore_t<W> sem{*pc, path_of<W>("o-sem"), 4};
  const std::function<void()> se = [&] {
    sem.acquire();
    sem.release();
  };
  emit_ops(lib, "semaphore_acquire_return", count(se, se, K), K);
  const auto tpath = path_of<W>("o-try");
  mutex_t<W> h{*dc, tpath}, t{*pc, tpath};
  h.lock();
  const std::function<void()> tr = [&] {
    if (t.try_lock()) throw std::logic_error("try succeeded while held");
  };
  emit_ops(lib, "failed_try0", count(tr, tr, K), K);
  const std::function<void()> tt = [&] {
    if (t.try_lock_for(20ms)) throw std::logic_error("timed try succeeded while held");
  };
  emit_ops(lib, "failed_timed20ms", count(tt, tt, 10), 10);
  h.unlock();
  // A contended handoff as one waiter sees it: the direct holder holds, the proxied waiter queues
  // and arms its watch, the holder releases.
  mutex_t<W> w{*pc, tpath};
  const std::function<void()> warm = [&] {
    h.lock();
    h.unlock();
    w.lock();
    w.unlock();
  };
  const std::function<void()> wait = [&] {
    h.lock();
    std::thread x{[&] {
      w.lock();
      w.unlock();
    }};
    const auto z = clk::now();
    while (raw.count(tpath) < 2 && clk::now() - z < 5s) std::this_thread::sleep_for(1ms);
    std::this_thread::sleep_for(50ms);  // let the waiter arm its watch: the whole wait path is counted
    h.unlock();
    x.join();
  };
  emit_ops(lib, "blocking_acquire_after_wait_release", count(warm, wait, 20), 20);
}

PEER_SCENARIO(scen_opcounts, raw_zk&);

}  // namespace peer
