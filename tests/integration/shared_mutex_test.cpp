// SPDX-License-Identifier: Apache-2.0
// The read/write lock: readers overlap, writers exclude everyone, the standard wrappers work,
// downgrade, and a reader asking for the write side fails instead of hanging — for every watch
// strategy x wake-up combination.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using zkt::combos;
using zkt::await_children;

template <class C>
class SharedMutex : public ::testing::Test {};
TYPED_TEST_SUITE(SharedMutex, combos);

/// Returns: how many children of `path` contain `marker`.
std::size_t count_marked(const std::string& path, const std::string& marker) {
  const auto kids = zkt::children(path);
  return static_cast<std::size_t>(std::count_if(
      kids.begin(), kids.end(), [&](const std::string& k) { return k.find(marker) != std::string::npos; }));
}

void raise_max(std::atomic<int>& max, int now) {
  int seen = max.load();
  while (now > seen && !max.compare_exchange_weak(seen, now)) {}
}

// Four sessions hold the read side at the same time; every node is a __READ__ node.
TYPED_TEST(SharedMutex, ReadersOverlap) {
  const auto path = zkt::unique_path("rw-readers");
  auto sessions = zkt::open_sessions(4);
  std::vector<std::unique_ptr<typename TypeParam::shared_mutex>> readers;
  for (auto& s : sessions) readers.push_back(std::make_unique<typename TypeParam::shared_mutex>(*s, path));
  readers[0]->lock_shared();
  for (std::size_t i = 1; i < readers.size(); ++i)
    EXPECT_TRUE(readers[i]->try_lock_shared_for(30s)) << "reader " << i << " while " << i << " others read";
  EXPECT_EQ(zkt::children(path).size(), 4u);
  EXPECT_EQ(count_marked(path, "__READ__"), 4u);
  EXPECT_EQ(count_marked(path, "__WRIT__"), 0u);
  for (auto& r : readers) {
    EXPECT_TRUE(r->owns_shared());
    EXPECT_FALSE(r->owns_lock());
    r->unlock_shared();
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

// A reader keeps a writer out and a writer keeps readers out; failed attempts leave no node.
TYPED_TEST(SharedMutex, WriterAndReadersExcludeEachOther) {
  const auto path = zkt::unique_path("rw-exclusion");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  typename TypeParam::shared_mutex a{s1, path};
  typename TypeParam::shared_mutex b{s2, path};

  a.lock_shared();
  EXPECT_FALSE(b.try_lock_for(200ms));
  EXPECT_FALSE(b.try_lock());
  EXPECT_FALSE(b.owns_lock());
  EXPECT_EQ(zkt::children(path).size(), 1u);  // only the reader's node
  EXPECT_EQ(count_marked(path, "__READ__"), 1u);
  a.unlock_shared();

  ASSERT_TRUE(b.try_lock_for(30s));
  EXPECT_EQ(zkt::children(path).size(), 1u);
  EXPECT_EQ(count_marked(path, "__WRIT__"), 1u);
  EXPECT_FALSE(a.try_lock_shared_for(200ms));
  EXPECT_FALSE(a.try_lock_shared());
  EXPECT_FALSE(a.try_lock_for(200ms));
  EXPECT_FALSE(a.owns_shared());
  EXPECT_EQ(zkt::children(path).size(), 1u);  // only the writer's node
  b.unlock();

  EXPECT_TRUE(a.try_lock_shared_for(30s));
  a.unlock_shared();
  EXPECT_TRUE(zkt::children(path).empty());
}

// std::unique_lock takes the write side, std::shared_lock the read side (also timed and try).
TYPED_TEST(SharedMutex, StandardWrappers) {
  const auto path = zkt::unique_path("rw-wrappers");
  zklock::session s1{zkt::options()}, s2{zkt::options()};
  typename TypeParam::shared_mutex a{s1, path};
  typename TypeParam::shared_mutex b{s2, path};
  {
    std::unique_lock w{a};
    EXPECT_TRUE(w.owns_lock());
    EXPECT_TRUE(a.owns_lock());
    EXPECT_EQ(count_marked(path, "__WRIT__"), 1u);
    std::shared_lock r{b, std::try_to_lock};
    EXPECT_FALSE(r.owns_lock());
    std::unique_lock w2{b, 100ms};
    EXPECT_FALSE(w2.owns_lock());
  }
  EXPECT_FALSE(a.owns_lock());
  EXPECT_TRUE(zkt::children(path).empty());
  {
    std::shared_lock r1{a};
    std::shared_lock r2{b, 30s};
    EXPECT_TRUE(r1.owns_lock());
    EXPECT_TRUE(r2.owns_lock());
    EXPECT_EQ(count_marked(path, "__READ__"), 2u);
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

// Downgrade: the write holder takes the read side at once although another session's writer is
// queued behind it, gives up the write side, and that writer still waits for unlock_shared().
TYPED_TEST(SharedMutex, DowngradeKeepsQueuedWriterWaiting) {
  const auto path = zkt::unique_path("rw-downgrade");
  zklock::session sa{zkt::options()}, sb{zkt::options()};
  std::mutex mu;
  std::condition_variable cv;
  bool writer_in = false;
  std::atomic<bool> read_released{false};
  std::atomic<bool> writer_early{false};
  std::jthread writer;  // declared before `a`: on an early return `a` releases first, then the join
  typename TypeParam::shared_mutex a{sa, path};
  a.lock();
  writer = std::jthread([&] {
    typename TypeParam::shared_mutex b{sb, path};
    b.lock();
    writer_early = !read_released.load();
    {
      std::lock_guard lk{mu};
      writer_in = true;
    }
    cv.notify_all();
    b.unlock();
  });
  ASSERT_TRUE(await_children(path, 2));  // the writer is queued

  a.lock_shared();  // no wait: the caller holds the write side
  EXPECT_TRUE(a.owns_shared());
  a.unlock();
  EXPECT_FALSE(a.owns_lock());
  EXPECT_TRUE(a.owns_shared());
  // The writer can only get in once our node is gone; unlock() has returned, so the server has
  // served its delete if it sent one: our node must still be there, shared by the read hold.
  EXPECT_EQ(zkt::children(path).size(), 2u) << "the downgrade's node went with the write side";
  {
    std::lock_guard lk{mu};
    EXPECT_FALSE(writer_in) << "the queued writer got in past a reader";
  }
  read_released = true;
  a.unlock_shared();
  {
    std::unique_lock lk{mu};
    EXPECT_TRUE(cv.wait_for(lk, 30s, [&] { return writer_in; }));
  }
  writer.join();
  EXPECT_FALSE(writer_early.load());
  EXPECT_TRUE(await_children(path, 0));
}

// A reader asking for the write side gets resource_deadlock_would_occur instead of hanging, and
// keeps its read hold; nothing is added on the server.
TYPED_TEST(SharedMutex, UpgradeIsRefused) {
  const auto path = zkt::unique_path("rw-upgrade");
  zklock::session s{zkt::options()};
  typename TypeParam::shared_mutex m{s, path};
  m.lock_shared();
  for (int how = 0; how < 3; ++how) {
    try {
      if (how == 0) m.lock();
      if (how == 1) (void)m.try_lock();
      if (how == 2) (void)m.try_lock_for(30s);
      ADD_FAILURE() << "upgrade attempt " << how << " did not throw";
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), std::errc::resource_deadlock_would_occur) << e.what();
    }
  }
  EXPECT_TRUE(m.owns_shared());
  EXPECT_FALSE(m.owns_lock());
  EXPECT_EQ(zkt::children(path).size(), 1u);
  m.unlock_shared();
  EXPECT_TRUE(zkt::children(path).empty());
}

// 8 threads (own sessions and objects), 90 % reads: a writer never overlaps anyone, and readers
// do overlap.
TYPED_TEST(SharedMutex, MixedLoad) {
  const auto path = zkt::unique_path("rw-mixed");
  constexpr int threads = 8, rounds = 10;
  auto sessions = zkt::open_sessions(threads);
  std::atomic<int> readers{0}, writers{0}, max_readers{0}, violations{0}, writes{0};
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        typename TypeParam::shared_mutex m{*sessions[static_cast<std::size_t>(t)], path};
        for (int i = 0; i < rounds; ++i) {
          if ((t * rounds + i) % 10 == 0) {  // exactly one op in ten writes
            std::unique_lock g{m};
            if (++writers != 1 || readers.load() != 0) ++violations;
            ++writes;
            std::this_thread::yield();
            if (readers.load() != 0) ++violations;
            --writers;
          } else {
            std::shared_lock g{m};
            const int now = ++readers;
            if (writers.load() != 0) ++violations;
            raise_max(max_readers, now);
            // The work under the read lock: until another reader joined, or 50 ms at most.
            const auto until = std::chrono::steady_clock::now() + 50ms;
            while (max_readers.load() < 2 && std::chrono::steady_clock::now() < until)
              std::this_thread::sleep_for(100us);
            if (writers.load() != 0) ++violations;
            --readers;
          }
        }
      });
    }
  }
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(writes.load(), threads * rounds / 10);
  EXPECT_GT(max_readers.load(), 1);
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
