// SPDX-License-Identifier: Apache-2.0
// Observability hooks report what an acquire did: wait, queue position, wake-ups, requests, and
// the hold time on release.
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include "zk_test.hpp"
#include "async_probe.hpp"

namespace {

/// 1 where a waiter's first watches (its own node's and those ahead) go as one request, 0 where
/// they go one request each (zkt::watches_in_one_request).
constexpr unsigned watches_in_one = zkt::watches_in_one_request ? 1 : 0;

/// What one hooks instance heard (each test has its own: no global state).
struct recorded {
  std::mutex mu;
  std::vector<zklock::acquire_stats> acquires;
  std::vector<zklock::release_stats> releases;
  std::vector<std::string> paths;          // of the acquires (the stats' views live as long as the call)
  std::vector<std::string> release_paths;  // of the releases
};

/// Hooks that carry their state: a pointer to the test's record, given to each lock's constructor.
struct test_hooks {
  static constexpr bool enabled = true;
  recorded* r = nullptr;
  void on_acquire(const zklock::acquire_stats& s) noexcept {
    std::lock_guard lk{r->mu};
    r->acquires.push_back(s);
    r->paths.emplace_back(s.path);
  }
  void on_release(const zklock::release_stats& s) noexcept {
    std::lock_guard lk{r->mu};
    r->releases.push_back(s);
    r->release_paths.emplace_back(s.path);
  }
};
static_assert(zklock::Hooks<test_hooks> && zklock::Hooks<zklock::no_hooks>);

using observed_policies = zklock::policies_with<test_hooks>;
using observed = zklock::basic_mutex<observed_policies>;
using observed_rw = zklock::basic_shared_mutex<observed_policies>;
using observed_sem = zklock::basic_counting_semaphore<observed_policies>;

class Hooks : public ::testing::Test {
 protected:
  /// Returns: hooks that record into this test's `rec`.
  test_hooks hooks() { return test_hooks{&rec}; }
  recorded rec;
};

TEST_F(Hooks, UncontendedAcquireCostsTwoRequestsAndReportsTheHold) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("hooks-uncontended");
  zkt::create_path(path.substr(0, path.rfind('/')));  // its parent exists: only the lock node is new
  observed m{s, path, hooks()};
  m.lock();  // the first use also creates the lock node: more requests
  m.unlock();
  {
    std::lock_guard lk{rec.mu};
    ASSERT_EQ(rec.acquires.size(), 1u);
    // the lock node's create, the contender's (in a transaction with the ACL probe) and the listing
    // go together; or the lock node and the contender in one transaction, and the listing
    EXPECT_EQ(rec.acquires[0].requests, zkt::fresh_lock_in_one_request ? 2u : 3u)
        << "a fresh lock node: one round trip, " << (zkt::fresh_lock_in_one_request ? "two" : "three") << " requests";
    rec.acquires.clear();
    rec.releases.clear();
    rec.paths.clear();
  }
  // The lock node is a container: the server removes it once empty, every second (tools/zk), so
  // it may be gone between the cycles (more likely on a slow run, e.g. under TSan), and then this
  // acquire creates it again. Count a cycle in which it stayed.
  for (int tries = 0;; ++tries) {
    const auto before = zkt::stat_node(path);
    m.lock();
    std::this_thread::sleep_for(std::chrono::milliseconds{50});  // the work under the lock
    const bool stayed = before.exists && zkt::stat_node(path).czxid == before.czxid;
    m.unlock();
    if (stayed || tries == 4) {
      ASSERT_TRUE(stayed) << "the lock node was removed between every pair of cycles";
      break;
    }
    std::lock_guard lk{rec.mu};
    rec.acquires.clear();
    rec.releases.clear();
    rec.paths.clear();
  }
  std::lock_guard lk{rec.mu};
  ASSERT_EQ(rec.acquires.size(), 1u);
  const auto& a = rec.acquires[0];
  EXPECT_TRUE(a.acquired);
  EXPECT_EQ(a.queue_position, 0u);
  EXPECT_EQ(a.wakeups, 0u);
  EXPECT_EQ(a.requests, 2u);  // create + list, sent back to back (the release's delete is the third)
  EXPECT_EQ(rec.paths[0], path);
  ASSERT_EQ(rec.releases.size(), 1u);
  EXPECT_GE(rec.releases[0].held, std::chrono::milliseconds{50}) << "the hold time must cover the work";
  EXPECT_LT(rec.releases[0].held, std::chrono::seconds{30});
}

