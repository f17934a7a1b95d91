// SPDX-License-Identifier: Apache-2.0
// zklock_consumer: locks a zklock::mutex on the ZooKeeper in ZKLOCK_TEST_ZK and prints its fencing token.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
import zklock;

int main() {
  const char* connect = std::getenv("ZKLOCK_TEST_ZK");
  if (connect == nullptr || *connect == '\0') {
    std::fprintf(stderr, "zklock_consumer: set ZKLOCK_TEST_ZK=host:port\n");
    return 2;
  }
  try {
    zklock::session s{connect};
    zklock::mutex m{s, "/zklock-tests/consumer_project"};
    std::scoped_lock hold{m};
    std::printf("fencing token %lld\n", static_cast<long long>(m.fencing_token()));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zklock_consumer: %s\n", e.what());
    return 1;
  }
}
