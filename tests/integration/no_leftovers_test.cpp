// SPDX-License-Identifier: Apache-2.0
// Nothing is left behind: failed tries, timeouts and exceptions leave no contender node and no
// watch on the server; unlock deletes the node; a destroyed lock object releases — for every watch
// strategy x wake-up combination.
#include <chrono>
#include <functional>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using zkt::combos;
using zkt::await_children;
using zkt::await_watch;
using zkt::watches_below;

template <class C>
class NoLeftovers : public ::testing::Test {};
TYPED_TEST_SUITE(NoLeftovers, combos);

// try_lock_for and try_lock while another session holds: false, and neither a node nor a watch of
// the attempt remains. A control shows that a waiting attempt's watch is visible. (The server's
// "wchp" lists data watches only: a children watch can not be seen, so with watch_children the
// watch checks pass trivially.)
TYPED_TEST(NoLeftovers, FailedMutexTries) {
  const auto path = zkt::unique_path("left-mutex");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path};
  typename TypeParam::mutex contender{cs, path};
  holder.lock();
  const auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);

  EXPECT_FALSE(contender.try_lock_for(250ms));
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  EXPECT_FALSE(contender.try_lock());
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  EXPECT_FALSE(contender.owns_lock());

  // Control: while it waits, the contender's watch is listed; once it holds, it is gone.
  bool got = false;
  {
    std::jthread waiter([&] {
      got = contender.try_lock_for(30s);
      if (got) contender.unlock();
    });
    if constexpr (TypeParam::watches_nodes)
      EXPECT_TRUE(await_watch(path, cs)) << "wchp never listed the waiting contender's watch";
    else
      EXPECT_TRUE(await_children(path, 2));
    holder.unlock();
  }
  EXPECT_TRUE(got);
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  EXPECT_TRUE(zkt::children(path).empty());
}

// Both sides of a read/write lock: failed tries leave neither node nor watch.
TYPED_TEST(NoLeftovers, FailedSharedMutexTries) {
  const auto path = zkt::unique_path("left-rw");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::shared_mutex holder{hs, path};
  typename TypeParam::shared_mutex contender{cs, path};

  holder.lock();
  auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_FALSE(contender.try_lock_shared_for(250ms));
  EXPECT_FALSE(contender.try_lock_shared());
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  holder.unlock();

  holder.lock_shared();
  held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_FALSE(contender.try_lock_for(250ms));
  EXPECT_FALSE(contender.try_lock());
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  holder.unlock_shared();
  EXPECT_TRUE(zkt::children(path).empty());
}

// A semaphore: a failed first waiter (it watches every change) and a failed later waiter (it
// watches the one ahead) leave neither node nor watch.
TYPED_TEST(NoLeftovers, FailedSemaphoreTries) {
  const auto path = zkt::unique_path("left-sem");
  zklock::session hs{zkt::options()}, cs{zkt::options()}, ws{zkt::options()}, ws2{zkt::options()};
  typename TypeParam::semaphore holder{hs, path, 1};
  typename TypeParam::semaphore contender{cs, path, 1};
  holder.acquire();
  const auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  // What a failed try may leave is the session's one watch on the semaphore's node itself (kept
  // armed for the session's next waiter while the object lives, so that a change of N reaches it:
  // see arm_watches), never one on a contender.
  auto node_only = [&] {
    for (const auto& w : watches_below(path, cs)) EXPECT_EQ(w, path) << "a contender's watch stayed";
  };
  EXPECT_FALSE(contender.try_acquire_for(250ms));  // as the first waiter
  EXPECT_FALSE(contender.try_acquire());
  EXPECT_EQ(zkt::children(path), held);
  node_only();

  bool got_first = false, got_second = false;
  {
    std::jthread first([&] {
      typename TypeParam::semaphore w{ws, path, 1};
      got_first = w.try_acquire_for(30s);
      if (got_first) w.release();
    });
    ASSERT_TRUE(await_children(path, 2));
    EXPECT_FALSE(contender.try_acquire_for(250ms));  // as a later waiter
    EXPECT_EQ(zkt::children(path).size(), 2u);
    node_only();

    std::jthread second([&] {
      typename TypeParam::semaphore w{ws2, path, 1};
      got_second = w.try_acquire_for(30s);
      if (got_second) w.release();
    });
    ASSERT_TRUE(await_children(path, 3));
    // Control: a later waiter that keeps waiting shows its watch.
    if constexpr (TypeParam::watches_nodes) EXPECT_TRUE(await_watch(path, ws2));
    holder.release();
  }
  EXPECT_TRUE(got_first);
  EXPECT_TRUE(got_second);
  EXPECT_TRUE(zkt::children(path).empty());
}

