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
#include <set>
#include <random>
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
// N = 4, six threads with their own sessions taking 1, 2 or 3 permits at once: never more than 4
// permits held, and every acquire is granted (a lease of 3 is not starved by the smaller ones
// behind it, and two leases of 3 never deadlock on partial holds: none exist).
TYPED_TEST(Semaphore, ManyPermitsAtOnceNeverExceedNAndNoneStarves) {
  const auto path = zkt::unique_path("sem-permits");
  constexpr int n = 4, threads = 6, rounds = 4;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i < threads; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  std::atomic<int> current{0}, max_seen{0}, granted{0};
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        typename TypeParam::semaphore sem{*sessions[static_cast<std::size_t>(t)], path, n};
        const int k = 1 + t % 3;
        for (int i = 0; i < rounds; ++i) {
          if (!sem.try_acquire_for(k, 60s)) {
            ADD_FAILURE() << "a lease of " << k << " permits waited 60 s";
            return;
          }
          EXPECT_EQ(sem.held_permits(), k);
          const int now = current += k;
          int seen = max_seen.load();
          while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {}
          ++granted;
          std::this_thread::sleep_for(2ms);  // the work under the lease
          current -= k;
          sem.release();
        }
      });
    }
  }
  EXPECT_EQ(granted.load(), threads * rounds);
  EXPECT_LE(max_seen.load(), n);
  EXPECT_TRUE(await_children(path, 0));
}

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
  EXPECT_THROW(sem.acquire(3), std::invalid_argument) << "more than its N, with the node gone";
  EXPECT_FALSE(zkt::exists(path));
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

// Reaping under churn: three processes take and return leases with idle gaps between them, so
// that the server reaps the semaphore's node (every second on the test servers) while others are
// about to acquire; every acquire still finds (or makes) its node, and never more than N are held.
TEST(Leases, ReapingUnderChurnLosesNoAcquire) {
  const auto path = zkt::unique_path("sem-churn");
  constexpr int threads = 3;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i <= threads; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  std::atomic<int> current{0}, max_seen{0}, grants{0};
  std::atomic<bool> stop{false};
  std::set<std::int64_t> incarnations;  // the semaphore node's czxids seen: a new one after each reap
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        zklock::counting_semaphore sem{*sessions[static_cast<std::size_t>(t)], path, 2};
        std::mt19937 rng{static_cast<unsigned>(t)};
        while (!stop) {
          if (!sem.try_acquire_for(1 + t % 2, 30s)) {
            ADD_FAILURE() << "an acquire waited 30 s";
            return;
          }
          ++grants;
          const int now = current += 1 + t % 2;
          int seen = max_seen.load();
          while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {}
          current -= 1 + t % 2;
          sem.release();
          std::this_thread::sleep_for(std::chrono::milliseconds{std::uniform_int_distribution<>{0, 700}(rng)});  // idle
        }
      });
    const auto until = std::chrono::steady_clock::now() + 20s;
    while (incarnations.size() < 3 && std::chrono::steady_clock::now() < until) {
      if (const auto st = sessions.back()->exists(path)) incarnations.insert(st->czxid);
      std::this_thread::sleep_for(20ms);  // polling the node
    }
    stop = true;
  }
  EXPECT_GE(incarnations.size(), 2u) << "the node was never reaped and made again under churn";
  EXPECT_LE(max_seen.load(), 2);
  EXPECT_GT(grants.load(), 0);
}

// ---- acquire(n): many permits at once --------------------------------------------------------

// All n permits at once, in queue order: a lease of 3 that does not fit waits, and a later lease of
// 1 that would fit does not pass it; the 3 are granted together when enough are returned.
TEST(Permits, AllAtOnceInQueueOrderAndNeverPassedBySmallerOnes) {
  const auto path = zkt::unique_path("permits-order");
  zklock::session s1{zkt::options()}, s2{zkt::options()}, s3{zkt::options()};
  zklock::counting_semaphore a{s1, path, 4}, b{s2, path, 4}, c{s3, path, 4};
  a.acquire(2);
  EXPECT_EQ(a.held_leases(), 1);
  EXPECT_EQ(a.held_permits(), 2);
  EXPECT_EQ(c.used(), 2);
  EXPECT_EQ(c.available(), 2);
  EXPECT_FALSE(b.try_acquire(3)) << "3 permits do not fit beside 2";
  EXPECT_EQ(zkt::children(path).size(), 1u) << "an acquire not granted leaves nothing behind";
  auto three = std::async(std::launch::async, [&] { return b.acquire_lease(3); });
  ASSERT_TRUE(await_children(path, 2));
  EXPECT_FALSE(c.try_acquire(1)) << "a later lease of 1 passed the waiting lease of 3";
  EXPECT_FALSE(c.try_acquire_for(1, 20ms));
  EXPECT_EQ(zkt::children(path).size(), 2u);
  const auto listed = zklock::contenders(s3, path);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].permits, 2u);
  EXPECT_EQ(listed[1].permits, 3u);
  EXPECT_EQ(listed[1].state, zklock::contender_state::waiter);
  a.release();  // both of its permits
  zklock::lock_hold l = three.get();
  ASSERT_TRUE(l);
  EXPECT_EQ(l.permits(), 3);
  EXPECT_EQ(c.used(), 3);
  EXPECT_EQ(c.available(), 1);
  EXPECT_TRUE(c.try_acquire(1)) << "1 permit is free and no one waits";
  EXPECT_EQ(c.used(), 4);
  EXPECT_FALSE(a.try_acquire(1));
  l.unlock();
  EXPECT_EQ(c.used(), 1);
  c.release();
  EXPECT_TRUE(await_children(path, 0));
}

