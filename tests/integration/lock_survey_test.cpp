// SPDX-License-Identifier: Apache-2.0
// zklock::inspect_lock(), locks_below() and watch_contenders(): a lock node told from a missing one,
// with its stored lease count and the nodes below it; every lock under a prefix, in order; the
// queue reported on each change, without polling, until the caller is done, stops, or the node goes.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zklock::contender_side;
using zklock::contender_state;

TEST(LockSurvey, InspectLockTellsAMissingNodeFromAFreeOne) {
  const auto path = zkt::unique_path("survey-one");
  zklock::session s{zkt::options()}, viewer{zkt::options()};
  EXPECT_FALSE(zklock::inspect_lock(viewer, path).has_value()) << "missing";
  zkt::create_path(path + "/below");
  auto free = zklock::inspect_lock(viewer, path);
  ASSERT_TRUE(free.has_value()) << "an empty node is there";
  EXPECT_EQ(free->path, path);
  EXPECT_TRUE(free->contenders.empty());
  EXPECT_FALSE(free->leases.has_value());
  EXPECT_EQ(free->other_children, 1u) << "the node below it";

  zklock::mutex m{s, path};
  m.lock();
  const auto held = zklock::inspect_lock(viewer, path);
  ASSERT_TRUE(held.has_value());
  ASSERT_EQ(held->contenders.size(), 1u);
  EXPECT_EQ(held->contenders[0].token, m.fencing_token());
  EXPECT_EQ(held->contenders[0].state, contender_state::holder);
  EXPECT_EQ(held->other_children, 1u) << "contenders and hold records are not counted";
  m.unlock();

  const auto sem_path = path + "-sem";
  zklock::counting_semaphore sem{s, sem_path, 3};
  sem.acquire();
  const auto leased = zklock::inspect_lock(viewer, sem_path);
  ASSERT_TRUE(leased.has_value());
  EXPECT_EQ(leased->leases, 3u);
  ASSERT_EQ(leased->contenders.size(), 1u);
  EXPECT_EQ(leased->contenders[0].side, contender_side::lease);
  EXPECT_EQ(leased->contenders[0].state, contender_state::holder);
  sem.release();
  // A semaphore opened and not used yet (a used one goes once idle: a container) is listed free.
  zklock::counting_semaphore fresh{s, sem_path + "-fresh", 3};
  const auto idle = zklock::inspect_lock(viewer, sem_path + "-fresh");
  ASSERT_TRUE(idle.has_value()) << "a semaphore node is made when it is opened";
  EXPECT_EQ(idle->leases, 3u);
  EXPECT_TRUE(idle->contenders.empty());
  EXPECT_THROW((void)zklock::inspect_lock(viewer, "relative"), std::invalid_argument);
}

TEST(LockSurvey, LocksBelowListsEveryLockAndSemaphoreInOrder) {
  const auto prefix = zkt::unique_path("survey-tree");
  zklock::session s{zkt::options()}, t{zkt::options()}, viewer{zkt::options()};
  EXPECT_FALSE(zklock::locks_below(viewer, prefix).has_value()) << "missing";
  zklock::mutex b{s, prefix + "/x/b"}, waiter{t, prefix + "/x/b"};
  zklock::shared_mutex a{s, prefix + "/a"};
  zklock::counting_semaphore idle{s, prefix + "/x/sem", 2};  // its node is created with the object
  zkt::create_path(prefix + "/x/empty/deeper");
  b.lock();
  a.lock_shared();
  std::jthread queued{[&] {
    waiter.lock();
    waiter.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(prefix + "/x/b", 2));

  const auto locks = zklock::locks_below(viewer, prefix);
  ASSERT_TRUE(locks.has_value());
  std::vector<std::string> paths;
  for (const auto& l : *locks) paths.push_back(l.path);
  EXPECT_EQ(paths, (std::vector<std::string>{prefix + "/a", prefix + "/x/b", prefix + "/x/sem"}));
  ASSERT_EQ(locks->size(), 3u);
  EXPECT_EQ((*locks)[0].contenders.at(0).side, contender_side::read);
  ASSERT_EQ((*locks)[1].contenders.size(), 2u);
  EXPECT_EQ((*locks)[1].contenders[0].state, contender_state::holder);
  EXPECT_EQ((*locks)[1].contenders[1].state, contender_state::waiter);
  EXPECT_EQ((*locks)[1].contenders[1].session_id, t.id());
  EXPECT_EQ((*locks)[2].leases, 2u) << "a free semaphore is listed";
  EXPECT_TRUE((*locks)[2].contenders.empty());

  const auto one = zklock::locks_below(viewer, prefix + "/x/b");
  ASSERT_TRUE(one.has_value());
  ASSERT_EQ(one->size(), 1u) << "the prefix itself counts";
  EXPECT_TRUE(zklock::locks_below(viewer, prefix + "/x/empty")->empty());
  b.unlock();
  queued.join();
  a.unlock_shared();
}

// The queue is reported at once and on each change (a children watch: the waiter's arrival wakes
// it), until the callback is done; a stop request ends the watch; a missing node ends it at once.
TEST(LockSurvey, WatchContendersReportsEachChangeUntilDone) {
  const auto path = zkt::unique_path("survey-watch");
  zklock::session s{zkt::options()}, t{zkt::options()}, viewer{zkt::options()};
  zklock::mutex holder{s, path}, waiter{t, path};
  holder.lock();

  std::mutex mu;
  std::vector<std::size_t> seen;  // queue lengths reported
  std::atomic<bool> done{false};
  std::jthread watching{[&] {
    const bool finished = zklock::watch_contenders(viewer, path, {}, [&](const std::vector<zklock::contender_info>& q) {
      std::lock_guard lk{mu};
      seen.push_back(q.size());
      return q.size() < 2;  // done once the waiter has queued
    });
    EXPECT_TRUE(finished);
    done = true;
  }};
  std::jthread queued{[&] {
    waiter.lock();
    waiter.unlock();
  }};
  watching.join();
  EXPECT_TRUE(done);
  {
    std::lock_guard lk{mu};
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.back(), 2u);
    for (const auto n : seen) EXPECT_GE(n, 1u) << "the holder is there all along";
  }
  viewer.flush();  // the watch's removal is sent before the flush, so served before it
  EXPECT_TRUE(zkt::watches_below(path, viewer).empty()) << "no watch left behind";

  // A stop request ends a watch that is waiting for a change.
  std::stop_source stop;
  std::atomic<int> calls{0};
  std::jthread stopped{[&] {
    EXPECT_FALSE(zklock::watch_contenders(viewer, path, {.stop = stop.get_token()}, [&](const auto&) {
      ++calls;
      return true;
    }));
  }};
  while (calls.load() == 0) std::this_thread::yield();  // the first report comes before the wait
  stop.request_stop();
  stopped.join();
  EXPECT_GE(calls.load(), 1);

  // A deadline ends it too; a missing node at once, without a report.
  EXPECT_FALSE(zklock::watch_contenders(viewer, path, {.deadline = std::chrono::steady_clock::now() + 100ms},
                                        [](const auto&) { return true; }));
  bool called = false;
  EXPECT_FALSE(zklock::watch_contenders(viewer, path + "-missing", {}, [&](const auto&) {
    called = true;
    return true;
  }));
  EXPECT_FALSE(called);
  holder.unlock();
  queued.join();
}

}  // namespace