// The same failed tries counted by the server itself ("mntr": data and children watches of every
// session, which "wchp" cannot show for children watches): every watch a failed attempt armed is
// gone once the attempt has returned (a round trip on its session makes sure the removal was
// served). On a server of its own, so that other tests' watches do not count.
TYPED_TEST(NoLeftovers, TheServerCountsNoWatchOfAFailedAttempt) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("left-count");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path};
  typename TypeParam::mutex contender{cs, path};
  typename TypeParam::semaphore sem_holder{hs, path + "-sem", 1};
  typename TypeParam::semaphore sem_contender{cs, path + "-sem", 1};
  holder.lock();
  sem_holder.acquire();
  const long long before = zkt::server_watch_count();
  ASSERT_GE(before, 0) << "cannot read mntr";
  {
    // Control: a waiting attempt is counted.
    std::jthread waiter([&] { EXPECT_FALSE(contender.try_lock_for(2s)); });
    const auto limit = std::chrono::steady_clock::now() + 30s;
    while (zkt::server_watch_count() <= before && std::chrono::steady_clock::now() < limit) std::this_thread::yield();
    EXPECT_GT(zkt::server_watch_count(), before) << "a waiting attempt's watch was not counted";
  }
  EXPECT_FALSE(contender.try_lock_for(250ms));
  cs.flush();
  EXPECT_EQ(zkt::server_watch_count(), before);
  // The first waiter of a semaphore (a children watch): what may stay is the session's one watch
  // on the semaphore's node, kept for its next waiter (if the try armed it before it gave up); a
  // second failed try adds none.
  EXPECT_FALSE(sem_contender.try_acquire_for(250ms));
  cs.flush();
  const long long after_one = zkt::server_watch_count();
  EXPECT_TRUE(after_one == before || after_one == before + 1) << after_one << " watches, " << before << " before";
  EXPECT_FALSE(sem_contender.try_acquire_for(250ms));
  cs.flush();
  EXPECT_LE(zkt::server_watch_count(), before + 1);
  holder.unlock();
  sem_holder.release();
}

// A refusal by the server in the middle of a wait, with the session alive: a stranger's contender
// ahead of ours that we may not read (its ACL gives us nothing). Watching it fails with no_auth
// (predecessor watch, one getData watch per node), or the wait just times out (children watch; or
// the waiter's watches armed by one request, which the server takes without a READ check): either
// way our node and our watches are gone, and the session goes on working.
TYPED_TEST(NoLeftovers, AServerRefusalWhileWaitingLeavesNothing) {
  zkt::private_server zk;
  const auto path = zkt::unique_path("left-refusal");
  zkt::create_path(path);
  zkt::raw_client stranger{"stranger", "pw"};
  const std::string foreign = path + "/_c_00000000-0000-4000-8000-000000000000-lock-0000000000";
  ASSERT_EQ(stranger.create_with_world(foreign, 0), 0);
  zklock::session s{zkt::options()};
  typename TypeParam::mutex m{s, path};
  const long long before = zkt::server_watch_count();
  std::optional<std::error_code> refused;
  try {
    EXPECT_FALSE(m.try_lock_for(500ms));
  } catch (const std::system_error& e) {
    refused = e.code();
  }
  if constexpr (TypeParam::watches_nodes && !zkt::watches_in_one_request) {
    EXPECT_EQ(refused, std::optional<std::error_code>{zklock::errc::no_auth}) << "watching an unreadable node";
  } else {
    EXPECT_FALSE(refused.has_value());
  }
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(zkt::children(path), std::vector<std::string>{foreign.substr(path.size() + 1)}) << "our node stayed";
  s.flush();
  EXPECT_EQ(zkt::server_watch_count(), before) << "a watch of the failed attempt stayed";
  EXPECT_EQ(stranger.remove(foreign), 0);
  m.lock();  // the session still works
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

// timeout_throw_after: lock() throws lock_timeout and leaves nothing.
TYPED_TEST(NoLeftovers, TimeoutPolicyThrowsAndCleansUp) {
  const auto path = zkt::unique_path("left-timeout");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path};
  typename TypeParam::timed_mutex timed{cs, path};
  holder.lock();
  const auto held = zkt::children(path);
  try {
    timed.lock();
    ADD_FAILURE() << "lock() did not time out";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), std::error_code{zklock::errc::lock_timeout}) << e.what();
  }
  EXPECT_FALSE(timed.owns_lock());
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  holder.unlock();
  timed.lock();  // free now: no timeout
  EXPECT_TRUE(timed.owns_lock());
  timed.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