// n outside 1..N is the caller's mistake: std::invalid_argument at the call, nothing sent.
TEST(Permits, NoneOrMoreThanNIsRefusedAtTheCall) {
  const auto path = zkt::unique_path("permits-bad");
  zklock::session s{zkt::options()};
  zklock::counting_semaphore sem{s, path, 3};
  EXPECT_THROW(sem.acquire(4), std::invalid_argument);
  EXPECT_THROW(sem.acquire(0), std::invalid_argument);
  EXPECT_THROW((void)sem.try_acquire(-1), std::invalid_argument);
  EXPECT_THROW((void)sem.try_acquire_for(4, 10ms), std::invalid_argument);
  EXPECT_THROW((void)sem.acquire_lease(4), std::invalid_argument);
  EXPECT_THROW(sem.async_acquire(4, {}, [](std::error_code, zklock::lock_hold) { ADD_FAILURE() << "ran"; }),
               std::invalid_argument);
  try {
    sem.acquire(4);
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("4 permits asked of " + path + ", a semaphore of N = 3 leases: ask for 1 to 3"),
              std::string::npos)
        << what;
  }
  EXPECT_TRUE(sem.try_acquire(3)) << "all N at once";
  EXPECT_EQ(sem.available(), 0);
  sem.release();
  EXPECT_TRUE(await_children(path, 0));
}

// The timed, wait_context and asynchronous forms: a lease of n that does not fit in time, or is
// stopped, leaves nothing behind; the asynchronous one is granted whole.
TEST(Permits, TimedStoppedAndAsynchronousFormsTakeAllOrNothing) {
  const auto path = zkt::unique_path("permits-forms");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::counting_semaphore holder{s1, path, 3}, sem{s2, path, 3};
  holder.acquire(2);
  EXPECT_FALSE(sem.try_acquire_for(2, 30ms));
  EXPECT_FALSE(sem.try_acquire_until(2, std::chrono::steady_clock::now() + 30ms));
  EXPECT_FALSE(sem.try_acquire_lease_for(2, 30ms));
  EXPECT_EQ(zkt::children(path).size(), 1u);
  {
    std::stop_source stop;
    auto stopped = std::async(std::launch::async, [&] { return sem.try_acquire(2, {.stop = stop.get_token()}); });
    ASSERT_TRUE(await_children(path, 2));
    stop.request_stop();
    EXPECT_FALSE(stopped.get());
    EXPECT_TRUE(await_children(path, 1));
  }
  std::promise<std::pair<std::error_code, zklock::lock_hold>> done;
  sem.async_acquire(2, {}, [&](std::error_code ec, zklock::lock_hold h) { done.set_value({ec, std::move(h)}); });
  ASSERT_TRUE(await_children(path, 2));
  EXPECT_FALSE(sem.try_acquire(1)) << "a lease of 1 passed the waiting lease of 2";
  holder.release();
  auto [ec, h] = done.get_future().get();
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(h.permits(), 2);
  EXPECT_EQ(holder.used(), 2);
  h.unlock();
  EXPECT_TRUE(await_children(path, 0));
}

}  // namespace

// ---- set_max: N changes live ------------------------------------------------------------------

