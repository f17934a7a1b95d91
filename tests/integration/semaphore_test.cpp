// SPDX-License-Identifier: Apache-2.0
// The counting semaphore: at most N holders and N reached, leases freed out of order go to the
// next in line, the lease count lives on the node and must match, bad counts and releases are
// refused — for every watch strategy x wake-up combination where waiting is involved.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <future>
#include <cstddef>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "expect_error.hpp"
#include "stop_probe.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using zkt::combos;
using zkt::await_children;

template <class C>
class Semaphore : public ::testing::Test {};
TYPED_TEST_SUITE(Semaphore, combos);

using zkt::code_of;

// N = 3, 12 threads with their own sessions and objects: never more than 3 holders, and 3 reached.
TYPED_TEST(Semaphore, NeverMoreThanNHoldersAndNReached) {
  const auto path = zkt::unique_path("sem-load");
  constexpr int n = 3, threads = 12, rounds = 4;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i < threads; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  std::atomic<int> current{0}, max_seen{0}, grants{0};
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        typename TypeParam::semaphore sem{*sessions[static_cast<std::size_t>(t)], path, n};
        for (int i = 0; i < rounds; ++i) {
          sem.acquire();
          ++grants;
          const int now = ++current;
          int seen = max_seen.load();
          while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {}
          // The work under the lease: until N holders were seen together, or 50 ms at most.
          const auto until = std::chrono::steady_clock::now() + 50ms;
          while (max_seen.load() < n && std::chrono::steady_clock::now() < until)
            std::this_thread::sleep_for(100us);
          --current;
          sem.release();
        }
        EXPECT_EQ(sem.held_leases(), 0);
      });
    }
  }
  EXPECT_EQ(grants.load(), threads * rounds);
  EXPECT_EQ(max_seen.load(), n);
  EXPECT_TRUE(zkt::children(path).empty());
}

// N = 2: A and B hold, C and D queue. B (the second) releases: C gets its lease while A still
// holds; D gets one only when A releases.
TYPED_TEST(Semaphore, OutOfOrderRelease) {
  const auto path = zkt::unique_path("sem-order");
  zklock::session sa{zkt::options()}, sb{zkt::options()}, sc{zkt::options()}, sd{zkt::options()};
  std::mutex mu;
  std::condition_variable cv;
  bool c_done = false, d_done = false;
  bool c_got = false, d_got = false;
  std::atomic<bool> a_released{false}, d_early{false};
  std::jthread tc, td;  // declared before the holders: an early return releases them, then joins
  typename TypeParam::semaphore a{sa, path, 2};
  typename TypeParam::semaphore b{sb, path, 2};
  ASSERT_TRUE(a.try_acquire_for(30s));
  ASSERT_TRUE(b.try_acquire_for(30s));
  ASSERT_EQ(zkt::children(path).size(), 2u);

  tc = std::jthread([&] {
    typename TypeParam::semaphore c{sc, path, 2};
    const bool got = c.try_acquire_for(30s);
    {
      std::lock_guard lk{mu};
      c_got = got;
      c_done = true;
    }
    cv.notify_all();
    std::unique_lock lk{mu};
    cv.wait_for(lk, 60s, [&] { return d_done; });  // keep the lease until D is through
  });
  ASSERT_TRUE(await_children(path, 3));
  td = std::jthread([&] {
    typename TypeParam::semaphore d{sd, path, 2};
    const bool got = d.try_acquire_for(30s);
    d_early = !a_released.load();
    {
      std::lock_guard lk{mu};
      d_got = got;
      d_done = true;
    }
    cv.notify_all();
  });
  ASSERT_TRUE(await_children(path, 4));

  b.release();  // the second lease: C moves up although A (the first) still holds
  {
    std::unique_lock lk{mu};
    EXPECT_TRUE(cv.wait_for(lk, 30s, [&] { return c_done; }));
    EXPECT_TRUE(c_got) << "C did not get the lease B released";
    EXPECT_FALSE(d_done) << "D got a lease while A and C held both";
  }
  EXPECT_EQ(a.held_leases(), 1);
  EXPECT_EQ(zkt::children(path).size(), 3u);  // A, C, and D still queued

  a_released = true;
  a.release();
  {
    std::unique_lock lk{mu};
    EXPECT_TRUE(cv.wait_for(lk, 30s, [&] { return d_done; }));
    EXPECT_TRUE(d_got);
  }
  EXPECT_FALSE(d_early.load()) << "D got a lease before A released";
  td.join();
  tc.join();
  EXPECT_TRUE(await_children(path, 0));
}

