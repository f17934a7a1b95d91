// SPDX-License-Identifier: Apache-2.0
// peer_runner's shared parts: the flags, timing, JSON lines, the server's numbers ("mntr"), a raw
// C-client handle, sessions, the lock types per watch strategy, the timed loop, and the scenario
// entry points (one file per scenario group; main.cpp dispatches). Runner contract:
// ../shared/peers/README.md.
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <zookeeper/zookeeper.h>
#include "four_letter.hpp"
#include "json.hpp"
import zklock;

namespace peer {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;
using zkt::json_escape;
using zkt::json_number;
using zkt::split;

constexpr auto kSessionTimeout = 30s;  // as both peers
constexpr auto kStall = 60s;           // guard of blocking acquires in c, e, g, m (a hang becomes a stall)
constexpr auto kRwStall = 5s;          // guard in d
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- flags --------------------------------------------------------------------------------------

struct config {
  std::string zk = "127.0.0.1:22810";
  std::string proxy;
  int ctrl = 0;
  int n = 2000;
  int warm = 500;
  double dur = 10;
  std::vector<int> threads{2, 8, 32};
  int herd = 100;
  std::set<std::string> scen{"a", "b", "c", "d", "e", "f", "g", "h", "k", "o"};
  std::string tag;
  bool predecessor = true;
  bool children = true;
  bool background_release = true;
  std::string base;  // /bench/zklock/<pid>
  // --tls-dir DIR --tls-zk HOSTS (not the peers' contract): zklock's sessions over TLS to HOSTS with
  // DIR/ca.pem, client.pem, client.key (a `tools/zk start --tls` server); raw handles stay on --zk.
  std::string tls_dir, tls_zk;
};
/// The flags (main.cpp parses them).
extern config cfg;

// ---- small helpers ------------------------------------------------------------------------------

/// Effects: writes "[zklock] `m`" to stderr.
void log(const std::string& m);

/// Returns: the steady clock in nanoseconds.
std::int64_t now_ns();

/// Returns: seconds since `t0` (from now_ns()).
double seconds_since(std::int64_t t0);

/// Returns: user + system CPU time of the whole process (all threads, the C client's included), seconds.
double cpu_seconds();

/// Returns: the nearest-rank percentile of sorted nanoseconds, in microseconds (NaN when empty).
double pct(const std::vector<std::int64_t>& sorted, double p);

/// Returns: the mean of nanoseconds, in microseconds (NaN when empty).
double mean_us(const std::vector<std::int64_t>& v);

template <class T>
void atomic_max(std::atomic<T>& a, T v) {
  for (T cur = a.load(); cur < v && !a.compare_exchange_weak(cur, v);) {
  }
}

// ---- JSON lines ---------------------------------------------------------------------------------

inline std::mutex g_out_mu;

/// One JSON object, printed as one line on stdout by emit().
class json {
 public:
  json(std::string_view lib, std::string_view scenario) {
    str("lib", lib).str("lib_version", ZKLOCK_PEER_VERSION).str("scenario", scenario);
    if (!cfg.tag.empty()) str("tag", cfg.tag);
  }
  json& raw(std::string_view k, std::string_view v) {
    s_ += s_.size() > 1 ? "," : "";
    s_ += "\"" + json_escape(k) + "\":";
    s_ += v;
    return *this;
  }
  json& str(std::string_view k, std::string_view v) { return raw(k, "\"" + json_escape(v) + "\""); }
  json& num(std::string_view k, double v, int decimals = 1) { return raw(k, json_number(v, decimals)); }
  json& integer(std::string_view k, long long v) { return raw(k, std::to_string(v)); }
  json& boolean(std::string_view k, bool v) { return raw(k, v ? "true" : "false"); }
  /// <prefix>p50_us, <prefix>p99_us, <prefix>mean_us of nanosecond samples.
  json& lat(const std::string& prefix, std::vector<std::int64_t> v) {
    std::sort(v.begin(), v.end());
    return num(prefix + "p50_us", pct(v, 50)).num(prefix + "p99_us", pct(v, 99)).num(prefix + "mean_us", mean_us(v));
  }
  void emit() {
    std::lock_guard lk{g_out_mu};
    std::fputs((s_ + "}\n").c_str(), stdout);
    std::fflush(stdout);
  }

