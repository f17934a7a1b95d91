// SPDX-License-Identifier: Apache-2.0
// peer_runner — zklock's runner for the peer lock benchmarks (Curator, kazoo; ../shared/peers):
// the same scenarios a–h, k and o, the same flags, one JSON object per line on stdout; and m (leases
// of several permits, semaphore.cpp), beside Curator's bench/curator-multi.
//
//   peer_runner --zk HOST:PORT [--proxy HOST:PORT --ctrl PORT] [--n 2000] [--warm 500] [--dur 10]
//               [--threads 2,8,32] [--herd 100] [--scen a,b,c,d,e,f,g,h,k,m,o] [--tag TEXT]
//               [--watch predecessor|children|both] [--release background|sync]
//
// Each scenario runs once per watch strategy (default both): lib "zklock" is watch_predecessor,
// "zklock-children" is watch_children; wake-up is the condition variable (the default). One
// zklock::session per simulated client, all under /bench/zklock/<pid>. --release picks
// session_options::background_release (default background: unlock returns once the delete is sent). Without --proxy/--ctrl the
// op-count scenario (o) is skipped. Progress and errors go to stderr; a scenario that fails emits
// a line with "errors": true and "error". Exit status 0 (2 for bad flags).
// Scenario definitions: ../shared/peers/README.md ("Runner contract").
//
// This file: the flags, the process warm-up, the env line and the dispatch; common.hpp: what the
// scenarios share; uncontended.cpp (a, b), contended.cpp (c, k), rwlock.cpp (d), semaphore.cpp (e, m),
// failed_try.cpp (f), herd.cpp (g), expiry.cpp (h), opcounts.cpp (o): the scenarios.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <string>
#include <zookeeper/zookeeper_version.h>
#include "common.hpp"

namespace peer {
namespace {

// ---- flags --------------------------------------------------------------------------------------

int to_int(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  const int x = std::stoi(v, &used);
  if (used != v.size() || x < 0) throw std::invalid_argument(flag + ": not a count: " + v);
  return x;
}

void parse_flags(int argc, char** argv) {
  for (const auto& [k, v] : zkt::flag_pairs(argc, argv)) {
    if (k == "--zk") cfg.zk = v;
    else if (k == "--proxy") cfg.proxy = v;
    else if (k == "--ctrl") cfg.ctrl = to_int(k, v);
    else if (k == "--n") cfg.n = std::max(1, to_int(k, v));
    else if (k == "--warm") cfg.warm = to_int(k, v);
    else if (k == "--dur") cfg.dur = std::stod(v);
    else if (k == "--herd") cfg.herd = std::max(1, to_int(k, v));
    else if (k == "--tag") cfg.tag = v;
    else if (k == "--tls-dir") cfg.tls_dir = v;  // not the peers' contract: zklock over TLS (docs/security.md)
    else if (k == "--tls-zk") cfg.tls_zk = v;
    else if (k == "--threads") {
      cfg.threads.clear();
      for (const auto& t : zkt::split(v, ',')) cfg.threads.push_back(std::max(1, to_int(k, t)));
    } else if (k == "--scen") {
      cfg.scen.clear();
      for (const auto& s : zkt::split(v, ',')) cfg.scen.insert(s);
    } else if (k == "--watch") {
      if (v != "predecessor" && v != "children" && v != "both")
        throw std::invalid_argument("--watch: predecessor, children or both, not " + v);
      cfg.predecessor = v != "children";
      cfg.children = v != "predecessor";
    } else if (k == "--release") {
      if (v != "background" && v != "sync") throw std::invalid_argument("--release: background or sync, not " + v);
      cfg.background_release = v == "background";
    } else {
      throw std::invalid_argument("unknown flag " + k);
    }
  }
  cfg.base = "/bench/zklock/" + std::to_string(::getpid());
}

// ---- per-process warm-up --------------------------------------------------------------------------

/// As the peers: WARM uncontended cycles and ~1 s of 4-client contention on a scratch path (split
/// between the strategies that run), so that no scenario meets a cold server path or cold caches.
template <class W>
void warm_process(int cycles, double contention_s) {
  auto ss = open_sessions(4);
  const auto path = path_of<W>("warm");
  {
    mutex_t<W> m{*ss[0], path};
    for (int i = 0; i < cycles; ++i) {
      m.lock();
      m.unlock();
    }
  }
  auto ms = one_each<mutex_t<W>>(ss, path);
  run_timed(4, contention_s, [](int) {}, [&](int i) {
    if (ms[static_cast<std::size_t>(i)]->try_lock_for(10s)) ms[static_cast<std::size_t>(i)]->unlock();
  });
}

// ---- main -------------------------------------------------------------------------------------------

std::string read_loadavg() {
  std::ifstream f{"/proc/loadavg"};
  std::string s;
  std::getline(f, s);
  return s;
}

template <class W>
void emit_env(const std::string& server) {
  const char* git = std::getenv("ZKLOCK_PEER_GIT");
  json(strategy<W>::lib, "env")
      .str("server", server)
      .str("zk_client", ZOO_VERSION)
      .str("compiler", __VERSION__)
      .str("build_type", ZKLOCK_PEER_BUILD_TYPE)
      .str("git", git ? git : "")
      .str("watch", strategy<W>::name)
      .str("wakeup", "condition_variable")
      .str("release", cfg.background_release ? "background" : "sync")
      .integer("session_timeout_ms", std::chrono::milliseconds{kSessionTimeout}.count())
      .str("loadavg", read_loadavg())
      .emit();
}

/// Runs `body` and turns an exception into a stderr line plus a JSON line with "errors".
void guarded(const char* lib, const std::string& scenario, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    log(std::string{lib} + " " + scenario + " failed: " + e.what());
    json(lib, scenario).boolean("errors", true).str("error", e.what()).emit();
  }
}

template <class W>
void run_scenario(const std::string& sc) {
  const char* lib = strategy<W>::lib;
  log(std::string{lib} + ": " + sc);
  raw_zk raw{cfg.zk};
  if (sc == "a" || sc == "b") {
    auto s = open_session(cfg.zk);
    if (sc == "a") guarded(lib, "a_uncontended", [&] { scen_uncontended<W>(*s, raw); });
    if (sc == "b") guarded(lib, "b_reentrant", [&] { scen_reentrant<W>(*s, raw); });
  } else if (sc == "c") {
    for (const int T : cfg.threads) {
      log(std::string{lib} + ": c T=" + std::to_string(T));
      guarded(lib, "c_contended_T" + std::to_string(T), [&] { scen_contended<W>(T, raw); });
    }
  } else if (sc == "k") {
    guarded(lib, "k_contended_hold5_T8", [&] { scen_contended_hold<W>(raw); });
  } else if (sc == "d") {
    guarded(lib, "d_rwlock", [&] { scen_rw<W>(raw); });
  } else if (sc == "e") {
    for (const int hold : {0, 20}) {
      log(std::string{lib} + ": e hold " + std::to_string(hold) + " ms");
      guarded(lib, "e_semaphore_hold" + std::to_string(hold), [&] { scen_semaphore<W>(hold, raw); });
    }
  } else if (sc == "m") {
    for (const int hold : {0, 5}) {
      log(std::string{lib} + ": m hold " + std::to_string(hold) + " ms");
      guarded(lib, "m_semaphore_multi_hold" + std::to_string(hold), [&] { scen_semaphore_multi<W>(hold, raw); });
    }
  } else if (sc == "f") {
    guarded(lib, "f_failed_try", [&] { scen_failed_try<W>(raw); });
  } else if (sc == "g") {
    guarded(lib, "g_herd", [&] { scen_herd<W>(raw); });
  } else if (sc == "h") {
    guarded(lib, "h_session_expiry", [&] { scen_expiry<W>(raw); });
  } else if (sc == "o") {
    guarded(lib, "o_opcount", [&] { scen_opcounts<W>(raw); });
  }
}

}  // namespace
}  // namespace peer