// A timed-out try_acquire_for and a failed try_acquire leave no node behind.
TYPED_TEST(Semaphore, FailedAttemptsLeaveNoNode) {
  const auto path = zkt::unique_path("sem-timeout");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  typename TypeParam::semaphore holder{s1, path, 1};
  typename TypeParam::semaphore other{s2, path, 1};
  holder.acquire();
  const auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_FALSE(other.try_acquire_for(200ms));
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_FALSE(other.try_acquire());
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_EQ(other.held_leases(), 0);
  holder.release();
  EXPECT_TRUE(other.try_acquire_for(30s));
  other.release();
  EXPECT_TRUE(zkt::children(path).empty());
}

// One object may hold several leases; release() returns them one at a time.
TYPED_TEST(Semaphore, OneObjectSeveralLeases) {
  const auto path = zkt::unique_path("sem-several");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  typename TypeParam::semaphore sem{s1, path, 2};
  typename TypeParam::semaphore other{s2, path, 2};
  sem.acquire();
  sem.acquire();
  EXPECT_EQ(sem.held_leases(), 2);
  EXPECT_EQ(zkt::children(path).size(), 2u);
  EXPECT_FALSE(other.try_acquire());
  sem.release();
  EXPECT_EQ(sem.held_leases(), 1);
  EXPECT_EQ(zkt::children(path).size(), 1u);
  EXPECT_TRUE(other.try_acquire_for(30s));
  other.release();
  sem.release();
  EXPECT_TRUE(zkt::children(path).empty());
}

// The lease count is stored on the semaphore node; opening it with another count is refused.
TEST(SemaphoreNode, StoresLeaseCountAndRefusesAnother) {
  const auto path = zkt::unique_path("sem-count");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::counting_semaphore sem{s1, path, 3};
  EXPECT_EQ(sem.leases(), 3);
  const auto node = zkt::stat_node(path);
  ASSERT_TRUE(node.exists);
  EXPECT_EQ(node.ephemeral_owner, 0) << "the semaphore node must outlive its sessions";
  // The stored count, whatever the text around it.
  std::string digits;
  for (char c : node.data)
    if (c >= '0' && c <= '9') digits += c;
  EXPECT_EQ(digits, "3") << "stored: \"" << node.data << "\"";

  const auto mismatch = std::error_code{zklock::errc::lease_count_mismatch};
  EXPECT_EQ(code_of([&] { zklock::counting_semaphore other{s2, path, 2}; }), mismatch);
  EXPECT_EQ(code_of([&] { zklock::counting_semaphore other{s1, path, 4}; }), mismatch);
  EXPECT_EQ(code_of([&] { zklock::counting_semaphore same{s2, path, 3}; }), std::error_code{});
  EXPECT_EQ(zkt::stat_node(path).data, node.data);  // a refused open changes nothing
}

// 0 or negative leases: std::invalid_argument, before anything is created.
TEST(SemaphoreNode, NonPositiveLeaseCountIsInvalid) {
  const auto path = zkt::unique_path("sem-invalid");
  zklock::session s{zkt::options()};
  EXPECT_THROW(zklock::counting_semaphore(s, path, 0), std::invalid_argument);
  EXPECT_THROW(zklock::counting_semaphore(s, path, -1), std::invalid_argument);
  EXPECT_FALSE(zkt::exists(path));
}

