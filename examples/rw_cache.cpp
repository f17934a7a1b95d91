// SPDX-License-Identifier: Apache-2.0
// rw_cache — a cache file shared by processes: readers read at the same time (std::shared_lock),
// a writer replaces it alone (std::unique_lock) on one zklock::shared_mutex. No reader ever sees
// entries of two versions.
//
// usage: example_rw_cache FILE reader|writer [ROUNDS=10] [LOCK_PATH=/zklock-examples/cache] [HOSTS]
//   HOSTS: "host:port[,host:port...]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
//   example_rw_cache /tmp/cache writer & example_rw_cache /tmp/cache reader & example_rw_cache /tmp/cache reader; wait
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
import zklock;

int main(int argc, char** argv) try {
  const std::string role = argc > 2 ? argv[2] : "";
  if (role != "reader" && role != "writer") {
    std::fprintf(stderr, "usage: %s FILE reader|writer [ROUNDS] [LOCK_PATH] [HOSTS]\n", argv[0]);
    return 2;
  }
  const std::string file = argv[1];
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 10;
  const std::string lock_path = argc > 4 ? argv[4] : "/zklock-examples/cache";
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 5 ? argv[5] : env && *env ? env : "127.0.0.1:2181";
  const int pid = static_cast<int>(getpid());

  zklock::session s{hosts};
  zklock::shared_mutex rw{s, lock_path};
  int mixed = 0;
  for (int i = 0; i < rounds; ++i) {
    if (role == "writer") {
      std::unique_lock w{rw};  // alone: no reader, no other writer
      const std::string version = std::to_string(w.mutex()->fencing_token());
      std::ofstream out{file, std::ios::trunc};
      for (const char* key : {"alpha", "beta", "gamma"}) {
        out << key << '=' << version << std::endl;  // entry by entry, as a slow writer would
        std::this_thread::yield();
      }
      std::printf("pid %d: wrote version %s\n", pid, version.c_str());
    } else {
      std::shared_lock r{rw};  // together with other readers, never with the writer
      std::ifstream in{file};
      std::string line, version;
      int entries = 0;
      while (std::getline(in, line)) {
        const std::string v = line.substr(line.find('=') + 1);
        if (entries++ == 0) version = v;
        else if (v != version) ++mixed;
      }
      std::printf("pid %d: read %d entries of version %s\n", pid, entries, entries ? version.c_str() : "-");
    }
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds{50});  // the rest of the service's work
  }
  if (mixed) std::printf("pid %d: %d entries of a mixed version!\n", pid, mixed);
  return mixed ? 1 : 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_rw_cache: %s\n", e.what());
  return 1;
}