 private:
  std::string s_ = "{";
};
// ---- the server's numbers, the proxy's control port -----------------------------------------------

using mntr_t = zkt::mntr_values;

/// Returns: the first server's "mntr" numbers (empty if it gives none).
inline mntr_t mntr() { return zkt::mntr(cfg.zk); }

/// Returns: b[k] - a[k]; NaN when the server gave no mntr (e.g. not whitelisted).
double delta(const mntr_t& a, const mntr_t& b, const std::string& k);

/// Effects: sends `cmd` to the proxy's control port. Returns: its one-line answer.
/// Throws: std::runtime_error if it does not answer.
std::string proxy_ctrl(std::string_view cmd);

// ---- a raw C-client handle: the server's view, and the second handle that expires a session ----

extern "C" void peer_quiet_log(const char*);

class raw_zk {
 public:
  /// Effects: connects to `hosts` (optionally as session `id`); waits up to 10 s until connected
  /// (or told the session is expired). Throws: std::runtime_error if it cannot.
  explicit raw_zk(const std::string& hosts, const clientid_t* id = nullptr) {
    zh_ = ::zookeeper_init2(hosts.c_str(), nullptr, static_cast<int>(std::chrono::milliseconds{kSessionTimeout}.count()),
                            id, nullptr, 0, &peer_quiet_log);
    if (!zh_) throw std::runtime_error("zookeeper_init2 failed for " + hosts);
    const auto until = clk::now() + 10s;
    while (clk::now() < until) {
      const int st = ::zoo_state(zh_);
      if (st == ZOO_CONNECTED_STATE || st == ZOO_EXPIRED_SESSION_STATE) return;
      std::this_thread::sleep_for(200us);  // a C handle's state can only be polled
    }
    close();
    throw std::runtime_error("raw handle: no connection to " + hosts);
  }
  ~raw_zk() { close(); }
  raw_zk(const raw_zk&) = delete;
  raw_zk& operator=(const raw_zk&) = delete;

  /// Effects: closes the handle now (for a handle on another's session: ends that session).
  void close() noexcept {
    if (zh_) ::zookeeper_close(zh_);
    zh_ = nullptr;
  }

  /// Returns: the children of `path`, or nullopt if it is missing (or the call failed).
  std::optional<std::vector<std::string>> children(const std::string& path) {
    String_vector kids{};
    if (::zoo_get_children(zh_, path.c_str(), 0, &kids) != ZOK) return std::nullopt;
    std::vector<std::string> out;
    for (int i = 0; i < kids.count; ++i) out.emplace_back(kids.data[i]);
    ::deallocate_String_vector(&kids);
    return out;
  }

  /// Returns: how many children `path` has (0 if missing).
  long long count(const std::string& path) {
    const auto c = children(path);
    return c ? static_cast<long long>(c->size()) : 0;
  }

  /// Returns: the ephemeral nodes (contenders, leases) anywhere under `path`.
  long long ephemerals(const std::string& path) {
    long long n = 0;
    for (const auto& c : children(path).value_or(std::vector<std::string>{})) {
      const std::string p = path + "/" + c;
      Stat st{};
      if (::zoo_exists(zh_, p.c_str(), 0, &st) != ZOK) continue;
      n += st.ephemeralOwner != 0 ? 1 : ephemerals(p);
    }
    return n;
  }

