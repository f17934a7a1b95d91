// SPDX-License-Identifier: Apache-2.0
// peer_runner — zklock's runner for the peer lock benchmarks (Curator, kazoo; ../shared/peers):
// the same scenarios a–h, k and o, the same flags, one JSON object per line on stdout.
//
//   peer_runner --zk HOST:PORT [--proxy HOST:PORT --ctrl PORT] [--n 2000] [--warm 500] [--dur 10]
//               [--threads 2,8,32] [--herd 100] [--scen a,b,c,d,e,f,g,h,k,o] [--tag TEXT]
//               [--watch predecessor|children|both] [--release background|sync]
//
// Each scenario runs once per watch strategy (default both): lib "zklock" is watch_predecessor,
// "zklock-children" is watch_children; wake-up is the condition variable (the default). One
// zklock::session per simulated client, all under /bench/zklock/<pid>. --release picks
// session_options::background_release (default background: unlock returns once the delete is sent). Without --proxy/--ctrl the
// op-count scenario (o) is skipped. Progress and errors go to stderr; a scenario that fails emits
// a line with "errors": true and "error". Exit status 0 (2 for bad flags).
// Scenario definitions: ../shared/peers/README.md ("Runner contract").
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include <zookeeper/zookeeper.h>
#include <zookeeper/zookeeper_version.h>
import zklock;

namespace {

using namespace std::chrono_literals;
using clk = std::chrono::steady_clock;

constexpr auto kSessionTimeout = 30s;  // as both peers
constexpr auto kStall = 60s;           // guard of blocking acquires in c, e, g (a hang becomes a stall)
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
};
config cfg;

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (;;) {
    const auto e = s.find(sep, b);
    if (e != b) out.emplace_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  return out;
}

int to_int(const std::string& flag, const std::string& v) {
  std::size_t used = 0;
  const int x = std::stoi(v, &used);
  if (used != v.size() || x < 0) throw std::invalid_argument(flag + ": not a count: " + v);
  return x;
}

void parse_flags(int argc, char** argv) {
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(k + ": missing value");
    const std::string v = argv[i + 1];
    if (k == "--zk") cfg.zk = v;
    else if (k == "--proxy") cfg.proxy = v;
    else if (k == "--ctrl") cfg.ctrl = to_int(k, v);
    else if (k == "--n") cfg.n = std::max(1, to_int(k, v));
    else if (k == "--warm") cfg.warm = to_int(k, v);
    else if (k == "--dur") cfg.dur = std::stod(v);
    else if (k == "--herd") cfg.herd = std::max(1, to_int(k, v));
    else if (k == "--tag") cfg.tag = v;
    else if (k == "--threads") {
      cfg.threads.clear();
      for (const auto& t : split(v, ',')) cfg.threads.push_back(std::max(1, to_int(k, t)));
    } else if (k == "--scen") {
      cfg.scen.clear();
      for (const auto& s : split(v, ',')) cfg.scen.insert(s);
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

// ---- small helpers ------------------------------------------------------------------------------

void log(const std::string& m) {
  std::fprintf(stderr, "[zklock] %s\n", m.c_str());
  std::fflush(stderr);
}

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clk::now().time_since_epoch()).count();
}

double seconds_since(std::int64_t t0) { return static_cast<double>(now_ns() - t0) / 1e9; }

/// user + system CPU time of the whole process (all threads, the C client's included), seconds.
double cpu_seconds() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto s = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return s(r.ru_utime) + s(r.ru_stime);
}

/// Nearest-rank percentile of sorted nanoseconds, in microseconds (NaN when empty).
double pct(const std::vector<std::int64_t>& sorted, double p) {
  if (sorted.empty()) return kNaN;
  const auto n = static_cast<std::ptrdiff_t>(sorted.size());
  const auto i = static_cast<std::ptrdiff_t>(std::ceil(p / 100.0 * static_cast<double>(n))) - 1;
  return static_cast<double>(sorted[static_cast<std::size_t>(std::clamp<std::ptrdiff_t>(i, 0, n - 1))]) / 1e3;
}

double mean_us(const std::vector<std::int64_t>& v) {
  if (v.empty()) return kNaN;
  double t = 0;
  for (auto x : v) t += static_cast<double>(x);
  return t / static_cast<double>(v.size()) / 1e3;
}

template <class T>
void atomic_max(std::atomic<T>& a, T v) {
  for (T cur = a.load(); cur < v && !a.compare_exchange_weak(cur, v);) {
  }
}

