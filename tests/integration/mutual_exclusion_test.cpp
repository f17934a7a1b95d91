// SPDX-License-Identifier: Apache-2.0
// Mutual exclusion and FIFO fairness, for every watch strategy x wake-up combination.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
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
    while (zkt::children(path).size() == before) std::this_thread::yield();
  }
  holder.unlock();
  threads.clear();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
}

}  // namespace