int main(int argc, char** argv) {
  using namespace peer;
  try {
    parse_flags(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr,
                 "peer_runner: %s\nusage: peer_runner --zk HOST:PORT [--proxy HOST:PORT --ctrl PORT] [--n N] "
                 "[--warm N] [--dur S] [--threads 2,8,32] [--herd N] [--scen a,b,...] [--tag TEXT] "
                 "[--watch predecessor|children|both] [--release background|sync]\n",
                 e.what());
    return 2;
  }
  // The C client's log: off (nothing formatted) for our own raw handle too, as zklock does for its
  // sessions while no log handler is set.
  ::zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  const auto T0 = now_ns();
  std::string server = zkt::four_letter_to(cfg.zk, "srvr");
  server = server.substr(0, server.find('\n'));
  if (cfg.predecessor) emit_env<zklock::watch_predecessor>(server);
  if (cfg.children) emit_env<zklock::watch_children>(server);
  try {
    if (cfg.scen != std::set<std::string>{"o"}) {
      log("process warm-up");
      const int k = cfg.predecessor + cfg.children;
      if (cfg.predecessor) warm_process<zklock::watch_predecessor>(cfg.warm / k, 1.0 / k);
      if (cfg.children) warm_process<zklock::watch_children>(cfg.warm / k, 1.0 / k);
    }
  } catch (const std::exception& e) {
    log(std::string{"process warm-up failed: "} + e.what());
  }
  for (const char* sc : {"a", "b", "c", "k", "d", "e", "m", "f", "g", "h", "o"}) {
    if (!cfg.scen.contains(sc)) continue;
    if (cfg.predecessor) run_scenario<zklock::watch_predecessor>(sc);
    if (cfg.children) run_scenario<zklock::watch_children>(sc);
  }
  log("done in " + json_number(seconds_since(T0)) + " s");
  return 0;
}