// timeout_throw_after bounds every blocking call of every primitive: lock() of a mutex, lock() and
// lock_shared() of a shared mutex, acquire() of a semaphore each throw lock_timeout, not before the
// bound has passed, and leave no node and no watch behind.
TYPED_TEST(NoLeftovers, TimeoutPolicyBoundsEveryBlockingCall) {
  const auto path = zkt::unique_path("left-timeout-all");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path + "-m"};
  typename TypeParam::shared_mutex writer{hs, path + "-rw"};
  typename TypeParam::semaphore sem_holder{hs, path + "-sem", 1};
  holder.lock();
  writer.lock();
  sem_holder.acquire();
  typename TypeParam::timed_mutex m{cs, path + "-m"};
  typename TypeParam::timed_shared_mutex rw{cs, path + "-rw"};
  typename TypeParam::timed_semaphore sem{cs, path + "-sem", 1};
  const std::vector<std::pair<const char*, std::function<void()>>> calls{
      {"mutex::lock", [&] { m.lock(); }},
      {"shared_mutex::lock", [&] { rw.lock(); }},
      {"shared_mutex::lock_shared", [&] { rw.lock_shared(); }},
      {"counting_semaphore::acquire", [&] { sem.acquire(); }}};
  for (const auto& [name, call] : calls) {
    const auto start = std::chrono::steady_clock::now();
    try {
      call();
      ADD_FAILURE() << name << " did not time out";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), std::error_code{zklock::errc::lock_timeout}) << name << ": " << e.what();
    }
    EXPECT_GE(std::chrono::steady_clock::now() - start, TypeParam::timed_bound) << name << " gave up early";
  }
  EXPECT_FALSE(m.owns_lock());
  EXPECT_FALSE(rw.owns_lock());
  EXPECT_FALSE(rw.owns_shared());
  EXPECT_EQ(sem.held_leases(), 0);
  for (const auto* p : {"-m", "-rw", "-sem"}) EXPECT_EQ(zkt::children(path + p).size(), 1u) << p;
  EXPECT_EQ(watches_below(path, cs), std::set<std::string>{});
  holder.unlock();
  writer.unlock();
  sem_holder.release();
}

