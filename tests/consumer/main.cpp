// SPDX-License-Identifier: Apache-2.0
// zklock_consumer NAME: takes a zklock::mutex and a zklock::shared_mutex read lock under
// /zklock-tests/consumer/NAME on the ZooKeeper in ZKLOCK_TEST_ZK, and shows the server has both.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <shared_mutex>
#include <string>
import zklock;

namespace {
// The fencing token of the server's holder of `side` on `path` that belongs to session `s`, or 0.
long long held_by(zklock::session& s, const std::string& path, zklock::contender_side side) {
  for (const auto& c : zklock::contenders(s, path))
    if (c.side == side && c.state == zklock::contender_state::holder && c.session_id == s.id())
      return static_cast<long long>(c.token);
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  const char* connect = std::getenv("ZKLOCK_TEST_ZK");
  if (argc != 2 || connect == nullptr || *connect == '\0') {
    std::fprintf(stderr, "usage: ZKLOCK_TEST_ZK=host:port %s NAME\n", argv[0]);
    return 2;
  }
  try {
    const std::string base = std::string{"/zklock-tests/consumer/"} + argv[1];
    zklock::session s{connect};
    zklock::mutex m{s, base + "/mutex"};
    zklock::shared_mutex rw{s, base + "/rw"};
    std::scoped_lock hold{m};
    std::shared_lock read{rw};
    const long long mutex_token = held_by(s, base + "/mutex", zklock::contender_side::mutex);
    const long long read_token = held_by(s, base + "/rw", zklock::contender_side::read);
    if (mutex_token != m.fencing_token() || read_token == 0) {
      std::fprintf(stderr, "zklock_consumer: the server does not show both holds\n");
      return 1;
    }
    std::printf("mutex token %lld, read token %lld\n", mutex_token, read_token);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "zklock_consumer: %s\n", e.what());
    return 1;
  }
}
