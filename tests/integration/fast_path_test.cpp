// SPDX-License-Identifier: Apache-2.0
// The fast paths: the contender create and the first listing sent back to back (always); a
// waiter whose watched node's deletion already decides the rule takes the lock without listing
// again; session_options::background_release (unlock returns once the delete is sent). They must
// keep every guarantee of the slow paths: exclusion, order, tokens, nothing left behind.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <system_error>
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

// session::flush(): one round trip after which the session's background deletes are served.
TEST(FastPath, FlushWaitsForBackgroundDeletes) {
  const auto path = zkt::unique_path("fast-bg-flush");
  zklock::session s{background()};
  zklock::mutex m{s, path};
  for (int i = 0; i < 20; ++i) {
    m.lock();
    m.unlock();
    s.flush();
    EXPECT_TRUE(zkt::children(path).empty()) << "round " << i;
  }
  s.close();
  try {
    s.flush();
    ADD_FAILURE() << "flush() on a closed session did not throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(zklock::errc::session_closed));
  }
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

// C waits behind B, which waits behind the holder A. B's node disappears (here: deleted by a
// stranger; a timed-out B looks the same to C): C's watch reports a deletion, but C is not first
// yet and must list again and wait for A, not take the lock. B, whose own node is gone, must not
// take the lock either when A leaves (its watch on A says "A is gone", which alone would grant
// it): it gets contender_deleted, and C is the only holder after A.
TEST(FastPath, ADeletedPredecessorThatWasNotFirstDoesNotGrant) {
  const auto path = zkt::unique_path("fast-skip");
  zklock::session sa{zkt::options()}, sb{zkt::options()}, sc{zkt::options()};
  zklock::mutex a{sa, path}, b{sb, path}, c{sc, path};
  a.lock();
  std::atomic<bool> a_holds{true};
  std::atomic<bool> c_early{false};
  std::atomic<bool> b_held{false};
  std::error_code b_error;
  std::jthread tb{[&] {
    try {
      b.lock();  // its node is deleted under it: contender_deleted, never a hold
      b_held = true;
      b.unlock();
    } catch (const std::system_error& e) {
      b_error = e.code();
    }
  }};
  ASSERT_TRUE(zkt::await_children(path, 2));
  std::jthread tc{[&] {
    c.lock();
    if (a_holds.load()) c_early = true;
    c.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(path, 3));
  auto kids = zkt::children(path);
  std::sort(kids.begin(), kids.end(), [](const std::string& x, const std::string& y) {
    return x.substr(x.size() - 10) < y.substr(y.size() - 10);  // by sequence suffix
  });
  const std::string b_node = path + "/" + kids[1];
  const std::string c_node = path + "/" + kids[2];
  ASSERT_TRUE(zkt::await_watch(b_node, sc)) << "C never watched B";
  ASSERT_TRUE(zkt::remove(b_node));
  // C lists again and moves its watch to A (or would already hold, wrongly).
  const auto limit = std::chrono::steady_clock::now() + 30s;
  while (!zkt::watches_below(path + "/" + kids[0], sc).size() && !c_early.load() &&
         std::chrono::steady_clock::now() < limit)
    std::this_thread::yield();  // polling the server's watch table
  EXPECT_FALSE(c_early.load()) << "C took the lock while A held it";
  EXPECT_TRUE(zkt::exists(c_node));
  a_holds = false;
  a.unlock();
  tc.join();
  tb.join();
  EXPECT_FALSE(c_early.load());
  EXPECT_FALSE(b_held.load()) << "B took the lock although its node was gone";
  EXPECT_EQ(b_error, zklock::make_error_code(zklock::errc::contender_deleted));
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
