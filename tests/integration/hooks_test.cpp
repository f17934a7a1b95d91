// SPDX-License-Identifier: Apache-2.0
// Observability hooks report what an acquire did: wait, queue position, wake-ups, requests, and
// the hold time on release.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

struct recorded {
  std::mutex mu;
  std::vector<zklock::acquire_stats> acquires;
  std::vector<zklock::release_stats> releases;
  std::vector<std::string> paths;
};
recorded& log() {
  static recorded r;
  return r;
}

struct test_hooks {
  static constexpr bool enabled = true;
  static void on_acquire(const zklock::acquire_stats& s) noexcept {
    std::lock_guard lk{log().mu};
    log().acquires.push_back(s);
    log().paths.emplace_back(s.path);
  }
  static void on_release(const zklock::release_stats& s) noexcept {
    std::lock_guard lk{log().mu};
    log().releases.push_back(s);
  }
};
static_assert(zklock::Hooks<test_hooks> && zklock::Hooks<zklock::no_hooks>);

using observed = zklock::basic_mutex<zklock::watch_predecessor, zklock::wake_condition_variable,
                                     zklock::reentrancy_none, zklock::timeout_forever, test_hooks>;

class Hooks : public ::testing::Test {
 protected:
  void SetUp() override {
    std::lock_guard lk{log().mu};
    log().acquires.clear();
    log().releases.clear();
  }
};

TEST_F(Hooks, UncontendedAcquireCostsTwoRequestsAndReportsTheHold) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("hooks-uncontended");
  observed m{s, path};
  m.lock();  // the first use also creates the lock node (and its parents): more requests
  m.unlock();
  {
    std::lock_guard lk{log().mu};
    ASSERT_EQ(log().acquires.size(), 1u);
    EXPECT_GT(log().acquires[0].requests, 2u) << "the containers' creates were not counted";
    log().acquires.clear();
    log().releases.clear();
    log().paths.clear();
  }
  m.lock();
  m.unlock();
  std::lock_guard lk{log().mu};
  ASSERT_EQ(log().acquires.size(), 1u);
  const auto& a = log().acquires[0];
  EXPECT_TRUE(a.acquired);
  EXPECT_EQ(a.queue_position, 0u);
  EXPECT_EQ(a.wakeups, 0u);
  EXPECT_EQ(a.requests, 2u);  // create + list, sent back to back (the release's delete is the third)
  EXPECT_EQ(log().paths[0], path);
  ASSERT_EQ(log().releases.size(), 1u);
  EXPECT_GE(log().releases[0].held.count(), 0);
}

TEST_F(Hooks, AWaiterReportsItsPlaceAndWakeUp) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-waiter");
  observed holder{a, path}, waiter{b, path};
  holder.lock();
  std::jthread t{[&] {
    waiter.lock();
    waiter.unlock();
  }};
  while (zkt::children(path).size() < 2) std::this_thread::yield();
  holder.unlock();
  t.join();
  std::lock_guard lk{log().mu};
  ASSERT_EQ(log().acquires.size(), 2u);
  const auto& w = log().acquires[1];
  EXPECT_TRUE(w.acquired);
  EXPECT_EQ(w.queue_position, 1u);
  EXPECT_EQ(w.wakeups, 1u);
  // create + list (back to back), watch the one ahead; its deletion decides: no second list
  EXPECT_EQ(w.requests, 3u);
  EXPECT_GT(w.wait, log().acquires[0].wait);
}

TEST_F(Hooks, AFailedTryIsReported) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-failed");
  observed holder{a, path}, other{b, path};
  holder.lock();
  EXPECT_FALSE(other.try_lock());
  holder.unlock();
  std::lock_guard lk{log().mu};
  ASSERT_EQ(log().acquires.size(), 2u);
  EXPECT_FALSE(log().acquires[1].acquired);
  EXPECT_EQ(log().acquires[1].queue_position, 1u);
  EXPECT_EQ(log().releases.size(), 1u);  // only the holder's release
}

}  // namespace
