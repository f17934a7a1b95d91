// SPDX-License-Identifier: Apache-2.0
// zklock::contenders(): the queue of a lock node as the server has it, each contender judged by its
// own rule, with its token and identity — for a mutex, a read/write lock and a semaphore.
#include <unistd.h>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using zklock::contender_side;
using zklock::contender_state;

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

TEST(Inspect, MutexHolderThenWaiterWithTokensAndIdentity) {
  const auto path = zkt::unique_path("inspect-mutex");
  zklock::session a{zkt::options()}, b{zkt::options()}, viewer{zkt::options()};
  EXPECT_TRUE(zklock::contenders(viewer, path).empty()) << "a missing lock node has no contenders";
  zklock::mutex holder{a, path}, waiter{b, path};
  const auto before = std::chrono::system_clock::now() - std::chrono::seconds{1};
  holder.lock();
  std::jthread t{[&] {
    waiter.lock();
    waiter.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(path, 2));
  const auto q = zklock::contenders(viewer, path);
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].position, 0u);
  EXPECT_EQ(q[0].state, contender_state::holder);
  EXPECT_EQ(q[0].side, contender_side::mutex);
  EXPECT_EQ(q[0].token, holder.fencing_token());
  EXPECT_EQ(q[0].session_id, a.id());
  EXPECT_EQ(q[0].who.host, host_name());
  EXPECT_EQ(q[0].who.pid, static_cast<long long>(::getpid()));
  ASSERT_TRUE(q[0].who.since.has_value());
  EXPECT_GE(*q[0].who.since, before);
  EXPECT_EQ(q[1].position, 1u);
  EXPECT_EQ(q[1].state, contender_state::waiter);
  EXPECT_EQ(q[1].session_id, b.id());
  EXPECT_GT(q[1].token, q[0].token);
  EXPECT_EQ(zkt::children(path).size(), 2u) << "inspecting changes nothing";
  holder.unlock();
  t.join();
  EXPECT_TRUE(zklock::contenders(viewer, path).empty());
  EXPECT_THROW(zklock::contenders(viewer, "relative"), std::invalid_argument);
}

TEST(Inspect, ReadersShareWritersWaitAndLeasesCount) {
  const auto path = zkt::unique_path("inspect-rw");
  zklock::session s1{zkt::options()}, s2{zkt::options()}, s3{zkt::options()}, viewer{zkt::options()};
  zklock::shared_mutex r1{s1, path}, r2{s2, path}, w{s3, path};
  r1.lock_shared();
  r2.lock_shared();
  std::jthread t{[&] {
    w.lock();
    w.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(path, 3));
  auto q = zklock::contenders(viewer, path);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].side, contender_side::read);
  EXPECT_EQ(q[0].state, contender_state::holder);
  EXPECT_EQ(q[1].state, contender_state::holder) << "readers hold together";
  EXPECT_EQ(q[2].side, contender_side::write);
  EXPECT_EQ(q[2].state, contender_state::waiter);
  r1.unlock_shared();
  r2.unlock_shared();
  t.join();

  const auto sem_path = path + "-sem";
  zklock::counting_semaphore sem{s1, sem_path, 2};
  sem.acquire();
  sem.acquire();
  zklock::counting_semaphore other{s2, sem_path, 2};
  std::jthread u{[&] {
    other.acquire();
    other.release();
  }};
  ASSERT_TRUE(zkt::await_children(sem_path, 3));
  q = zklock::contenders(viewer, sem_path);
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].side, contender_side::lease);
  EXPECT_EQ(q[0].state, contender_state::holder);
  EXPECT_EQ(q[1].state, contender_state::holder);
  EXPECT_EQ(q[2].state, contender_state::waiter) << "two leases: the third waits";
  sem.release();
  sem.release();
  u.join();
}

}  // namespace