// release() without a lease does nothing (release(ec) says errc::not_held); also after the last
// lease was returned.
TEST(SemaphoreNode, ReleaseWithoutLeaseIsNotHeld) {
  const auto path = zkt::unique_path("sem-not-held");
  zklock::session s{zkt::options()};
  zklock::counting_semaphore sem{s, path, 2};
  const auto not_held = std::error_code{zklock::errc::not_held};
  std::error_code ec;
  sem.release(ec);
  EXPECT_EQ(ec, not_held);
  sem.acquire();
  sem.release();
  sem.release();  // nothing: no lease left
  sem.release(ec);
  EXPECT_EQ(ec, not_held);
  EXPECT_EQ(sem.held_leases(), 0);
  EXPECT_TRUE(zkt::children(path).empty());
}

// max(), used() and available() read the server: every process's leases count, waiters do not.
TEST(Leases, UsedAndAvailableCountEveryProcessButNotItsWaiters) {
  const auto path = zkt::unique_path("sem-usage");
  zklock::session s1{zkt::options()}, s2{zkt::options()}, s3{zkt::options()};
  zklock::counting_semaphore a{s1, path, 3}, b{s2, path, 3}, c{s3, path, 3};
  EXPECT_EQ(b.max(), 3);
  EXPECT_EQ(b.used(), 0);
  EXPECT_EQ(b.available(), 3);
  a.acquire();
  a.acquire();
  EXPECT_EQ(b.used(), 2);
  EXPECT_EQ(b.available(), 1);
  b.acquire();
  auto waiting = std::async(std::launch::async, [&] { return c.try_acquire_for(30s); });
  ASSERT_TRUE(await_children(path, 4));
  EXPECT_EQ(a.used(), 3) << "a waiter holds no lease";
  EXPECT_EQ(a.available(), 0);
  a.release();
  ASSERT_TRUE(waiting.get());
  EXPECT_EQ(c.used(), 3);
  a.release();
  b.release();
  ASSERT_TRUE(await_children(path, 1));  // (b's release is another session's: not waited for)
  EXPECT_EQ(a.used(), 1);
  EXPECT_EQ(a.available(), 2);
  c.release();
  EXPECT_EQ(c.used(), 0);
  EXPECT_EQ(c.max(), 3);
}

// A semaphore removed while idle (zklock::remove_lock) is made again, storing its lease count, by
// the next acquire of an object still open; another count is then refused with a message that
// says what the path is and what to do.
TEST(Leases, ARemovedSemaphoreIsMadeAgainWithItsCount) {
  const auto path = zkt::unique_path("sem-removed");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::counting_semaphore sem{s1, path, 2};
  const auto removed = zklock::remove_lock(s2, path);
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->leases, std::optional<std::size_t>{2});
  EXPECT_FALSE(zkt::exists(path));
  EXPECT_EQ(sem.max(), 2) << "the node is gone: the object's own count";
  EXPECT_EQ(sem.used(), 0);
  sem.acquire();
  const auto node = zkt::stat_node(path);
  ASSERT_TRUE(node.exists);
  EXPECT_EQ(node.ephemeral_owner, 0);
  EXPECT_EQ(node.data, "leases=2");
  EXPECT_EQ(sem.used(), 1);
  const std::string said = zkt::message_of([&] { zklock::counting_semaphore other{s2, path, 3}; });
  EXPECT_NE(said.find("is a semaphore with N = 2 leases, opened here with N = 3"), std::string::npos) << said;
  EXPECT_NE(said.find("zklock rm " + path), std::string::npos) << said;
  sem.release();
}

/// Returns: whether `path` went within 30 s (the test servers reap containers every second).
bool reaped(const std::string& path) {
  const auto until = std::chrono::steady_clock::now() + 30s;
  while (zkt::exists(path))
    if (std::chrono::steady_clock::now() > until) return false;
    else std::this_thread::sleep_for(20ms);
  return true;
}

