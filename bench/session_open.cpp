// SPDX-License-Identifier: Apache-2.0
// session_open — what opening a zklock session costs, over plain TCP and over TLS, side by side:
// the TLS handshake's price at session start (issue 27, docs/performance.md "TLS").
//
//   session_open --zk HOST:PORT --tls-zk HOST:PORT --tls-dir DIR [--n 100] [--rounds 3]
//
// DIR holds ca.pem, client.pem and client.key (a `tools/zk start --tls` server's DIR/tls). Each
// round opens and closes --n sessions one after the other over plain TCP, then as many over TLS;
// per round and mode one JSON line: the median and 90th percentile of the constructor's time (it
// returns once the session is established) and the client's CPU time per session (this process's
// user + system time over the round, threads included). Nothing is asserted: a benchmark.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>
#include <sys/resource.h>
import zklock;

namespace {

using clock_type = std::chrono::steady_clock;

double cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

void round(const char* mode, const zklock::session_options& o, int n, int r) {
  std::vector<double> us;
  us.reserve(static_cast<std::size_t>(n));
  const double cpu0 = cpu_seconds();
  for (int i = 0; i < n; ++i) {
    const auto t0 = clock_type::now();
    zklock::session s{o};
    us.push_back(std::chrono::duration<double, std::micro>(clock_type::now() - t0).count());
  }
  const double cpu = cpu_seconds() - cpu0;
  std::sort(us.begin(), us.end());
  std::printf("{\"mode\":\"%s\",\"round\":%d,\"n\":%d,\"open_p50_us\":%.0f,\"open_p90_us\":%.0f,\"cpu_us_per_session\":%.0f}\n",
              mode, r, n, us[us.size() / 2], us[us.size() * 9 / 10], cpu * 1e6 / n);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::string zk, tls_zk, tls_dir;
  int n = 100, rounds = 3;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--zk") zk = v;
    else if (k == "--tls-zk") tls_zk = v;
    else if (k == "--tls-dir") tls_dir = v;
    else if (k == "--n") n = std::max(1, std::stoi(v));
    else if (k == "--rounds") rounds = std::max(1, std::stoi(v));
    else {
      std::fprintf(stderr, "session_open: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  if (zk.empty() || tls_zk.empty() || tls_dir.empty()) {
    std::fprintf(stderr, "usage: session_open --zk HOST:PORT --tls-zk HOST:PORT --tls-dir DIR [--n 100] [--rounds 3]\n");
    return 2;
  }
  zklock::session_options plain;
  plain.connect = zk;
  zklock::session_options tls = plain;
  tls.connect = tls_zk;
  tls.tls = zklock::tls_options{tls_dir + "/ca.pem", tls_dir + "/client.pem", tls_dir + "/client.key", ""};
  for (int r = 1; r <= rounds; ++r) {
    round("plain", plain, n, r);
    round("tls", tls, n, r);
  }
}
