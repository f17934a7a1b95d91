// SPDX-License-Identifier: Apache-2.0
// zklock::contenders(): the queue of a lock node as the server has it, each contender judged by its
// own rule, with its token and identity — for a mutex, a read/write lock and a semaphore.
#include <unistd.h>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <future>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <thread>
#include <vector>
#include "expect_error.hpp"
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

TEST(Inspect, AHoldRecordIsReportedWithItsHolderUntilReleased) {
  const auto path = zkt::unique_path("inspect-record");
  zklock::session a{zkt::options()}, viewer{zkt::options()};
  zklock::mutex m{a, path};
  m.lock();
  zklock::hold_record r;
  r.granted = std::chrono::system_clock::time_point{std::chrono::milliseconds{1'700'000'000'123}};
  r.waited = std::chrono::milliseconds{42};
  r.ahead = 3;
  r.wakeups = 2;
  r.requests = 7;
  auto stored = zklock::record_hold(a, path, m.fencing_token(), r);
  EXPECT_EQ(stored.path(), path + "/zkstats-" + std::to_string(m.fencing_token()));
  auto q = zklock::contenders(viewer, path);
  ASSERT_EQ(q.size(), 1u) << "the record is no contender";
  ASSERT_TRUE(q[0].record.has_value());
  EXPECT_EQ(q[0].record->granted, r.granted);
  EXPECT_EQ(q[0].record->waited, r.waited);
  EXPECT_EQ(q[0].record->ahead, 3u);
  EXPECT_EQ(q[0].record->wakeups, 2u);
  EXPECT_EQ(q[0].record->requests, 7u);
  zklock::session other{zkt::options()};
  try {
    (void)zklock::record_hold(other, path, m.fencing_token(), r);
    ADD_FAILURE() << "a second record for one token";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(zklock::errc::node_exists));
  }
  zklock::stored_hold_record moved = std::move(stored);
  EXPECT_TRUE(stored.path().empty());
  moved.release();
  moved.release();  // idempotent
  a.flush();
  q = zklock::contenders(viewer, path);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_FALSE(q[0].record.has_value());
  {
    const auto scoped = zklock::record_hold(a, path, m.fencing_token(), r);
    EXPECT_TRUE(zkt::exists(scoped.path()));
  }
  a.flush();
  m.unlock();
  a.flush();
  EXPECT_TRUE(zkt::children(path).empty()) << "the destructor deleted the record";
}

TEST(Inspect, ARecordOfAWaiterOrOfNobodyIsNotReported) {
  const auto path = zkt::unique_path("inspect-record-stray");
  zklock::session a{zkt::options()}, viewer{zkt::options()};
  zklock::mutex m{a, path};
  m.lock();
  const auto stray = zklock::record_hold(a, path, m.fencing_token() + 1000, zklock::hold_record{});
  const auto q = zklock::contenders(viewer, path);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_FALSE(q[0].record.has_value()) << "a record for another token belongs to no holder here";
  m.unlock();
}

TEST(Inspect, RecordingAHoldRefusesBadInput) {
  const auto path = zkt::unique_path("inspect-record-bad");
  zklock::session a{zkt::options()};
  EXPECT_THROW((void)zklock::record_hold(a, "relative", 5, {}), std::invalid_argument);
  EXPECT_THROW((void)zklock::record_hold(a, path, 0, {}), std::invalid_argument);
  try {
    (void)zklock::record_hold(a, path, 5, {});
    ADD_FAILURE() << "no lock node: no record";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(zklock::errc::no_node));
  }
}

