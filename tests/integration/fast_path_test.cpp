// SPDX-License-Identifier: Apache-2.0
// The fast paths: the contender create and the first listing sent back to back (always), and
// session_options::background_release (unlock returns once the delete is sent). Both must keep
// every guarantee of the slow paths: exclusion, order, tokens, nothing left behind.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

zklock::session_options background(bool on = true) {
  auto o = zkt::options();
  o.background_release = on;
  return o;
}

// The first lock under a path that does not exist: the pipelined create fails (no parent), the
// listing finds nothing, and the slow path creates the containers and queues once.
TEST(FastPath, FirstLockUnderAMissingPathQueuesExactlyOnce) {
  const auto path = zkt::unique_path("fast-missing") + "/a/b";
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  m.lock();
  EXPECT_EQ(zkt::children(path).size(), 1u);
  const auto token = m.fencing_token();
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
  m.lock();
  EXPECT_GT(m.fencing_token(), token);
  m.unlock();
}

// Alternating holders on two sessions, the releasing one in the background: strict exclusion,
// strictly increasing tokens, and a session's next lock never waits on its own released node.
TEST(FastPath, BackgroundReleaseKeepsExclusionAndOrder) {
  const auto path = zkt::unique_path("fast-bg");
  constexpr int rounds = 150;
  std::atomic<int> inside{0};
  std::atomic<int> overlaps{0};
  std::atomic<std::int64_t> last_token{0};
  std::atomic<int> backwards{0};
  int counter = 0;  // unsynchronised on purpose: the lock is the only guard
  auto work = [&](bool in_background) {
    zklock::session s{background(in_background)};
    zklock::mutex m{s, path};
    for (int i = 0; i < rounds; ++i) {
      m.lock();
      if (inside.fetch_add(1) != 0) ++overlaps;
      const std::int64_t t = m.fencing_token();
      if (t <= last_token.exchange(t)) ++backwards;
      ++counter;
      inside.fetch_sub(1);
      m.unlock();
    }
  };
  std::thread a{work, true};
  std::thread b{work, true};
  std::thread c{work, false};
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(backwards.load(), 0);
  EXPECT_EQ(counter, 3 * rounds);
  // Each session has closed (its pending deletes answered first, or its nodes gone with it).
  EXPECT_TRUE(zkt::children(path).empty());
}

// After a background release, the session's own next request is served after the delete: one
// round trip later, nobody (not even another session) sees the node.
TEST(FastPath, BackgroundReleaseIsVisibleAfterTheSessionsNextRequest) {
  const auto path = zkt::unique_path("fast-bg-order");
  zklock::session s{background()};
  zklock::mutex m{s, path};
  zklock::mutex other_path{s, path + "-other"};
  for (int i = 0; i < 20; ++i) {
    m.lock();
    m.unlock();                              // returns once the delete is sent
    other_path.lock();                       // served after that delete
    EXPECT_TRUE(zkt::children(path).empty()) << "round " << i;
    other_path.unlock();
  }
  zklock::session waiter_session{zkt::options()};
  zklock::mutex waiter{waiter_session, path};
  m.lock();
  std::thread t{[&] {
    waiter.lock();  // granted once the background delete is done
    waiter.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(path, 2));
  m.unlock();
  t.join();
  other_path.lock();
  other_path.unlock();
  waiter_session.close();
  EXPECT_TRUE(zkt::children(path).empty());
  zkt::remove(path + "-other");
}

// Semaphore and shared mutex release through the same path: never more than N holders.
TEST(FastPath, BackgroundReleaseSemaphoreAndSharedMutex) {
  const auto sem_path = zkt::unique_path("fast-bg-sem");
  const auto rw_path = zkt::unique_path("fast-bg-rw");
  constexpr int leases = 2;
  std::atomic<int> holders{0};
  std::atomic<int> too_many{0};
  std::atomic<int> writers{0};
  std::atomic<int> rw_violations{0};
  std::vector<std::thread> ts;
  for (int k = 0; k < 4; ++k)
    ts.emplace_back([&, k] {
      zklock::session s{background(k % 2 == 0)};
      zklock::counting_semaphore sem{s, sem_path, leases};
      zklock::shared_mutex rw{s, rw_path};
      for (int i = 0; i < 25; ++i) {
        sem.acquire();
        if (holders.fetch_add(1) >= leases) ++too_many;
        holders.fetch_sub(1);
        sem.release();
        if (i % 5 == k % 5) {
          rw.lock();
          if (writers.fetch_add(1) != 0) ++rw_violations;
          writers.fetch_sub(1);
          rw.unlock();
        } else {
          rw.lock_shared();
          if (writers.load() != 0) ++rw_violations;
          rw.unlock_shared();
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(too_many.load(), 0);
  EXPECT_EQ(rw_violations.load(), 0);
  EXPECT_TRUE(zkt::children(sem_path).empty());
  EXPECT_TRUE(zkt::children(rw_path).empty());
}

}  // namespace