namespace {

// A larger N grants the waiters that now fit at once, with no release; a smaller one lets the
// holders keep their leases and grants nothing until the permits held fit in it. Objects opened
// before follow the node's N; max() reads it.
TEST(SetMax, WaitersSeeANewNAtOnce) {
  const auto path = zkt::unique_path("setmax");
  zklock::session s1{zkt::options()}, s2{zkt::options()}, s3{zkt::options()};
  zklock::counting_semaphore a{s1, path, 2}, b{s2, path, 2}, admin{s3, path, 2};
  a.acquire(2);
  auto waiting = std::async(std::launch::async, [&] { return b.try_acquire_lease_for(2, 60s); });
  ASSERT_TRUE(await_children(path, 2));
  EXPECT_EQ(admin.set_max(4), 2);
  zklock::lock_hold l = waiting.get();  // granted by the change alone: a still holds its 2
  ASSERT_TRUE(l);
  EXPECT_EQ(a.held_permits(), 2);
  EXPECT_EQ(admin.max(), 4);
  EXPECT_EQ(admin.used(), 4);
  EXPECT_EQ(b.max(), 4);
  EXPECT_EQ(b.leases(), 2) << "as opened";

  // Lower it to 3: the holders keep their 4 permits; a new lease of 1 waits until they fit.
  EXPECT_EQ(b.set_max(3), 4);
  EXPECT_TRUE(a.still_owned());
  EXPECT_TRUE(l.still_owned());
  EXPECT_FALSE(admin.try_acquire(1)) << "4 permits held, N = 3";
  auto one = std::async(std::launch::async, [&] { return admin.try_acquire_for(1, 60s); });
  ASSERT_TRUE(await_children(path, 3));
  l.unlock();  // 2 held: a lease of 1 fits in 3
  EXPECT_TRUE(one.get());
  EXPECT_EQ(admin.used(), 3);
  EXPECT_EQ(admin.available(), 0);
  // b last read N = 4: asked for 4, it queues, finds N = 3 and fails, leaving nothing behind.
  EXPECT_EQ(code_of([&] { (void)b.try_acquire(4); }), zklock::errc::lease_count_mismatch);
  EXPECT_EQ(zkt::children(path).size(), 2u);
  EXPECT_THROW((void)b.try_acquire(4), std::invalid_argument) << "now it knows N = 3";
  // acquire(n) over the N it knows reads the node's N first (raised elsewhere).
  EXPECT_EQ(a.set_max(5), 3);
  EXPECT_TRUE(b.try_acquire(2));
  EXPECT_EQ(b.used(), 5);
  b.release();
  a.release();
  admin.release();
  EXPECT_TRUE(await_children(path, 0));
  // A new object must be opened with the stored N.
  EXPECT_EQ(code_of([&] { zklock::counting_semaphore late{s1, path, 2}; }), zklock::errc::lease_count_mismatch);
  zklock::counting_semaphore late{s1, path, 5};
  EXPECT_THROW(late.set_max(0), std::invalid_argument);
}

// With N over 16 a waiter watches the semaphore's children (watch_predecessor), and a change of N
// still reaches it at once.
TEST(SetMax, AWaiterOnTheChildrenWatchSeesItToo) {
  const auto path = zkt::unique_path("setmax-wide");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::counting_semaphore a{s1, path, 20}, b{s2, path, 20};
  a.acquire(20);
  auto waiting = std::async(std::launch::async, [&] { return b.try_acquire_for(60s); });
  ASSERT_TRUE(await_children(path, 2));
  EXPECT_EQ(a.set_max(21), 20);
  EXPECT_TRUE(waiting.get());
  EXPECT_EQ(a.used(), 21);
  b.release();
  a.release();
}

// A session's waiters on one semaphore share one watch on its node, kept armed from one wait to the
// next while a semaphore object of the session on that path lives: waiters that find it armed (two
// objects of one session, after an earlier wait) are still granted by a change of N at once. The
// session's last object on the path gone, its watch goes too.
TEST(SetMax, WaitersSharingTheSessionsWatchOnTheNodeSeeANewN) {
  const auto path = zkt::unique_path("setmax-shared");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::counting_semaphore a{s1, path, 1};
  auto b = std::make_unique<zklock::counting_semaphore>(s2, path, 1);
  auto c = std::make_unique<zklock::counting_semaphore>(s2, path, 1);
  // Returns: once `sem` waits with the session's watch on the node armed, stops its wait (the
  // watch stays armed: the object lives).
  auto wait_until_watched_then_stop = [&](zklock::counting_semaphore& sem) {
    std::stop_source stop;
    auto waiting = std::async(std::launch::async, [&] { return sem.try_acquire(zklock::wait_context{.stop = stop.get_token()}); });
    const auto limit = std::chrono::steady_clock::now() + 30s;
    while (!zkt::watches_below(path, s2).contains(path) && std::chrono::steady_clock::now() < limit)
      std::this_thread::yield();
    stop.request_stop();
    EXPECT_FALSE(waiting.get());
  };
  a.acquire();
  wait_until_watched_then_stop(*b);  // arms the session's watch on the node, which stays
  s2.flush();
  EXPECT_EQ(zkt::watches_below(path, s2), std::set<std::string>{path}) << "none on a contender";
  auto wb = std::async(std::launch::async, [&] { return b->try_acquire_for(60s); });
  auto wc = std::async(std::launch::async, [&] { return c->try_acquire_for(60s); });
  ASSERT_TRUE(await_children(path, 3));
  EXPECT_EQ(a.set_max(3), 1);
  EXPECT_TRUE(wb.get());
  EXPECT_TRUE(wc.get());
  EXPECT_EQ(a.used(), 3);
  // Again, with the watch armed anew by the waiters the change woke (or by these).
  auto wb2 = std::async(std::launch::async, [&] { return b->try_acquire_for(60s); });
  ASSERT_TRUE(await_children(path, 4));
  EXPECT_EQ(a.set_max(4), 3);
  EXPECT_TRUE(wb2.get());
  wait_until_watched_then_stop(*c);  // 4 of 4 held: arms the watch again
  b.reset();  // (returns its two leases)
  s2.flush();
  EXPECT_TRUE(zkt::watches_below(path, s2).contains(path)) << "c still lives (and holds a lease, which it watches)";
  c.reset();
  s2.flush();
  EXPECT_FALSE(zkt::watches_below(path, s2).contains(path)) << "the last object's watch on the node stayed";
  a.release();
}

// N changing again and again while leases of 1 to 3 permits queue: every acquire is granted (none
// stranded by a change it missed), and the permits held never exceed the largest N.
TEST(SetMax, ChangesWhileWaitersQueueStrandNoOne) {
  const auto path = zkt::unique_path("setmax-churn");
  constexpr int threads = 6, rounds = 5;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i <= threads; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  zklock::counting_semaphore changer{*sessions.back(), path, 6};
  std::vector<std::unique_ptr<zklock::counting_semaphore>> sems;  // opened before N changes
  for (int t = 0; t < threads; ++t)
    sems.push_back(std::make_unique<zklock::counting_semaphore>(*sessions[static_cast<std::size_t>(t)], path, 6));
  std::atomic<int> current{0}, max_seen{0}, done{0};
  std::atomic<bool> failed{false};
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        auto& sem = *sems[static_cast<std::size_t>(t)];
        const int k = 1 + t % 3;
        for (int i = 0; i < rounds; ++i) {
          if (!sem.try_acquire_for(k, 60s)) {
            ADD_FAILURE() << "a lease of " << k << " waited 60 s";
            failed = true;
            break;
          }
          const int now = current += k;
          int seen = max_seen.load();
          while (now > seen && !max_seen.compare_exchange_weak(seen, now)) {}
          std::this_thread::sleep_for(2ms);  // the work under the lease
          current -= k;
          sem.release();
        }
        ++done;
      });
    for (std::ptrdiff_t n = 3; done.load() < threads; n = n == 3 ? 6 : 3) {  // the changes, as fast as they go
      (void)changer.set_max(n);
      std::this_thread::sleep_for(1ms);  // pacing
    }
  }
  EXPECT_FALSE(failed.load());
  EXPECT_LE(max_seen.load(), 6);
  EXPECT_TRUE(await_children(path, 0));
}