TEST_F(Hooks, AWaiterReportsItsPlaceAndWakeUp) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-waiter");
  observed holder{a, path, hooks()}, waiter{b, path, hooks()};
  waiter.lock();  // the first use of a path in a session also reads its ACL: warm both up
  waiter.unlock();
  holder.lock();
  holder.unlock();
  {
    std::lock_guard lk{rec.mu};
    rec.acquires.clear();
    rec.releases.clear();
  }
  holder.lock();
  std::jthread t{[&] {
    waiter.lock();
    waiter.unlock();
  }};
  {  // both of the waiter's watches are armed: its own node's and the holder's
    const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds{30};
    while (zkt::watches_below(path, b).size() < 2) {
      ASSERT_LT(std::chrono::steady_clock::now(), limit) << "the waiter never watched the holder's node";
      std::this_thread::yield();
    }
  }
  // The waiter is queued (its watches are armed): whatever else its wait includes, it includes the
  // time the holder keeps the lock from now on.
  constexpr auto kept = std::chrono::milliseconds{50};
  std::this_thread::sleep_for(kept);
  holder.unlock();
  t.join();
  std::lock_guard lk{rec.mu};
  ASSERT_EQ(rec.acquires.size(), 2u);
  const auto& w = rec.acquires[1];
  EXPECT_TRUE(w.acquired);
  EXPECT_EQ(w.queue_position, 1u);
  EXPECT_EQ(w.wakeups, 1u);
  // create + list (back to back); watch our own node and the one ahead (one request where the C
  // client can, else two back to back); the deletion of the one ahead decides, our node still
  // standing: no second list
  EXPECT_EQ(w.requests, 4u - watches_in_one);
  EXPECT_GE(w.wait, kept);
}

// A timed try that gives up reports its whole wait, its place and what it sent, with acquired false.
TEST_F(Hooks, ATimedOutTryReportsItsWait) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-timed");
  observed holder{a, path, hooks()}, other{b, path, hooks()};
  other.lock();  // warm the path up in b's session (ACL check)
  other.unlock();
  holder.lock();
  {
    std::lock_guard lk{rec.mu};
    rec.acquires.clear();
  }
  EXPECT_FALSE(other.try_lock_for(std::chrono::milliseconds{200}));
  holder.unlock();
  std::lock_guard lk{rec.mu};
  ASSERT_EQ(rec.acquires.size(), 1u);
  const auto& t = rec.acquires[0];
  EXPECT_FALSE(t.acquired);
  EXPECT_GE(t.wait, std::chrono::milliseconds{200});
  EXPECT_EQ(t.queue_position, 1u);
  EXPECT_EQ(t.wakeups, 0u);
  // create + list, the two watches (ours and the holder's node: see above), the watch removal
  EXPECT_EQ(t.requests, 5u - watches_in_one);
}

// A semaphore's waiter also watches the semaphore's node (a change of N reaches it at once); that
// watch is the session's, kept armed between waits while the object lives: the session's next
// waiter sends one request fewer.
TEST_F(Hooks, ASemaphoreWaiterWatchesTheNodeOncePerSession) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-sem-watch");
  observed_sem holder{a, path, 1, hooks()}, other{b, path, 1, hooks()};
  other.acquire();  // warm the path up in b's session (ACL check)
  other.release();
  holder.acquire();
  {
    std::lock_guard lk{rec.mu};
    rec.acquires.clear();
  }
  EXPECT_FALSE(other.try_acquire_for(std::chrono::milliseconds{200}));
  EXPECT_FALSE(other.try_acquire_for(std::chrono::milliseconds{200}));
  holder.release();
  std::lock_guard lk{rec.mu};
  ASSERT_EQ(rec.acquires.size(), 2u);
  EXPECT_EQ(rec.acquires[0].queue_position, 1u);
  EXPECT_EQ(rec.acquires[1].queue_position, 1u);
  // create + list, the watches of our node, of the holder's (those two: see above) and of the
  // semaphore's node (by itself: its reply brings the node's version), the holder watch's removal;
  // then the same but the semaphore node's watch, armed still
  EXPECT_EQ(rec.acquires[0].requests, 6u - watches_in_one);
  EXPECT_EQ(rec.acquires[1].requests, 5u - watches_in_one);
}

TEST_F(Hooks, AFailedTryIsReported) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-failed");
  observed holder{a, path, hooks()}, other{b, path, hooks()};
  holder.lock();
  EXPECT_FALSE(other.try_lock());
  holder.unlock();
  std::lock_guard lk{rec.mu};
  ASSERT_EQ(rec.acquires.size(), 2u);
  EXPECT_FALSE(rec.acquires[1].acquired);
  EXPECT_EQ(rec.acquires[1].queue_position, 1u);
  EXPECT_EQ(rec.releases.size(), 1u);  // only the holder's release
}

