// SPDX-License-Identifier: Apache-2.0
// The locks on a 3-node ensemble, with each session connected to one member only: a mutex, a
// shared_mutex and a counting_semaphore behave as on a standalone server.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// Returns: the members of ZKLOCK_TEST_ZK ("h:p1,h:p2,h:p3"), one connect string each.
std::vector<std::string> members() {
  std::vector<std::string> out;
  const std::string all = zkt::connect();
  for (std::size_t b = 0; b <= all.size();) {
    const auto e = std::min(all.find(',', b), all.size());
    out.push_back(all.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

/// Returns: one session per member, `per_member` times over (session i is on member i % 3).
std::vector<std::unique_ptr<zklock::session>> sessions_on_members(int per_member) {
  const auto ms = members();
  std::vector<std::unique_ptr<zklock::session>> out;
  for (int round = 0; round < per_member; ++round)
    for (const auto& m : ms) {
      auto o = zkt::options();
      o.connect = m;
      out.push_back(std::make_unique<zklock::session>(o));
    }
  return out;
}

void raise_max(std::atomic<int>& max, int now) {
  int seen = max.load();
  while (now > seen && !max.compare_exchange_weak(seen, now)) {}
}

TEST(Ensemble, ConnectStringNamesThreeMembers) { ASSERT_EQ(members().size(), 3u) << zkt::connect(); }

// 12 threads on 6 sessions spread over the three members increment a plain counter 5 times each.
TEST(Ensemble, MutexAcrossMembersCounterIsExact) {
  const auto path = zkt::unique_path("ens-mutex");
  auto sessions = sessions_on_members(2);
  long counter = 0;  // deliberately unsynchronised
  std::atomic<int> inside{0}, max_inside{0};
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < 12; ++t)
      threads.emplace_back([&, t] {
        zklock::mutex m{*sessions[t % sessions.size()], path};
        for (int i = 0; i < 5; ++i) {
          std::lock_guard g{m};
          raise_max(max_inside, ++inside);
          const long v = counter;
          std::this_thread::yield();
          counter = v + 1;
          --inside;
        }
      });
  }
  EXPECT_EQ(counter, 60);
  EXPECT_EQ(max_inside.load(), 1);
  EXPECT_TRUE(zkt::children(path).empty());
}

// Readers on two members overlap; a writer on the third waits for both, then excludes everyone.
TEST(Ensemble, SharedMutexAcrossMembers) {
  const auto path = zkt::unique_path("ens-rw");
  auto s = sessions_on_members(1);
  zklock::shared_mutex a{*s[0], path}, b{*s[1], path}, c{*s[2], path};

  std::shared_lock ra{a};
  ASSERT_TRUE(b.try_lock_shared_for(10s)) << "a second reader on another member";
  EXPECT_FALSE(c.try_lock()) << "a writer while two read";
  ra.unlock();
  b.unlock_shared();

  ASSERT_TRUE(c.try_lock_for(10s)) << "the writer once the readers left";
  EXPECT_FALSE(a.try_lock_shared()) << "a reader while the writer holds";
  EXPECT_FALSE(b.try_lock()) << "a second writer while the writer holds";
  c.unlock();
  EXPECT_TRUE(a.try_lock_shared_for(10s));
  a.unlock_shared();
  EXPECT_TRUE(zkt::children(path).empty());
}

// Two leases over three members: a third holder waits; under contention at most two hold.
TEST(Ensemble, SemaphoreAcrossMembers) {
  const auto path = zkt::unique_path("ens-sem");
  auto s = sessions_on_members(2);
  {
    zklock::counting_semaphore a{*s[0], path, 2}, b{*s[1], path, 2}, c{*s[2], path, 2};
    ASSERT_TRUE(a.try_acquire_for(10s));
    ASSERT_TRUE(b.try_acquire_for(10s));
    EXPECT_FALSE(c.try_acquire()) << "a third lease of two";
    a.release();
    ASSERT_TRUE(c.try_acquire_for(10s)) << "the lease freed on another member";
    b.release();
    c.release();
  }
  std::atomic<int> inside{0}, max_inside{0};
  {
    std::vector<std::jthread> threads;
    for (std::size_t t = 0; t < s.size(); ++t)
      threads.emplace_back([&, t] {
        zklock::counting_semaphore sem{*s[t], path, 2};
        for (int i = 0; i < 3; ++i) {
          sem.acquire();
          raise_max(max_inside, ++inside);
          std::this_thread::yield();
          --inside;
          sem.release();
        }
      });
  }
  EXPECT_LE(max_inside.load(), 2);
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
