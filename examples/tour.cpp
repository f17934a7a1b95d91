// SPDX-License-Identifier: Apache-2.0
// tour — the README's API tour as a program: every lock type once, with the std:: lock types.
//
// usage: example_tour [HOSTS]
//   HOSTS: "host:port[,host:port...][/chroot]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
import zklock;

// The protected resource: it remembers the highest token it accepted and refuses older ones.
std::int64_t highest_token = 0;
void write_with_token(std::int64_t token) {
  if (token <= highest_token) throw std::runtime_error("stale holder refused");
  highest_token = token;
}

int main(int argc, char** argv) try {
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 1 ? argv[1] : env && *env ? env : "127.0.0.1:2181";

  // --- the README's tour, from here
  zklock::session s{hosts};                            // or "host:port,host:port/chroot"

  zklock::mutex m{s, "/locks/orders"};                 // fair; locking it again from the holder throws
  {
    std::scoped_lock g{m};                             // blocks until we hold it
    write_with_token(m.fencing_token());               // let the storage reject stale holders
  }
  if (std::unique_lock g{m, std::chrono::seconds{2}}; g) { /* held within 2 s */ }

  zklock::recursive_mutex rm{s, "/locks/jobs"};        // re-entrant per thread (like Curator's)
  { std::scoped_lock outer{rm}; std::scoped_lock inner{rm}; }

  zklock::shared_mutex rw{s, "/locks/catalog"};
  { std::shared_lock r{rw}; /* many readers */ }
  { std::unique_lock w{rw}; /* one writer  */ }

  zklock::counting_semaphore pool{s, "/sem/pool", 3};  // 3 leases, stored on the node
  if (pool.try_acquire_for(std::chrono::seconds{1})) { /* work */ pool.release(); }
  // --- to here

  std::printf("tour: every lock taken and released; last token %lld\n", static_cast<long long>(highest_token));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_tour: %s\n", e.what());
  return 1;
}