// A session's first acquire takes the lock node for missing (the last one it met was): where the
// client can, it creates the lock node and its contender in one transaction, which fails whole if
// the lock node is there after all; then the ACL probe's transaction queues it, one round trip
// later, and leaves nothing of the first behind. Its next first acquire sends the probe at once.
TEST_F(Hooks, AFirstAcquireThatFindsTheLockNodeThereAfterAllQueuesBehindItsHolder) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  const auto path = zkt::unique_path("hooks-there");
  observed holder{a, path, hooks()}, other{b, path, hooks()}, later{b, path + "-2", hooks()};
  holder.lock();
  observed later_holder{a, path + "-2", hooks()};
  later_holder.lock();
  const auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  {
    std::lock_guard lk{rec.mu};
    rec.acquires.clear();
  }
  EXPECT_FALSE(other.try_lock());
  EXPECT_EQ(zkt::children(path), held) << "the failed try left a node";
  EXPECT_FALSE(later.try_lock());
  holder.unlock();
  later_holder.unlock();
  std::lock_guard lk{rec.mu};
  ASSERT_EQ(rec.acquires.size(), 2u);
  EXPECT_FALSE(rec.acquires[0].acquired);
  EXPECT_EQ(rec.acquires[0].queue_position, 1u);
  // the transaction of both creates and a listing; then the probe's and a listing. (Debian's client:
  // the lock node's create, the probe's transaction and the listing, together.)
  EXPECT_EQ(rec.acquires[0].requests, zkt::fresh_lock_in_one_request ? 4u : 3u);
  // the next path's first acquire: the probe's transaction and a listing
  EXPECT_EQ(rec.acquires[1].queue_position, 1u);
  EXPECT_EQ(rec.acquires[1].requests, 2u);
}

// Every primitive reports both ends of a hold: the read and write sides of a shared mutex (also
// through a downgrade, where the two sides share one node) and each semaphore lease.
TEST_F(Hooks, SharedMutexAndSemaphoreReportEveryRelease) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("hooks-rw");
  observed_rw rw{s, path, hooks()};
  rw.lock();
  rw.unlock();
  rw.lock_shared();
  rw.unlock_shared();
  rw.lock();
  rw.lock_shared();  // downgrade: shares the write node
  rw.unlock();
  rw.unlock_shared();
  observed_sem sem{s, path + "-sem", 2, hooks()};
  sem.acquire();
  sem.acquire();
  sem.release();
  sem.release();
  std::lock_guard lk{rec.mu};
  EXPECT_EQ(rec.acquires.size(), 5u) << "write, read, write (the downgrade's read adopts: no acquire), 2 leases";
  ASSERT_EQ(rec.releases.size(), 6u) << "every unlock, unlock_shared and release is reported";
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(rec.releases[i].path, path);
  EXPECT_EQ(rec.releases[4].path, path + "-sem");
  EXPECT_EQ(rec.releases[5].path, path + "-sem");
  for (const auto& r : rec.releases)  // from the grant (or the adoption), not from the clock's epoch
    EXPECT_LT(r.held, std::chrono::minutes{1});
  EXPECT_TRUE(zkt::children(path).empty());
}

// Two lock objects with hooks instances of their own report to their own records only; a lock_hold
// reports its release to the hooks of the object that granted it, even once that object is gone.
TEST_F(Hooks, EachInstanceHearsItsOwnLocksAlsoThroughALockHold) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("hooks-instances");
  recorded other;
  observed mine{s, path, hooks()};
  zklock::lock_hold kept;
  {
    observed theirs{s, path + "-other", test_hooks{&other}};
    mine.lock();
    mine.unlock();
    zkt::completion c;
    theirs.async_lock(c.callback());
    ASSERT_TRUE(c.wait());
    ASSERT_EQ(c.code(), std::error_code{});
    kept = std::move(c.hold());
  }
  kept.unlock();
  {
    std::lock_guard lk{rec.mu};
    ASSERT_EQ(rec.acquires.size(), 1u);
    EXPECT_EQ(rec.paths[0], path);
    ASSERT_EQ(rec.releases.size(), 1u);
  }
  std::lock_guard lk{other.mu};
  ASSERT_EQ(other.acquires.size(), 1u);
  EXPECT_EQ(other.paths[0], path + "-other");
  ASSERT_EQ(other.releases.size(), 1u) << "the lock_hold's release, after its lock object was destroyed";
  EXPECT_EQ(other.release_paths[0], path + "-other");
}

}  // namespace