// A used semaphore's node is a container: the server reaps it once no lease is held or wanted, and
// the objects still open make it again, with its count, on their next acquire. Three rounds of
// three processes' leases, each round until the node is reaped: never more than N held, every
// lease finds its node, and the node always stores its count.
TEST(Leases, AnIdleSemaphoreIsReapedAndMadeAgainByTheNextAcquire) {
  const auto path = zkt::unique_path("sem-reaped");
  constexpr int n = 2, threads = 3;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  std::vector<std::unique_ptr<zklock::counting_semaphore>> sems;
  for (int i = 0; i < threads; ++i) {
    sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
    sems.push_back(std::make_unique<zklock::counting_semaphore>(*sessions.back(), path, n));
  }
  std::atomic<int> held{0}, most{0};
  for (int round = 0; round < 3; ++round) {
    {
      std::vector<std::jthread> pool;
      for (auto& sem : sems)
        pool.emplace_back([&, sem = sem.get()] {
          for (int i = 0; i < 10; ++i) {
            sem->acquire();
            const int now = ++held;
            int seen = most.load();
            while (now > seen && !most.compare_exchange_weak(seen, now)) {}
            EXPECT_TRUE(zkt::exists(sem->fence().node));
            EXPECT_EQ(zkt::stat_node(path).data, "leases=2");
            --held;
            sem->release();
          }
        });
    }
    EXPECT_TRUE(reaped(path)) << "round " << round << ": an idle semaphore's node stayed";
  }
  EXPECT_LE(most.load(), n);
  EXPECT_EQ(sems[0]->used(), 0);
  EXPECT_EQ(sems[0]->max(), n);
}

// acquire_lease() and its timed forms hand the lease to the caller (a lock_hold): it is not the
// object's, may be released on another thread or after the object is gone, and carries its fence
// and loss signal; an empty one means not granted, leaving nothing behind.
TEST(Leases, ALeaseFromTheBlockingCallsIsTheCallers) {
  const auto path = zkt::unique_path("sem-lease");
  zklock::session s{zkt::options()};
  zklock::lock_hold kept;
  {
    zklock::counting_semaphore sem{s, path, 2};
    zklock::lock_hold a = sem.acquire_lease();
    ASSERT_TRUE(a.owns_lock());
    EXPECT_EQ(sem.held_leases(), 0) << "not one of the object's leases";
    EXPECT_TRUE(zkt::exists(a.fence().node));
    EXPECT_EQ(a.fencing_token(), a.fence().token);
    EXPECT_EQ(sem.used(), 1);
    zklock::lock_hold b = sem.try_acquire_lease_for(30s);
    ASSERT_TRUE(b);
    EXPECT_FALSE(sem.try_acquire_lease_for(0ms)) << "both leases are held";
    EXPECT_FALSE(sem.try_acquire_lease({.deadline = std::chrono::steady_clock::now() + 50ms}));
    EXPECT_EQ(zkt::children(path).size(), 2u) << "a lease not granted leaves nothing behind";
    std::thread{[h = std::move(a)]() mutable { h.unlock(); }}.join();  // released on another thread
    EXPECT_EQ(sem.used(), 1);
    kept = sem.try_acquire_lease_for(30s);
    ASSERT_TRUE(kept);
    sem.release();  // nothing of the object's: the callers' leases stay
    EXPECT_EQ(sem.used(), 2);
    zkt::stop_probe lost{b.lost_token()};
    ASSERT_TRUE(zkt::remove(b.fence().node));  // broken from outside: its loss signal fires
    EXPECT_TRUE(lost.wait(10s));
    EXPECT_FALSE(b.still_owned());
  }
  EXPECT_TRUE(kept.still_owned()) << "a lease outlives the object that granted it";
  kept.unlock();
  EXPECT_FALSE(kept);
  EXPECT_TRUE(zkt::await_children(path, 0));
}

}  // namespace