// ---- JSON lines ---------------------------------------------------------------------------------

std::string json_escape(std::string_view s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += b;
        } else {
          out += c;
        }
    }
  }
  return out;
}

std::string json_number(double v, int decimals = 1) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

std::mutex g_out_mu;

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

// ---- four-letter words, the proxy's control port -------------------------------------------------

/// Sends `request` to host:port and returns everything the peer answers before it closes (or, with
/// `one_line`, up to the first newline). Empty on failure.
std::string tcp_exchange(const std::string& host, const std::string& port, std::string_view request, bool one_line) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &ai) != 0 || !ai) return {};
  std::string out;
  for (addrinfo* p = ai; p; p = p->ai_next) {
    const int fd = ::socket(p->ai_family, p->ai_socktype, p->ai_protocol);
    if (fd < 0) continue;
    timeval tv{5, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, p->ai_addr, p->ai_addrlen) == 0 &&
        ::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
      if (!one_line) ::shutdown(fd, SHUT_WR);
      char buf[8192];
      for (ssize_t r; (r = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
        out.append(buf, static_cast<std::size_t>(r));
        if (one_line && out.find('\n') != std::string::npos) break;
      }
      ::close(fd);
      break;
    }
    ::close(fd);
  }
  ::freeaddrinfo(ai);
  if (one_line) out = out.substr(0, out.find('\n'));
  return out;
}

/// The first server of a connect string, as host and port.
std::pair<std::string, std::string> first_server(const std::string& connect) {
  std::string hp = connect.substr(0, connect.find(','));
  hp = hp.substr(0, hp.find('/'));
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return {hp, "2181"};
  return {hp.substr(0, colon), hp.substr(colon + 1)};
}

std::string four_letter(std::string_view word) {
  const auto [h, p] = first_server(cfg.zk);
  return tcp_exchange(h, p, word, false);
}

using mntr_t = std::map<std::string, double>;

mntr_t mntr() {
  mntr_t m;
  for (const auto& line : split(four_letter("mntr"), '\n')) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    try {
      m[line.substr(0, tab)] = std::stod(line.substr(tab + 1));
    } catch (const std::exception&) {  // a non-numeric value (version, state)
    }
  }
  return m;
}

/// b[k] - a[k]; NaN when the server gave no mntr (e.g. not whitelisted).
double delta(const mntr_t& a, const mntr_t& b, const std::string& k) {
  if (a.empty() || b.empty()) return kNaN;
  auto get = [&](const mntr_t& m) {
    const auto it = m.find(k);
    return it == m.end() ? 0.0 : it->second;
  };
  return get(b) - get(a);
}

std::string proxy_ctrl(std::string_view cmd) {
  const std::string line = tcp_exchange("127.0.0.1", std::to_string(cfg.ctrl), std::string{cmd} + "\n", true);
  if (line.empty()) throw std::runtime_error("no answer from the proxy's control port to " + std::string{cmd});
  return line;
}

// ---- a raw C-client handle: the server's view, and the second handle that expires a session ----

extern "C" void quiet_log(const char*) {}

