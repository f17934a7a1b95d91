// SPDX-License-Identifier: Apache-2.0
// One path, one meaning (issue 24): a mutex, the read side and the write side on one path exclude
// each other as a read/write lock's sides do (a mutex contender is a writer), whatever mix of
// zklock's and Curator's node names is queued; a semaphore on a lock's path, or a lock on a
// semaphore's path, fails with errc::path_kind_mismatch and leaves nothing behind — for every
// watch strategy x wake-up combination.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zkt::combos;

template <class C>
class PathKinds : public ::testing::Test {};
TYPED_TEST_SUITE(PathKinds, combos);

enum class kind { mutex, read, write };
constexpr kind all_kinds[] = {kind::mutex, kind::read, kind::write};
const char* name(kind k) { return k == kind::mutex ? "mutex" : k == kind::read ? "read side" : "write side"; }

/// One contender of kind `k` on `path`: a mutex, or one side of a read/write lock.
template <class C>
class kind_contender {
 public:
  kind_contender(zklock::session& s, const std::string& path, kind k) : k_(k) {
    if (k == kind::mutex)
      m_ = std::make_unique<typename C::mutex>(s, path);
    else
      rw_ = std::make_unique<typename C::shared_mutex>(s, path);
  }
  void lock() { k_ == kind::mutex ? m_->lock() : k_ == kind::read ? rw_->lock_shared() : rw_->lock(); }
  bool try_lock() {
    return k_ == kind::mutex ? m_->try_lock_for(0ms) : k_ == kind::read ? rw_->try_lock_shared_for(0ms) : rw_->try_lock_for(0ms);
  }
  void unlock() { k_ == kind::mutex ? m_->unlock() : k_ == kind::read ? rw_->unlock_shared() : rw_->unlock(); }

 private:
  kind k_;
  std::unique_ptr<typename C::mutex> m_;
  std::unique_ptr<typename C::shared_mutex> rw_;
};

/// Returns: the code of the std::system_error that `f` throws (a cleared code if it throws none).
std::error_code code_of(const std::function<void()>& f, std::string* what = nullptr) {
  try {
    f();
  } catch (const std::system_error& e) {
    if (what) *what = e.what();
    return e.code();
  }
  return {};
}

const std::error_code mismatch = zklock::errc::path_kind_mismatch;

// Each pair of kinds, the first holding: the second is granted only if both are readers. (On the
// rule before issue 24, a mutex and either side of a read/write lock never saw each other.)
TYPED_TEST(PathKinds, EveryPairOfKindsExcludesAsAReadWriteLock) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  for (kind first : all_kinds)
    for (kind second : all_kinds) {
      const auto path = zkt::unique_path("kinds-pair");
      kind_contender<TypeParam> holder{a, path, first}, other{b, path, second};
      holder.lock();
      const bool shared = first == kind::read && second == kind::read;
      const bool got = other.try_lock();
      EXPECT_EQ(got, shared) << name(second) << " while a " << name(first) << " holds";
      if (got) other.unlock();
      holder.unlock();
      EXPECT_TRUE(other.try_lock()) << name(second) << " once the " << name(first) << " is gone";
      other.unlock();
      EXPECT_TRUE(zkt::children(path).empty()) << name(first) << ", " << name(second);
    }
}

// A waiter of each kind behind a holder of each other kind is granted once the holder leaves:
// its watch is on a node of the other kind.
TYPED_TEST(PathKinds, AWaiterBehindAnotherKindIsGrantedWhenItLeaves) {
  zklock::session a{zkt::options()}, b{zkt::options()};
  for (kind first : all_kinds)
    for (kind second : all_kinds) {
      if (first == kind::read && second == kind::read) continue;  // never waits
      const auto path = zkt::unique_path("kinds-wait");
      kind_contender<TypeParam> holder{a, path, first}, waiter{b, path, second};
      holder.lock();
      std::atomic<bool> granted{false};
      std::thread t{[&] {
        waiter.lock();
        granted = true;
      }};
      ASSERT_TRUE(zkt::await_children(path, 2));  // queued behind the holder
      EXPECT_FALSE(granted.load()) << name(second) << " granted while a " << name(first) << " holds";
      holder.unlock();
      t.join();
      EXPECT_TRUE(granted.load());
      waiter.unlock();
    }
}