 private:
  zhandle_t* zh_ = nullptr;
};
// ---- sessions -----------------------------------------------------------------------------------

/// Returns: a session to `hosts` with the peers' timeouts and --release.
std::unique_ptr<zklock::session> open_session(const std::string& hosts);

/// Returns: n sessions to --zk, opened by up to 8 threads at once.
std::vector<std::unique_ptr<zklock::session>> open_sessions(int n);

/// With background release a session's last deletes may still be in flight when unlock()
/// returns: one round trip per session (session::flush) before counting what is left on the server.
void flush_all(std::vector<std::unique_ptr<zklock::session>>& ss);

/// Returns: one lock object of type L on `path` per session of `ss` (extra constructor arguments
/// `a`, e.g. a semaphore's count), in the order of `ss`.
template <class L, class... A>
std::vector<std::unique_ptr<L>> one_each(std::vector<std::unique_ptr<zklock::session>>& ss, const std::string& path,
                                         const A&... a) {
  std::vector<std::unique_ptr<L>> out;
  for (auto& s : ss) out.push_back(std::make_unique<L>(*s, path, a...));
  return out;
}

// ---- the lock types per watch strategy ----------------------------------------------------------

template <class W>
struct strategy;
template <>
struct strategy<zklock::watch_predecessor> {
  static constexpr const char* lib = "zklock";
  static constexpr const char* name = "predecessor";
};
template <>
struct strategy<zklock::watch_children> {
  static constexpr const char* lib = "zklock-children";
  static constexpr const char* name = "children";
};

template <class W>
struct watch_policies : zklock::default_policies {
  using watch = W;
};
template <class W>
struct recursive_policies : watch_policies<W> {
  using reentrancy = zklock::reentrancy_per_thread;
};
template <class W>
using mutex_t = zklock::basic_mutex<watch_policies<W>>;
template <class W>
using recursive_t = zklock::basic_mutex<recursive_policies<W>>;
template <class W>
using shared_t = zklock::basic_shared_mutex<watch_policies<W>>;
template <class W>
using semaphore_t = zklock::basic_counting_semaphore<watch_policies<W>>;

template <class W>
std::string path_of(std::string_view leaf) {
  return cfg.base + "/" + strategy<W>::name + "/" + std::string{leaf};
}

/// T threads: each runs warm(i) once, then (all starting together) body(i) until DUR seconds have
/// passed. An exception ends that thread's loop and sets `errors`. Returns: elapsed seconds and
/// the process CPU seconds used meanwhile.
struct timed_run {
  double elapsed_s = 0;
  double cpu_s = 0;
  bool errors = false;
};

timed_run run_timed(int T, double dur, const std::function<void(int)>& warm, const std::function<void(int)>& body);

// ---- the scenarios (W: the watch strategy; each file instantiates its own for both) -------------

template <class W> void scen_uncontended(zklock::session& s, raw_zk& raw);  // a: uncontended.cpp
template <class W> void scen_reentrant(zklock::session& s, raw_zk& raw);    // b: uncontended.cpp
template <class W> void scen_contended(int T, raw_zk& raw);                 // c: contended.cpp
template <class W> void scen_contended_hold(raw_zk& raw);                   // k: contended.cpp
template <class W> void scen_rw(raw_zk& raw);                               // d: rwlock.cpp
template <class W> void scen_semaphore(int hold_ms, raw_zk& raw);           // e: semaphore.cpp
template <class W> void scen_semaphore_multi(int hold_ms, raw_zk& raw);     // m: semaphore.cpp
template <class W> void scen_failed_try(raw_zk& raw);                       // f: failed_try.cpp
template <class W> void scen_herd(raw_zk& raw);                             // g: herd.cpp
template <class W> void scen_expiry(raw_zk& raw);                           // h: expiry.cpp
template <class W> void scen_opcounts(raw_zk& raw);                         // o: opcounts.cpp

/// Instantiates the scenario template `f` (parameters `...`) for both watch strategies.
#define PEER_SCENARIO(f, ...)                                \
  template void f<zklock::watch_predecessor>(__VA_ARGS__); \
  template void f<zklock::watch_children>(__VA_ARGS__)

}  // namespace peer
