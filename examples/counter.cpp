// SPDX-License-Identifier: Apache-2.0
// counter — processes increment one counter file under one zklock::mutex: no update is lost.
//
// usage: example_counter FILE [ROUNDS=20] [LOCK_PATH=/zklock-examples/counter] [HOSTS]
//   HOSTS: "host:port[,host:port...]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
//   for i in 1 2 3 4; do example_counter /tmp/counter 20 & done; wait; cat /tmp/counter   # 80 more
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
import zklock;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FILE [ROUNDS] [LOCK_PATH] [HOSTS]\n", argv[0]);
    return 2;
  }
  const std::string file = argv[1];
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 20;
  const std::string lock_path = argc > 3 ? argv[3] : "/zklock-examples/counter";
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 4 ? argv[4] : env && *env ? env : "127.0.0.1:2181";

  zklock::session s{hosts};
  zklock::mutex m{s, lock_path};
  for (int i = 0; i < rounds; ++i) {
    std::lock_guard hold{m};  // the whole read-modify-write is under the lock
    long counter = 0;
    std::ifstream{file} >> counter;  // a missing file counts as 0
    std::this_thread::yield();       // a lost update would happen here, without the lock
    std::ofstream{file, std::ios::trunc} << ++counter << '\n';
    std::printf("pid %d: holds lock (token %lld), counter %ld\n", static_cast<int>(getpid()),
                static_cast<long long>(m.fencing_token()), counter);
    std::fflush(stdout);  // one line, one write: lines of several processes do not mix
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_counter: %s\n", e.what());
  return 1;
}
