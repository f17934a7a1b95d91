// SPDX-License-Identifier: Apache-2.0
// worker_pool — at most SLOTS jobs run at once across every process and thread, with one
// zklock::counting_semaphore. Each running job keeps a marker file in DIR and counts them.
//
// usage: example_worker_pool DIR [WORKERS=3] [JOBS=4] [SLOTS=2] [SEM_PATH=/zklock-examples/pool] [HOSTS]
//   HOSTS: "host:port[,host:port...]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
//   Every process must pass the same SLOTS (the count is stored on the semaphore node).
//   mkdir -p /tmp/pool; for i in 1 2 3; do example_worker_pool /tmp/pool & done; wait
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
import zklock;

namespace fs = std::filesystem;

int main(int argc, char** argv) try {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIR [WORKERS] [JOBS] [SLOTS] [SEM_PATH] [HOSTS]\n", argv[0]);
    return 2;
  }
  const fs::path dir = argv[1];
  const int workers = argc > 2 ? std::atoi(argv[2]) : 3;
  const int jobs = argc > 3 ? std::atoi(argv[3]) : 4;
  const int slots = argc > 4 ? std::atoi(argv[4]) : 2;
  const std::string sem_path = argc > 5 ? argv[5] : "/zklock-examples/pool";
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 6 ? argv[6] : env && *env ? env : "127.0.0.1:2181";
  const int pid = static_cast<int>(getpid());

  zklock::session s{hosts};
  auto worker = [&](int w) {
    zklock::counting_semaphore sem{s, sem_path, slots};  // one object per worker thread
    for (int j = 0; j < jobs; ++j) {
      sem.acquire();  // blocks while SLOTS jobs run anywhere
      const fs::path marker = dir / (std::to_string(pid) + "-" + std::to_string(w));
      std::ofstream{marker}.put('\n');
      const auto busy = std::distance(fs::directory_iterator{dir}, fs::directory_iterator{});
      std::printf("pid %d worker %d: job %d running, %d of %d slots busy\n", pid, w, j, static_cast<int>(busy), slots);
      std::fflush(stdout);
      std::this_thread::sleep_for(std::chrono::milliseconds{200});  // the job
      fs::remove(marker);
      sem.release();
      if (busy > slots) throw std::logic_error("more jobs than slots");  // never happens
    }
  };
  std::atomic<int> failures{0};
  {
    std::vector<std::jthread> pool;
    for (int w = 0; w < workers; ++w)
      pool.emplace_back([&, w] {
        try {
          worker(w);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "pid %d worker %d: %s\n", pid, w, e.what());
          ++failures;
        }
      });
  }
  return failures ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_worker_pool: %s\n", e.what());
  return 1;
}