// remove_lock: a busy path is refused, naming its holder and its waiters, and stays; once free it
// goes, and a second call finds nothing.
TEST(RemoveLock, RefusesABusyPathNamingItsHolderAndRemovesItOnceFree) {
  const auto path = zkt::unique_path("rm-busy");
  zklock::session s1{zkt::options()}, s2{zkt::options()}, s3{zkt::options()};
  zklock::mutex m{s1, path}, other{s2, path};
  m.lock();
  auto waiting = std::async(std::launch::async, [&] {  // (a mutex is unlocked by the thread that holds it)
    const bool got = other.try_lock_for(std::chrono::seconds{30});
    if (got) other.unlock();
    return got;
  });
  ASSERT_TRUE(zkt::await_children(path, 2));
  const auto holder = zklock::contenders(s3, path).at(0).node;
  std::error_code code;
  std::string said;
  try {
    (void)zklock::remove_lock(s3, path);
  } catch (const std::system_error& e) {
    code = e.code();
    said = e.what();
  }
  EXPECT_EQ(code, std::error_code{zklock::errc::not_empty});
  EXPECT_NE(said.find("the lock " + path + " is in use: held by " + holder), std::string::npos) << said;
  EXPECT_NE(said.find("1 waiting"), std::string::npos) << said;
  EXPECT_EQ(zkt::children(path).size(), 2u) << "nothing removed";
  m.unlock();
  ASSERT_TRUE(waiting.get());
  ASSERT_TRUE(zkt::await_children(path, 0));  // (an unlock's delete is not waited for)
  // Removed, unless the server reaped the lock node first (a container; the test servers look
  // every second): either way it is gone.
  const auto removed = zklock::remove_lock(s3, path);
  if (removed) EXPECT_FALSE(removed->leases.has_value());
  EXPECT_FALSE(zkt::exists(path));
  EXPECT_FALSE(zklock::remove_lock(s3, path).has_value());
  m.lock();  // the next acquire makes the lock node again
  EXPECT_TRUE(m.still_owned());
  m.unlock();
}

// remove_lock refuses what is no lock: a node with other nodes below it, or with data that is no
// lease count; and bad paths. An empty node (as a lock node) is removed.
TEST(RemoveLock, RefusesANodeThatIsNoLock) {
  const auto base = zkt::unique_path("rm-other");
  zklock::session s{zkt::options()};
  s.create(base);
  s.create(base + "/app");
  s.create(base + "/app/config");
  s.create(base + "/note", "hello");
  const auto kind = std::error_code{zklock::errc::path_kind_mismatch};
  EXPECT_EQ(zkt::code_of([&] { (void)zklock::remove_lock(s, base + "/app"); }), kind);
  EXPECT_NE(zkt::message_of([&] { (void)zklock::remove_lock(s, base + "/app"); }).find("config"), std::string::npos);
  EXPECT_EQ(zkt::code_of([&] { (void)zklock::remove_lock(s, base + "/note"); }), kind);
  EXPECT_TRUE(zkt::exists(base + "/app/config"));
  EXPECT_TRUE(zkt::exists(base + "/note"));
  s.create(base + "/idle");  // an empty node, as a lock node the server has not reaped yet
  const auto removed = zklock::remove_lock(s, base + "/idle");
  ASSERT_TRUE(removed.has_value());
  EXPECT_FALSE(removed->leases.has_value());
  EXPECT_TRUE(removed->contenders.empty());
  EXPECT_FALSE(zkt::exists(base + "/idle"));
  EXPECT_THROW((void)zklock::remove_lock(s, "relative"), std::invalid_argument);
  EXPECT_THROW((void)zklock::remove_lock(s, "/zookeeper"), std::invalid_argument);
}

// remove_lock against acquires in a loop (a lock's and a semaphore's): every grant finds its node
// in place (nothing is removed from under a holder), the semaphore's node always stores its count,
// and the path is removed whenever it is idle in between.
TEST(RemoveLock, NeverRemovesFromUnderAnAcquire) {
  const auto base = zkt::unique_path("rm-race");
  zklock::session holder{zkt::options()}, remover{zkt::options()};
  zklock::mutex m{holder, base + "-lock"};
  zklock::counting_semaphore sem{holder, base + "-sem", 2};
  std::atomic<bool> done{false};
  std::atomic<int> removed{0}, refused{0};
  std::thread rm{[&] {
    while (!done.load()) {
      for (const auto& p : {base + "-lock", base + "-sem"}) {
        try {
          if (zklock::remove_lock(remover, p)) ++removed;
        } catch (const std::system_error& e) {
          EXPECT_EQ(e.code(), std::error_code{zklock::errc::not_empty}) << e.what();
          ++refused;
        }
      }
    }
  }};
  for (int i = 0; i < 100; ++i) {
    m.lock();
    EXPECT_TRUE(zkt::exists(m.fence().node));
    m.unlock();
    sem.acquire();
    const auto lease = sem.fence().node;
    EXPECT_TRUE(zkt::exists(lease));
    EXPECT_EQ(zkt::stat_node(base + "-sem").data, "leases=2");
    EXPECT_TRUE(sem.still_owned());
    sem.release();
  }
  done = true;
  rm.join();
  EXPECT_GT(removed.load() + refused.load(), 0);
  std::printf("remove_lock: %d removed, %d refused as in use\n", removed.load(), refused.load());
}

}  // namespace
