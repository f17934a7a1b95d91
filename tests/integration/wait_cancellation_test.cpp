// SPDX-License-Identifier: Apache-2.0
// Cancelling a wait: a stop request on a wait_context's token, from another thread, ends a waiting
// try_lock / try_lock_shared / try_acquire with false and leaves no contender node behind — for
// every watch strategy x wake-up combination; the object stays usable; a deadline still bounds it.
#include <chrono>
#include <cstddef>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using zkt::combos;

template <class C>
class WaitCancellation : public ::testing::Test {};
TYPED_TEST_SUITE(WaitCancellation, combos);

/// Runs `try_with(wait_context)` on a thread while a holder keeps `held` nodes under `path`; once
/// the waiter's node has joined them, stops it from this thread. Expects: the try returned false
/// and no node of it is left (`held` remain).
template <class Try>
void cancel_while_queued(const std::string& path, std::size_t held, Try&& try_with) {
  std::optional<bool> got;
  {
    std::jthread waiter([&](std::stop_token stop) { got = try_with(zklock::wait_context{.stop = stop}); });
    ASSERT_TRUE(zkt::await_children(path, held + 1)) << "the waiter never queued";
    waiter.request_stop();
  }  // joins
  ASSERT_TRUE(got.has_value());
  EXPECT_FALSE(*got) << "a cancelled wait reports false";
  EXPECT_EQ(zkt::children(path).size(), held) << "the cancelled wait left its contender node";
}

TYPED_TEST(WaitCancellation, MutexWait) {
  const auto path = zkt::unique_path("cancel-mutex");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::mutex holder{hs, path}, waiter{cs, path};
  holder.lock();
  cancel_while_queued(path, 1, [&](const zklock::wait_context& wc) { return waiter.try_lock(wc); });
  EXPECT_FALSE(waiter.owns_lock());
  holder.unlock();
  EXPECT_EQ(zkt::children(path).size(), 0u) << "nodes under the lock path after the cancel and the unlock";
  // The object is not left half-acquiring: it locks again, and a deadline in a context still bounds.
  ASSERT_TRUE(waiter.try_lock_for(10s));
  EXPECT_FALSE(holder.try_lock(zklock::wait_context{.deadline = std::chrono::steady_clock::now() + 100ms}));
  waiter.unlock();
  EXPECT_EQ(zkt::children(path).size(), 0u);
}

// A reader waiting on a writer, then a writer waiting on a reader.
TYPED_TEST(WaitCancellation, SharedMutexWaits) {
  const auto path = zkt::unique_path("cancel-rw");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::shared_mutex holder{hs, path}, waiter{cs, path};
  holder.lock();
  cancel_while_queued(path, 1, [&](const zklock::wait_context& wc) { return waiter.try_lock_shared(wc); });
  EXPECT_FALSE(waiter.owns_shared());
  holder.unlock();
  holder.lock_shared();
  cancel_while_queued(path, 1, [&](const zklock::wait_context& wc) { return waiter.try_lock(wc); });
  EXPECT_FALSE(waiter.owns_lock());
  holder.unlock_shared();
  EXPECT_EQ(zkt::children(path).size(), 0u);
}

TYPED_TEST(WaitCancellation, SemaphoreWait) {
  const auto path = zkt::unique_path("cancel-sem");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  typename TypeParam::semaphore holder{hs, path, 1}, waiter{cs, path, 1};
  holder.acquire();
  cancel_while_queued(path, 1, [&](const zklock::wait_context& wc) { return waiter.try_acquire(wc); });
  EXPECT_EQ(waiter.held_leases(), 0);
  holder.release();
  EXPECT_EQ(zkt::children(path).size(), 0u);
}

// A lock object owned by the object (owner_mutex): a second thread's try waits, without a node of
// its own, for the first thread's acquire; a stop ends that wait too, then the first is stopped.
TEST(WaitCancellationOwner, WaitForTheOwnersOtherAcquire) {
  const auto path = zkt::unique_path("cancel-owner");
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  zklock::mutex holder{hs, path};
  zklock::owner_mutex shared{cs, path};
  holder.lock();
  std::optional<bool> first, second;
  {
    std::jthread a([&](std::stop_token stop) { first = shared.try_lock(zklock::wait_context{.stop = stop}); });
    ASSERT_TRUE(zkt::await_children(path, 2)) << "the first acquire never queued";
    {
      std::jthread b([&](std::stop_token stop) { second = shared.try_lock(zklock::wait_context{.stop = stop}); });
      b.request_stop();
    }
    ASSERT_TRUE(second.has_value());
    EXPECT_FALSE(*second);
    EXPECT_EQ(zkt::children(path).size(), 2u) << "the first acquire still waits";
    a.request_stop();
  }
  ASSERT_TRUE(first.has_value());
  EXPECT_FALSE(*first);
  EXPECT_EQ(zkt::children(path).size(), 1u);
  holder.unlock();
  EXPECT_EQ(zkt::children(path).size(), 0u);
}

// A stop requested before the call: the try returns false without a single request, even on a
// free lock (the lock node is never created), for every lock type.
TEST(WaitCancellationBefore, StoppedContextMakesNoAttempt) {
  const auto path = zkt::unique_path("cancel-before");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path + "/m"};
  zklock::shared_mutex rw{s, path + "/rw"};
  std::stop_source stop;
  stop.request_stop();
  const zklock::wait_context stopped{.stop = stop.get_token()};
  EXPECT_FALSE(m.try_lock(stopped));
  EXPECT_FALSE(rw.try_lock(stopped));
  EXPECT_FALSE(rw.try_lock_shared(stopped));
  EXPECT_FALSE(m.owns_lock());
  EXPECT_FALSE(zkt::exists(path + "/m")) << "a request was sent for a wait cancelled before it began";
  EXPECT_FALSE(zkt::exists(path + "/rw"));
  ASSERT_TRUE(m.try_lock()) << "the object is usable afterwards";
  m.unlock();
}

}  // namespace