class raw_zk {
 public:
  /// Effects: connects to `hosts` (optionally as session `id`); waits up to 10 s until connected
  /// (or told the session is expired). Throws: std::runtime_error if it cannot.
  explicit raw_zk(const std::string& hosts, const clientid_t* id = nullptr) {
    zh_ = ::zookeeper_init2(hosts.c_str(), nullptr, static_cast<int>(std::chrono::milliseconds{kSessionTimeout}.count()),
                            id, nullptr, 0, &quiet_log);
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

std::unique_ptr<zklock::session> open_session(const std::string& hosts) {
  zklock::session_options o;
  o.connect = hosts;
  o.session_timeout = kSessionTimeout;
  o.connect_timeout = 30s;
  o.background_release = cfg.background_release;
  return std::make_unique<zklock::session>(std::move(o));
}

/// n sessions to --zk, opened by up to 8 threads at once.
std::vector<std::unique_ptr<zklock::session>> open_sessions(int n) {
  std::vector<std::unique_ptr<zklock::session>> out(static_cast<std::size_t>(n));
  std::atomic<int> next{0};
  std::mutex mu;
  std::exception_ptr err;
  std::vector<std::thread> ts;
  for (int t = 0; t < std::min(n, 8); ++t)
    ts.emplace_back([&] {
      for (int i; (i = next++) < n;) {
        try {
          out[static_cast<std::size_t>(i)] = open_session(cfg.zk);
        } catch (...) {
          std::lock_guard lk{mu};
          err = std::current_exception();
        }
      }
    });
  for (auto& t : ts) t.join();
  if (err) std::rethrow_exception(err);
  return out;
}

/// With background release a session's last deletes may still be in flight when unlock()
/// returns: one round trip per session (session::flush) before counting what is left on the server.
void flush_all(std::vector<std::unique_ptr<zklock::session>>& ss) {
  for (auto& s : ss) {
    try {
      if (s) s->flush();
    } catch (const std::system_error&) {  // expired or closed: its nodes went with it
    }
  }
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

timed_run run_timed(int T, double dur, const std::function<void(int)>& warm, const std::function<void(int)>& body) {
  std::barrier bar{T + 1};
  std::atomic<std::int64_t> deadline{0};
  std::atomic<bool> errors{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < T; ++i)
    ts.emplace_back([&, i] {
      bool ok = true;
      try {
        warm(i);
      } catch (const std::exception& e) {
        ok = false;
        errors = true;
        log(std::string{"warm-up error: "} + e.what());
      }
      bar.arrive_and_wait();
      bar.arrive_and_wait();
      try {
        while (ok && now_ns() < deadline.load()) body(i);
      } catch (const std::exception& e) {
        errors = true;
        log(std::string{"thread error: "} + e.what());
      }
    });
  bar.arrive_and_wait();
  deadline = now_ns() + static_cast<std::int64_t>(dur * 1e9);
  const auto t0 = now_ns();
  const double c0 = cpu_seconds();
  bar.arrive_and_wait();
  for (auto& t : ts) t.join();
  return {seconds_since(t0), cpu_seconds() - c0, errors.load()};
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
  std::vector<std::unique_ptr<mutex_t<W>>> ms;
  for (auto& s : ss) ms.push_back(std::make_unique<mutex_t<W>>(*s, path));
  run_timed(4, contention_s, [](int) {}, [&](int i) {
    if (ms[static_cast<std::size_t>(i)]->try_lock_for(10s)) ms[static_cast<std::size_t>(i)]->unlock();
  });
}

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

// ---- (c) contended mutex ------------------------------------------------------------------------

template <class W>
void scen_contended(int T, raw_zk& raw) {
  const auto path = path_of<W>("c-contended-" + std::to_string(T));
  auto ss = open_sessions(T);
  std::vector<std::unique_ptr<mutex_t<W>>> ms;
  for (auto& s : ss) ms.push_back(std::make_unique<mutex_t<W>>(*s, path));
  std::atomic<int> holders{0}, max_holders{0}, violations{0}, stalls{0};
  std::vector<long long> counts(static_cast<std::size_t>(T));
  std::vector<std::vector<std::int64_t>> waits(static_cast<std::size_t>(T));
  const auto m0 = mntr();  // (the warm-up's T acquisitions are counted too: a rounding error)
  const auto r = run_timed(
      T, cfg.dur,
      [&](int i) {
        ms[static_cast<std::size_t>(i)]->lock();  // warm-up (also creates the lock node)
        ms[static_cast<std::size_t>(i)]->unlock();
      },
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
  long long total = 0;
  std::vector<std::int64_t> all;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    total += counts[i];
    all.insert(all.end(), waits[i].begin(), waits[i].end());
  }
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
  std::vector<std::unique_ptr<mutex_t<W>>> ms;
  for (auto& s : ss) ms.push_back(std::make_unique<mutex_t<W>>(*s, path));
  std::atomic<int> holders{0}, violations{0}, stalls{0};
  std::atomic<std::int64_t> last_release{0};
  std::vector<long long> counts(static_cast<std::size_t>(T));
  std::vector<std::vector<std::int64_t>> gaps(static_cast<std::size_t>(T));
  const auto r = run_timed(
      T, cfg.dur,
      [&](int i) {
        ms[static_cast<std::size_t>(i)]->lock();  // warm-up (also creates the lock node)
        ms[static_cast<std::size_t>(i)]->unlock();
      },
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
  long long total = 0;
  std::vector<std::int64_t> all;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    total += counts[i];
    all.insert(all.end(), gaps[i].begin(), gaps[i].end());
  }
  ms.clear();
  flush_all(ss);
  json(strategy<W>::lib, "k_contended_hold5_T8")
      .integer("threads", T)
      .num("hold_ms", 5)
      .num("duration_s", r.elapsed_s, 2)
      .integer("acquisitions", total)
      .num("handoffs_s", static_cast<double>(total) / r.elapsed_s)
      .lat("gap_", all)
      .integer("per_thread_min", *std::min_element(counts.begin(), counts.end()))
      .integer("per_thread_max", *std::max_element(counts.begin(), counts.end()))
      .integer("violations", violations)
      .integer("stalls", stalls)
      .boolean("errors", r.errors)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

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
  std::vector<std::unique_ptr<shared_t<W>>> ls;
  for (auto& s : ss) ls.push_back(std::make_unique<shared_t<W>>(*s, path));
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
      .num("cpu_us_per_op", ops ? r.cpu_s * 1e6 / static_cast<double>(ops) : kNaN)
      .integer("leftover_nodes", raw.count(path))
      .emit();
}

// ---- (e) semaphore ---------------------------------------------------------------------------------

template <class W>
void scen_semaphore(int hold_ms, raw_zk& raw) {
  constexpr int T = 16, kLeases = 4;
  const auto path = path_of<W>("e-sem-hold" + std::to_string(hold_ms));
  auto ss = open_sessions(T);
  std::vector<std::unique_ptr<semaphore_t<W>>> sems;
  for (auto& s : ss) sems.push_back(std::make_unique<semaphore_t<W>>(*s, path, kLeases));
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
      .num("cpu_us_per_acq", n ? r.cpu_s * 1e6 / static_cast<double>(n) : kNaN)
      .num("server_requests_per_lease", n ? delta(m0, m1, "zk_packets_received") / static_cast<double>(n) : kNaN, 2)
      .integer("leftover_nodes", raw.ephemerals(path))
      .emit();
}

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

// ---- (h) session expiry while holding ---------------------------------------------------------------

template <class W>
void scen_expiry(raw_zk& raw) {
  const auto path = path_of<W>("h-expiry"), rpath = path_of<W>("h-expiry-recursive");
  auto ss = open_sessions(2);
  zklock::session& a = *ss[0];
  struct seen_states {
    std::mutex mu;
    std::vector<std::string> states;
    std::int64_t suspended_at = 0;  // the last `suspended` before `expired`
    std::int64_t expired_at = 0;
    std::int64_t lost_signal_at = 0;  // ma.lost_token() fired
  };
  auto seen = std::make_shared<seen_states>();
  const auto listener = a.add_state_listener([seen](zklock::session_state st) {
    std::lock_guard lk{seen->mu};
    seen->states.emplace_back(zklock::to_string(st));
    if (st == zklock::session_state::expired && seen->expired_at == 0) seen->expired_at = now_ns();
    if (st == zklock::session_state::suspended && seen->expired_at == 0) seen->suspended_at = now_ns();
  });
  mutex_t<W> ma{a, path}, mb{*ss[1], path};
  recursive_t<W> ra{a, rpath}, rb{*ss[1], rpath};
  ma.lock();
  ra.lock();
  const auto generation_before = a.generation();
  // zklock's loss signal of the hold (the peers have none): when does the lock object learn?
  const std::stop_callback on_lost{ma.lost_token(), [seen] {
                                     std::lock_guard lk{seen->mu};
                                     seen->lost_signal_at = now_ns();
                                   }};

  // Expire A's session: a second handle with its id and password, then close. A's own handle may
  // win the session back (it reconnects within milliseconds), so retry until B gets the lock.
  bool b_got = false;
  double b_ms = kNaN;
  std::int64_t tx = 0;
  int attempts = 0;
  while (!b_got && attempts < 10) {
    ++attempts;
    clientid_t id{};
    id.client_id = a.id();
    const std::string pw = zklock::detail::session_password(a);
    std::memcpy(id.passwd, pw.data(), std::min(pw.size(), sizeof id.passwd));
    raw_zk evil{cfg.zk, &id};
    tx = now_ns();
    evil.close();  // closeSession on the server: A's session ends, its nodes go
    const auto s0 = now_ns();
    b_got = mb.try_lock_for(attempts < 10 ? 2s : 10s);
    b_ms = static_cast<double>(now_ns() - s0) / 1e6;
  }
  // Wait for A's listener to see `expired`. Usually A learns it on its next reconnect (well under
  // a second); if A's handle had won the session back just before the close, it learns only from
  // the server's silence (2/3 of the session timeout) plus the loss tolerance: wait past that
  // (the peers wait 10 s).
  const auto w0 = clk::now();
  for (;;) {
    {
      std::lock_guard lk{seen->mu};
      if (seen->expired_at != 0) break;
    }
    if (clk::now() - w0 > kSessionTimeout + 15s) break;
    std::this_thread::sleep_for(5ms);
  }
  const bool still = ma.owns_lock();
  const bool still_owned = ma.still_owned();
  bool reacq = false;
  std::string reacq_result;
  try {
    reacq = ma.try_lock();
    reacq_result = reacq ? "true" : "false";
  } catch (const std::system_error& e) {
    reacq_result = std::string{"throws: "} + e.code().message();
  }
  const bool both = (still || reacq) && b_got && mb.owns_lock();
  ma.unlock();  // noexcept
  if (reacq) ma.unlock();
  const std::string rel = "ok (unlock() is noexcept)";

  // The re-entrant type (Curator's InterProcessMutex is re-entrant): does a re-lock after expiry
  // succeed locally while another client holds the lock?
  const bool r_still = ra.owns_lock();
  const bool r_still_owned = ra.still_owned();
  const bool rb_got = rb.try_lock_for(5s);
  bool r_reacq = false;
  std::string r_reacq_result;
  try {
    r_reacq = ra.try_lock();
    r_reacq_result = r_reacq ? "true" : "false";
  } catch (const std::system_error& e) {
    r_reacq_result = std::string{"throws: "} + e.code().message();
  }
  const bool r_both = (r_still || r_reacq) && rb_got && rb.owns_lock();
  if (r_reacq) ra.unlock();
  ra.unlock();
  if (rb_got) rb.unlock();
  if (b_got) mb.unlock();
  std::this_thread::sleep_for(300ms);
  a.remove_state_listener(listener);
  std::string states;
  double lost_ms = kNaN, suspended_ms = kNaN, lost_signal_ms = kNaN;
  {
    std::lock_guard lk{seen->mu};
    for (const auto& s : seen->states) states += (states.empty() ? "" : ">") + s;
    if (seen->expired_at) lost_ms = static_cast<double>(seen->expired_at - tx) / 1e6;
    if (seen->suspended_at) suspended_ms = static_cast<double>(seen->suspended_at - tx) / 1e6;
    if (seen->lost_signal_at) lost_signal_ms = static_cast<double>(seen->lost_signal_at - tx) / 1e6;
  }
  flush_all(ss);
  json(strategy<W>::lib, "h_session_expiry")
      .boolean("other_client_acquired", b_got)
      .num("other_acquire_ms", b_ms)
      .integer("expire_attempts", attempts)
      .num("lost_event_ms", lost_ms)
      .str("lost_event", "session listener: expired")
      .num("suspended_event_ms", suspended_ms)  // negative: before the close (the second handle's connect)
      .str("states", states)
      .num("lost_token_ms", lost_signal_ms)
      .boolean("lock_object_still_claims_held", still)
      .boolean("still_owned_after_expiry", still_owned)
      .boolean("reacquire_without_release_succeeds", reacq)
      .str("reacquire_result", "mutex::try_lock(): " + reacq_result)
      .boolean("both_believe_they_hold", both)
      .str("release_after_expiry", rel)
      .boolean("recursive_still_claims_held", r_still)
      .boolean("recursive_still_owned_after_expiry", r_still_owned)
      .boolean("recursive_other_client_acquired", rb_got)
      .boolean("recursive_reacquire_without_release_succeeds", r_reacq)
      .str("recursive_reacquire_result", "recursive_mutex::try_lock(): " + r_reacq_result)
      .boolean("recursive_both_believe_they_hold", r_both)
      .str("session_state_after", zklock::to_string(a.state()))
      .integer("session_generations", static_cast<long long>(a.generation() - generation_before + 1))
      .integer("leftover_nodes", raw.count(path) + raw.count(rpath))
      .emit();
}

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

int main(int argc, char** argv) {
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
  std::string server = four_letter("srvr");
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
  for (const char* sc : {"a", "b", "c", "k", "d", "e", "f", "g", "h", "o"}) {
    if (!cfg.scen.contains(sc)) continue;
    if (cfg.predecessor) run_scenario<zklock::watch_predecessor>(sc);
    if (cfg.children) run_scenario<zklock::watch_children>(sc);
  }
  log("done in " + json_number(seconds_since(T0)) + " s");
  return 0;
}
