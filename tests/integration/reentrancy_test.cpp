// SPDX-License-Identifier: Apache-2.0
// Reentrancy policies: per thread (recursive_mutex), none (mutex: re-locking throws), counted
// owner (any thread may unlock) — for every watch strategy x wake-up combination.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using zkt::combos;
using zkt::await_children;

template <class C>
class Reentrancy : public ::testing::Test {};
TYPED_TEST_SUITE(Reentrancy, combos);

// Per thread: three entries, one node; the node goes with the third unlock, not before.
TYPED_TEST(Reentrancy, PerThreadReentersThreeTimes) {
  const auto path = zkt::unique_path("reenter");
  zklock::session s{zkt::options()}, other_s{zkt::options()};
  typename TypeParam::recursive m{s, path};
  typename TypeParam::plain other{other_s, path};
  m.lock();
  EXPECT_TRUE(m.try_lock());
  EXPECT_TRUE(m.try_lock_for(10ms));
  const auto held = zkt::children(path);
  EXPECT_EQ(held.size(), 1u) << "a re-entry must not create a node";
  for (int i = 1; i < 3; ++i) {
    m.unlock();
    EXPECT_TRUE(m.owns_lock()) << "after unlock " << i;
    EXPECT_EQ(zkt::children(path), held) << "after unlock " << i;
    EXPECT_FALSE(other.try_lock()) << "another session got in after unlock " << i << " of 3";
  }
  m.unlock();
  EXPECT_FALSE(m.owns_lock());
  EXPECT_TRUE(zkt::children(path).empty());
  EXPECT_TRUE(other.try_lock());
  other.unlock();
}

// None: re-locking from the holding thread throws resource_deadlock_would_occur (lock, try_lock,
// try_lock_for alike) and leaves the one node.
TYPED_TEST(Reentrancy, NoneRelockThrows) {
  const auto path = zkt::unique_path("no-reenter");
  zklock::session s{zkt::options()};
  typename TypeParam::plain m{s, path};
  m.lock();
  const auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  for (int how = 0; how < 3; ++how) {
    try {
      if (how == 0) m.lock();
      if (how == 1) (void)m.try_lock();
      if (how == 2) (void)m.try_lock_for(30s);
      ADD_FAILURE() << "re-lock " << how << " did not throw";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), std::errc::resource_deadlock_would_occur) << e.what();
    }
    EXPECT_EQ(zkt::children(path), held);
  }
  EXPECT_TRUE(m.owns_lock());
  m.unlock();  // one unlock releases: the failed re-locks counted nothing
  EXPECT_FALSE(m.owns_lock());
  EXPECT_TRUE(zkt::children(path).empty());
}

// The default zklock::mutex is the non-re-entrant one.
TEST(ReentrancyAliases, MutexIsNotReentrant) {
  const auto path = zkt::unique_path("alias-no-reenter");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  std::lock_guard g{m};
  try {
    m.lock();
    ADD_FAILURE() << "zklock::mutex re-lock did not throw";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::errc::resource_deadlock_would_occur);
  }
  EXPECT_EQ(zkt::children(path).size(), 1u);
}

// Counted owner: three locks on thread A, three unlocks on thread B; another session gets in only
// after the third.
TYPED_TEST(Reentrancy, CountedOwnerUnlocksFromAnotherThread) {
  const auto path = zkt::unique_path("owner");
  zklock::session s{zkt::options()}, other_s{zkt::options()};
  typename TypeParam::owner m{s, path};
  typename TypeParam::plain other{other_s, path};
  std::thread([&] {
    m.lock();
    m.lock();
    m.lock();
  }).join();
  EXPECT_EQ(zkt::children(path).size(), 1u);
  std::thread([&] {
    EXPECT_TRUE(m.owns_lock());  // owned by the object, seen from any thread
    for (int i = 1; i < 3; ++i) {
      m.unlock();
      EXPECT_EQ(zkt::children(path).size(), 1u) << "after unlock " << i;
      EXPECT_FALSE(other.try_lock()) << "another session got in after unlock " << i << " of 3";
    }
    m.unlock();
  }).join();
  EXPECT_FALSE(m.owns_lock());
  EXPECT_TRUE(zkt::children(path).empty());
  EXPECT_TRUE(other.try_lock_for(30s));
  other.unlock();
}

// Per thread: two threads sharing ONE recursive object each queue their own node and take turns.
TYPED_TEST(Reentrancy, PerThreadThreadsOfOneObjectExcludeEachOther) {
  const auto path = zkt::unique_path("per-thread");
  zklock::session s{zkt::options()};
  typename TypeParam::recursive m{s, path};
  std::mutex mu;
  std::condition_variable cv;
  bool second_in = false;
  std::string second_node;
  m.lock();
  m.lock();
  const auto first = zkt::children(path);
  ASSERT_EQ(first.size(), 1u);
  std::jthread second([&] {
    m.lock();  // this thread does not hold: it queues its own node
    const auto kids = zkt::children(path);
    {
      std::lock_guard lk{mu};
      second_in = true;
      if (kids.size() == 1) second_node = kids.front();
    }
    cv.notify_all();
    m.unlock();
  });
  EXPECT_TRUE(await_children(path, 2)) << "the second thread queued no node of its own";
  {
    std::lock_guard lk{mu};
    EXPECT_FALSE(second_in);
  }
  m.unlock();
  EXPECT_EQ(zkt::children(path).size(), 2u) << "the first unlock of two released the node";
  {
    std::lock_guard lk{mu};
    EXPECT_FALSE(second_in) << "the second thread got in while the first still held once";
  }
  m.unlock();
  {
    std::unique_lock lk{mu};
    EXPECT_TRUE(cv.wait_for(lk, 30s, [&] { return second_in; }));
    EXPECT_FALSE(second_node.empty());
    EXPECT_NE(second_node, first.front());
  }
  second.join();
  EXPECT_TRUE(zkt::children(path).empty());

  // And under load: 4 threads x 10 entries (each entered twice) on the one object.
  std::atomic<int> inside{0}, max_inside{0};
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < 4; ++t)
      pool.emplace_back([&] {
        for (int i = 0; i < 10; ++i) {
          std::lock_guard g1{m};
          std::lock_guard g2{m};
          const int now = ++inside;
          int seen = max_inside.load();
          while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {}
          std::this_thread::yield();
          --inside;
        }
      });
  }
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