// A waiter for more permits than a lowered N can never be granted: it fails with
// lease_count_mismatch, leaving nothing behind.
TEST(SetMax, AWaiterForMoreThanTheNewNFails) {
  const auto path = zkt::unique_path("setmax-over");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  zklock::counting_semaphore a{s1, path, 4}, b{s2, path, 4};
  a.acquire(2);
  auto waiting = std::async(std::launch::async, [&] { return code_of([&] { (void)b.try_acquire_for(4, 60s); }); });
  ASSERT_TRUE(await_children(path, 2));
  EXPECT_EQ(a.set_max(3), 4);
  EXPECT_EQ(waiting.get(), zklock::errc::lease_count_mismatch);
  EXPECT_TRUE(await_children(path, 1));
  a.release();
}

// Concurrent changes are versioned writes: each applies whole, and the last one stays; a change
// never fails for another's.
TEST(SetMax, ConcurrentChangesEachApplyWhole) {
  const auto path = zkt::unique_path("setmax-race");
  constexpr int threads = 4, rounds = 10;
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i < threads; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  std::vector<std::unique_ptr<zklock::counting_semaphore>> sems;
  for (auto& s : sessions) sems.push_back(std::make_unique<zklock::counting_semaphore>(*s, path, 1));
  std::vector<std::jthread> pool;
  std::atomic<int> changes{0};
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int i = 0; i < rounds; ++i) {
        EXPECT_GE(sems[static_cast<std::size_t>(t)]->set_max(10 * (t + 1) + i), 1);
        ++changes;
      }
    });
  pool.clear();
  EXPECT_EQ(changes.load(), threads * rounds);
  const auto n = sems[0]->max();
  EXPECT_EQ(n % 10, rounds - 1) << n << ": the last write of some thread";
}

}  // namespace