// An exception while waiting (the waiter's session is closed from another thread) leaves nothing.
TYPED_TEST(NoLeftovers, SessionClosedWhileWaiting) {
  const auto path = zkt::unique_path("left-closed");
  zklock::session hs{zkt::options()};
  typename TypeParam::mutex holder{hs, path};
  holder.lock();
  const auto held = zkt::children(path);
  // Shared with the waiter, which is abandoned (detached) if it never returns.
  struct waiting {
    zklock::session s{zkt::options()};
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::optional<std::error_code> failure;
  };
  auto w = std::make_shared<waiting>();
  std::thread waiter([w, path] {
    std::optional<std::error_code> code;
    {
      typename TypeParam::mutex m{w->s, path};
      try {
        m.lock();
      } catch (const std::system_error& e) {
        code = e.code();
      }
    }
    std::lock_guard lk{w->mu};
    w->failure = code;
    w->done = true;
    w->cv.notify_all();
  });
  EXPECT_TRUE(await_children(path, 2));
  // Close while the waiter waits on its watch (visible to "wchp" for a predecessor watch only:
  // the server's wch* words list data watches, not children watches).
  if constexpr (TypeParam::watches_nodes) EXPECT_TRUE(await_watch(path, w->s));
  w->s.close();
  {
    std::unique_lock lk{w->mu};
    if (!w->cv.wait_for(lk, 30s, [&] { return w->done; })) {
      lk.unlock();
      waiter.detach();
      FAIL() << "lock() kept waiting on a closed session";
    }
    EXPECT_EQ(w->failure, std::optional{std::error_code{zklock::errc::session_closed}})
        << "lock() returned, or failed otherwise, on a closed session";
  }
  waiter.join();
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_TRUE(holder.owns_lock());
  holder.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

// unlock() without a hold does nothing (and cannot throw); the holder's unlock deletes its node.
TYPED_TEST(NoLeftovers, UnlockDeletesOnlyTheHoldersNode) {
  const auto path = zkt::unique_path("left-unlock");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path};
  typename TypeParam::mutex other{cs, path};
  typename TypeParam::shared_mutex rw{cs, path + "-rw"};
  static_assert(noexcept(other.unlock()));
  static_assert(noexcept(rw.unlock()) && noexcept(rw.unlock_shared()));

  other.unlock();  // never held
  rw.unlock();
  rw.unlock_shared();
  EXPECT_FALSE(zkt::exists(path));

  holder.lock();
  const auto held = zkt::children(path);
  ASSERT_EQ(held.size(), 1u);
  const auto node = zkt::stat_node(path + "/" + held.front());
  EXPECT_EQ(node.ephemeral_owner, hs.id());
  other.unlock();  // another session's object: must not touch the holder's node
  std::thread([&] { holder.unlock(); }).join();  // another thread of the holder's object: nor here
  EXPECT_TRUE(holder.owns_lock());
  EXPECT_EQ(zkt::children(path), held);
  EXPECT_FALSE(other.try_lock());

  holder.unlock();
  EXPECT_FALSE(holder.owns_lock());
  EXPECT_FALSE(zkt::stat_node(path + "/" + held.front()).exists);
  EXPECT_TRUE(zkt::children(path).empty());
  holder.unlock();  // again: nothing
  EXPECT_TRUE(other.try_lock());
  other.unlock();
}

// A lock object destroyed while holding releases: mutex, both sides of a read/write lock, and
// every lease of a semaphore.
TYPED_TEST(NoLeftovers, DestroyedWhileHoldingReleases) {
  const auto path = zkt::unique_path("left-destroyed");
  zklock::session s{zkt::options()}, other_s{zkt::options()};
  {
    typename TypeParam::mutex m{s, path};
    m.lock();
    EXPECT_EQ(zkt::children(path).size(), 1u);
  }
  EXPECT_TRUE(zkt::children(path).empty());
  typename TypeParam::mutex other{other_s, path};
  EXPECT_TRUE(other.try_lock());
  other.unlock();

  const auto rw_path = path + "-rw";
  {
    typename TypeParam::shared_mutex w{s, rw_path};
    w.lock();
    EXPECT_EQ(zkt::children(rw_path).size(), 1u);
  }
  EXPECT_TRUE(zkt::children(rw_path).empty());
  {
    typename TypeParam::shared_mutex r1{s, rw_path};
    typename TypeParam::shared_mutex r2{s, rw_path};
    r1.lock_shared();
    r2.lock_shared();
    EXPECT_EQ(zkt::children(rw_path).size(), 2u);
  }
  EXPECT_TRUE(zkt::children(rw_path).empty());
  {
    typename TypeParam::shared_mutex both{s, rw_path};  // write side, then the read side too
    both.lock();
    both.lock_shared();
  }
  EXPECT_TRUE(zkt::children(rw_path).empty());
  typename TypeParam::shared_mutex other_rw{other_s, rw_path};
  EXPECT_TRUE(other_rw.try_lock());
  other_rw.unlock();

  const auto sem_path = path + "-sem";
  {
    typename TypeParam::semaphore sem{s, sem_path, 3};
    sem.acquire();
    sem.acquire();
    EXPECT_EQ(zkt::children(sem_path).size(), 2u);
  }
  EXPECT_TRUE(zkt::children(sem_path).empty());
  typename TypeParam::semaphore other_sem{other_s, sem_path, 3};
  EXPECT_TRUE(other_sem.try_acquire());
  EXPECT_TRUE(other_sem.try_acquire());
  EXPECT_TRUE(other_sem.try_acquire());
  other_sem.release();
  other_sem.release();
  other_sem.release();
}

}  // namespace