// Threads of every kind on three sessions, one path: a writer (mutex or write side) is always
// alone, readers only ever share with readers.
TYPED_TEST(PathKinds, MixedContendersNeverOverlap) {
  const auto path = zkt::unique_path("kinds-mixed");
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int i = 0; i < 3; ++i) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  std::atomic<int> writers{0}, readers{0}, violations{0}, reads_together{0};
  std::vector<std::thread> threads;
  int i = 0;
  for (kind k : {kind::mutex, kind::write, kind::read, kind::read, kind::mutex, kind::read}) {
    zklock::session* s = sessions[static_cast<std::size_t>(i++ % 3)].get();
    threads.emplace_back([&, s, k] {
      kind_contender<TypeParam> c{*s, path, k};
      for (int n = 0; n < 12; ++n) {
        c.lock();
        if (k == kind::read) {
          const int r = ++readers;
          if (writers.load() != 0) ++violations;
          if (r > 1) ++reads_together;
          std::this_thread::yield();
          --readers;
        } else {
          if (++writers != 1 || readers.load() != 0) ++violations;
          std::this_thread::yield();
          --writers;
        }
        c.unlock();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_TRUE(zkt::children(path).empty());
}

// Curator's node names (a stranger's raw nodes here) count as zklock's own do: its writer keeps a
// mutex waiting, its mutex node keeps a reader waiting.
TYPED_TEST(PathKinds, CuratorsNodesOfEachKindCount) {
  zklock::session s{zkt::options()};
  zkt::raw_client curator;
  struct row {
    const char* node;  // Curator's node name prefix
    kind ours;         // the zklock contender it keeps waiting
  };
  for (const row r : {row{"_c_0b8e1b6a-5a3c-4c33-9a1e-6b0f2f3d7c11-__WRIT__", kind::mutex},
                      row{"_c_6f1d2e3c-8b4a-4f5e-9c7d-1a2b3c4d5e6f-lock-", kind::read}}) {
    const auto path = zkt::unique_path("kinds-curator");
    zkt::create_path(path);
    const auto node = curator.create_ephemeral_sequential(path + "/" + r.node);
    ASSERT_TRUE(node);
    kind_contender<TypeParam> c{s, path, r.ours};
    EXPECT_FALSE(c.try_lock()) << "a " << name(r.ours) << " beside Curator's " << r.node;
    EXPECT_EQ(curator.remove(*node), 0);
    EXPECT_TRUE(c.try_lock());
    c.unlock();
  }
}

// A semaphore opened on a lock's path (held or not) fails saying what the path is.
TYPED_TEST(PathKinds, ASemaphoreOnALockPathFailsSayingSo) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("kinds-sem-on-lock");
  typename TypeParam::mutex m{s, path};
  m.lock();
  std::string what;
  EXPECT_EQ(code_of([&] { typename TypeParam::semaphore sem(s, path, 2); }, &what), mismatch);
  EXPECT_NE(what.find("lock's path (1 contender queued)"), std::string::npos) << what;
  m.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
  // A node that stores no lease count is no semaphore either (an empty lock node, whose container
  // the server may reap any moment, or as here a plain node).
  const auto plain = zkt::unique_path("kinds-sem-on-plain");
  zkt::create_path(plain);
  EXPECT_EQ(code_of([&] { typename TypeParam::semaphore sem(s, plain, 2); }, &what), mismatch);
  EXPECT_NE(what.find("stores no lease count"), std::string::npos) << what;
  EXPECT_TRUE(zkt::children(plain).empty());
}

// Every lock kind on a semaphore's path fails saying so, whether leases are held or not, and leaves
// no node behind; the semaphore is untouched.
TYPED_TEST(PathKinds, ALockOnASemaphorePathFailsSayingSoAndLeavesNothing) {
  zklock::session s{zkt::options()}, other{zkt::options()};
  const auto path = zkt::unique_path("kinds-lock-on-sem");
  typename TypeParam::semaphore sem(s, path, 2);
  // A child that is no contender keeps the semaphore's node (a container) from being reaped between
  // the kinds while no lease is held: the next kind would make a lock's node there.
  zkt::create_path(path + "/kept");
  for (bool lease_held : {false, true}) {
    if (lease_held) sem.acquire();
    for (kind k : all_kinds) {
      kind_contender<TypeParam> c{other, path, k};
      std::string what;
      EXPECT_EQ(code_of([&] { (void)c.try_lock(); }, &what), mismatch) << name(k) << ", lease held " << lease_held;
      EXPECT_NE(what.find("semaphore's path"), std::string::npos) << what;
      EXPECT_EQ(zkt::children(path).size(), lease_held ? 2u : 1u) << name(k);
    }
  }
  sem.release();
  EXPECT_TRUE(sem.try_acquire());  // the semaphore still works
  sem.release();
}

// A semaphore that finds lock contenders queued under its node fails saying so, leaving nothing.
// (A lock queued before the semaphore node stored its count; here a stranger's Curator-named node.)
TYPED_TEST(PathKinds, ASemaphoreThatFindsLockContendersFailsSayingSo) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("kinds-sem-finds-lock");
  typename TypeParam::semaphore sem(s, path, 2);
  zkt::raw_client curator;
  ASSERT_TRUE(curator.create_ephemeral_sequential(path + "/_c_2c9a6a41-7e0b-4d7e-a8f3-5d1c0e9b8a77-lock-"));
  std::string what;
  EXPECT_EQ(code_of([&] { (void)sem.try_acquire(); }, &what), mismatch);
  EXPECT_NE(what.find("lock's path"), std::string::npos) << what;
  EXPECT_EQ(zkt::children(path).size(), 1u);  // the stranger's node only
  EXPECT_EQ(sem.held_leases(), 0);
}

// The asynchronous acquire reports the mismatch through its callback, leaving nothing.
TYPED_TEST(PathKinds, AnAsynchronousLockOnASemaphorePathReportsTheMismatch) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("kinds-async");
  typename TypeParam::semaphore sem(s, path, 1);
  typename TypeParam::mutex m{s, path};
  std::promise<std::error_code> done;
  m.async_lock([&](std::error_code ec, zklock::lock_hold) { done.set_value(ec); });
  EXPECT_EQ(done.get_future().get(), mismatch);
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
