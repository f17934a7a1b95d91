// SPDX-License-Identifier: Apache-2.0
// peer_runner's shared parts (see common.hpp): helpers, the server's numbers, sessions, the timed loop.
#include "common.hpp"

#include <sys/resource.h>
#include <sys/time.h>

#include <barrier>
#include <cmath>
#include <exception>
#include <stdexcept>
#include <system_error>

namespace peer {

config cfg;

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

double delta(const mntr_t& a, const mntr_t& b, const std::string& k) {
  if (a.empty() || b.empty()) return kNaN;
  auto get = [&](const mntr_t& m) {
    const auto it = m.find(k);
    return it == m.end() ? 0.0 : it->second;
  };
  return get(b) - get(a);
}

std::string proxy_ctrl(std::string_view cmd) {
  const std::string line = zkt::tcp_exchange("127.0.0.1", std::to_string(cfg.ctrl), std::string{cmd} + "\n", true);
  if (line.empty()) throw std::runtime_error("no answer from the proxy's control port to " + std::string{cmd});
  return line;
}

extern "C" void peer_quiet_log(const char*) {}

std::unique_ptr<zklock::session> open_session(const std::string& hosts) {
  zklock::session_options o;
  o.connect = hosts;
  if (!cfg.tls_dir.empty() && hosts == cfg.zk) o.connect = cfg.tls_zk;
  o.session_timeout = kSessionTimeout;
  o.connect_timeout = 30s;
  o.background_release = cfg.background_release;
  if (!cfg.tls_dir.empty())
    o.tls = zklock::tls_options{cfg.tls_dir + "/ca.pem", cfg.tls_dir + "/client.pem", cfg.tls_dir + "/client.key", ""};
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

}  // namespace peer
