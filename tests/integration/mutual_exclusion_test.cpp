// SPDX-License-Identifier: Apache-2.0
// Mutual exclusion and FIFO fairness, for every watch strategy x wake-up combination.
#include <algorithm>
#include <atomic>
#include <functional>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using zkt::combos;

template <class C>
class MutualExclusion : public ::testing::Test {};
TYPED_TEST_SUITE(MutualExclusion, combos);

// 100 threads, each with its own lock object (over 10 sessions), increment a plain counter.
TYPED_TEST(MutualExclusion, HundredThreadsOwnObjectsCounterIsExact) {
  const auto path = zkt::unique_path("counter");
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i < 10; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  long counter = 0;  // deliberately unsynchronised
  std::atomic<int> inside{0}, max_inside{0};
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 100; ++t) {
      threads.emplace_back([&, t] {
        typename TypeParam::mutex m{*sessions[t % 10], path};
        std::lock_guard g{m};
        const int now = ++inside;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {}
        const long v = counter;
        std::this_thread::yield();
        counter = v + 1;
        --inside;
      });
    }
  }
  EXPECT_EQ(counter, 100);
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_TRUE(zkt::children(path).empty());
}

// 10 threads share ONE lock object and take turns.
TYPED_TEST(MutualExclusion, TenThreadsShareOneObject) {
  const auto path = zkt::unique_path("shared-object");
  zklock::session s{zkt::options()};
  typename TypeParam::mutex m{s, path};
  long counter = 0;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 10; ++t)
      threads.emplace_back([&] {
        for (int i = 0; i < 10; ++i) {
          std::unique_lock g{m};
          const long v = counter;
          std::this_thread::yield();
          counter = v + 1;
        }
      });
  }
  EXPECT_EQ(counter, 100);
  EXPECT_TRUE(zkt::children(path).empty());
}

// Waiters are served in the order they queued.
TYPED_TEST(MutualExclusion, FifoAcrossSessions) {
  const auto path = zkt::unique_path("fifo");
  zklock::session holder_s{zkt::options()};
  typename TypeParam::mutex holder{holder_s, path};
  holder.lock();
  constexpr int n = 5;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i < n; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  std::mutex order_mu;
  std::vector<int> order;
  std::vector<std::jthread> threads;
  for (int i = 0; i < n; ++i) {
    // Start waiter i only once waiter i-1's node is queued, so that queue order is known.
    const auto before = zkt::children(path).size();
    threads.emplace_back([&, i] {
      typename TypeParam::mutex m{*sessions[i], path};
      std::lock_guard g{m};
      std::lock_guard lk{order_mu};
      order.push_back(i);
    });
    ASSERT_TRUE(zkt::await_children(path, before + 1)) << "waiter " << i << " never queued";
  }
  holder.unlock();
  threads.clear();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

// std::scoped_lock over several zklock mutexes is deadlock-free: two threads take the same two
// locks in opposite orders, many times, each with its own session and objects (std::lock backs
// off with try_lock). Any deadlock would stop the rounds from finishing in the bound.
TYPED_TEST(MutualExclusion, ScopedLockOverTwoMutexesInOppositeOrders) {
  const auto p1 = zkt::unique_path("scoped-1"), p2 = zkt::unique_path("scoped-2");
  constexpr int rounds = 40;
  std::atomic<int> in1{0}, in2{0}, overlaps{0}, done{0};
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  auto work = [&](zklock::session& s, bool reversed) {
    typename TypeParam::mutex a{s, p1}, b{s, p2};
    try {
      for (int i = 0; i < rounds; ++i) {
        auto body = [&] {
          if (in1.fetch_add(1) != 0 || in2.fetch_add(1) != 0) ++overlaps;
          std::this_thread::yield();
          --in1;
          --in2;
        };
        if (reversed) {
          std::scoped_lock g{b, a};
          body();
        } else {
          std::scoped_lock g{a, b};
          body();
        }
      }
      ++done;
    } catch (const std::system_error&) {  // the session was closed below: a deadlock
    }
  };
  {
    std::jthread t1{work, std::ref(s1), false}, t2{work, std::ref(s2), true};
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds{120};
    while (done.load() < 2 && std::chrono::steady_clock::now() < limit)
      std::this_thread::sleep_for(std::chrono::milliseconds{5});  // polling the two threads
    if (done.load() < 2) {  // deadlocked: closing the sessions wakes the blocked locks with an error
      s1.close();
      s2.close();
    }
    EXPECT_EQ(done.load(), 2) << "std::scoped_lock over two zklock mutexes deadlocked";
  }
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_TRUE(zkt::children(p1).empty());
  EXPECT_TRUE(zkt::children(p2).empty());
}

// try_lock_for while another client holds returns false on time: never before the wait has
// passed (it is a deadline, not a hint), and not long after it.
TYPED_TEST(MutualExclusion, TryLockForReturnsFalseOnTime) {
  const auto path = zkt::unique_path("on-time");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path}, contender{cs, path};
  holder.lock();
  for (auto wait : {std::chrono::milliseconds{0}, std::chrono::milliseconds{50}, std::chrono::milliseconds{400}}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_FALSE(contender.try_lock_for(wait));
    const auto took = std::chrono::steady_clock::now() - start;
    EXPECT_GE(took, wait);
    EXPECT_LT(took, wait + std::chrono::seconds{5}) << "for a wait of " << wait.count() << " ms";
  }
  holder.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

// Missing parents of a lock node are created as container nodes, and so is the lock node itself:
// once empty, the server reaps them (tools/zk checks every second; a persistent node would stay).
// Clients cannot read the container marker (the server shows them an ephemeralOwner of 0), so the
// reaping is the proof.
TEST(LockNode, MissingParentsAreContainerNodes) {
  const auto base = zkt::unique_path("containers");
  const auto path = base + "/a/b";
  {
    zklock::session s{zkt::options()};
    zklock::mutex m{s, path};
    m.lock();
    EXPECT_TRUE(zkt::exists(base + "/a"));
    m.unlock();
  }
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  while (zkt::exists(base) && std::chrono::steady_clock::now() < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds{50});  // polling the server
  EXPECT_FALSE(zkt::exists(path)) << "the lock node was not reaped: not a container";
  EXPECT_FALSE(zkt::exists(base + "/a")) << "a created parent was not reaped: not a container";
  EXPECT_FALSE(zkt::exists(base)) << "a created parent was not reaped: not a container";
}

}  // namespace
