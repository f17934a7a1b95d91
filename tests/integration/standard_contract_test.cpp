// SPDX-License-Identifier: Apache-2.0
// The standard's contracts, on every lock type and side ([thread.timedmutex.requirements] and
// [thread.sharedtimedmutex.requirements]): a wait of zero or less, or a deadline already past,
// makes one attempt (so `std::unique_lock lk{m, deadline - now}` in a retry loop tries once more
// instead of throwing); the same for a wait_context and for an asynchronous acquire. And one rule
// for releasing what is not held, the same for every type: nothing happens, nothing throws, and the
// error_code overloads report errc::not_held.
#include <chrono>
#include <functional>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <vector>
#include "zk_test.hpp"
#include "async_probe.hpp"
import zklock;

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;

/// The waits that must make exactly one attempt.
struct one_attempt_wait {
  const char* name;
  std::function<bool(zklock::mutex&)> mutex;
  std::function<bool(zklock::shared_mutex&)> write;
  std::function<bool(zklock::shared_mutex&)> read;
  std::function<bool(zklock::counting_semaphore&)> lease;
};

/// Returns: whether `lk` owns its lock, which it then leaves held (for the test to unlock).
template <class Lock>
bool owned(Lock&& lk) {
  const bool owns = lk.owns_lock();
  (void)lk.release();
  return owns;
}

std::vector<one_attempt_wait> one_attempt_waits() {
  return {
      {"-1 ms through std::unique_lock / std::shared_lock", [](auto& m) { return owned(std::unique_lock{m, -1ms}); },
       [](auto& m) { return owned(std::unique_lock{m, -1ms}); },
       [](auto& m) { return owned(std::shared_lock{m, -1ms}); },
       [](auto& s) { return s.try_acquire_for(-1ms); }},
      {"0", [](auto& m) { return m.try_lock_for(0s); }, [](auto& m) { return m.try_lock_for(0s); },
       [](auto& m) { return m.try_lock_shared_for(0s); }, [](auto& s) { return s.try_acquire_for(0s); }},
      {"milliseconds::min()", [](auto& m) { return m.try_lock_for(std::chrono::milliseconds::min()); },
       [](auto& m) { return m.try_lock_for(std::chrono::milliseconds::min()); },
       [](auto& m) { return m.try_lock_shared_for(std::chrono::milliseconds::min()); },
       [](auto& s) { return s.try_acquire_for(std::chrono::milliseconds::min()); }},
      {"-0.5 s as double", [](auto& m) { return m.try_lock_for(std::chrono::duration<double>{-0.5}); },
       [](auto& m) { return m.try_lock_for(std::chrono::duration<double>{-0.5}); },
       [](auto& m) { return m.try_lock_shared_for(std::chrono::duration<double>{-0.5}); },
       [](auto& s) { return s.try_acquire_for(std::chrono::duration<double>{-0.5}); }},
      {"a steady deadline 1 s ago", [](auto& m) { return m.try_lock_until(steady::now() - 1s); },
       [](auto& m) { return m.try_lock_until(steady::now() - 1s); },
       [](auto& m) { return m.try_lock_shared_until(steady::now() - 1s); },
       [](auto& s) { return s.try_acquire_until(steady::now() - 1s); }},
      {"a system_clock deadline 1 h ago", [](auto& m) { return m.try_lock_until(std::chrono::system_clock::now() - 1h); },
       [](auto& m) { return m.try_lock_until(std::chrono::system_clock::now() - 1h); },
       [](auto& m) { return m.try_lock_shared_until(std::chrono::system_clock::now() - 1h); },
       [](auto& s) { return s.try_acquire_until(std::chrono::system_clock::now() - 1h); }},
      {"a wait_context whose deadline passed",
       [](auto& m) { return m.try_lock(zklock::wait_context{steady::now() - 1ms}); },
       [](auto& m) { return m.try_lock(zklock::wait_context{steady::now() - 1ms}); },
       [](auto& m) { return m.try_lock_shared(zklock::wait_context{steady::now() - 1ms}); },
       [](auto& s) { return s.try_acquire(zklock::wait_context{steady::now() - 1ms}); }},
  };
}

// On a free lock the one attempt is granted; behind a holder of another session it fails at once
// (the holder never lets go meanwhile: a wait would hang the test) and leaves neither a node nor a
// watch behind.
TEST(StandardContract, AWaitOfZeroOrLessTriesOnceOnEveryLockType) {
  zklock::session s{zkt::options()}, hs{zkt::options()};
  for (const auto& w : one_attempt_waits()) {
    SCOPED_TRACE(w.name);
    const auto path = zkt::unique_path("std-once");
    {
      zklock::mutex m{s, path + "-m"};
      EXPECT_TRUE(w.mutex(m));
      m.unlock();
      zklock::shared_mutex rw{s, path + "-rw"};
      EXPECT_TRUE(w.write(rw));
      rw.unlock();
      EXPECT_TRUE(w.read(rw));
      rw.unlock_shared();
      zklock::counting_semaphore sem{s, path + "-sem", 1};
      EXPECT_TRUE(w.lease(sem));
      sem.release();
    }
    zklock::mutex hm{hs, path + "-m"};
    zklock::shared_mutex hrw{hs, path + "-rw"};
    zklock::counting_semaphore hsem{hs, path + "-sem", 1};
    hm.lock();
    hrw.lock();
    hsem.acquire();
    {
      zklock::mutex m{s, path + "-m"};
      EXPECT_FALSE(w.mutex(m));
      zklock::shared_mutex rw{s, path + "-rw"};
      EXPECT_FALSE(w.write(rw));
      EXPECT_FALSE(w.read(rw));
      zklock::counting_semaphore sem{s, path + "-sem", 1};
      EXPECT_FALSE(w.lease(sem));
    }
    s.flush();
    for (const auto* suffix : {"-m", "-rw", "-sem"}) {
      EXPECT_EQ(zkt::children(path + suffix).size(), 1u) << suffix << ": the failed attempt left its node";
      EXPECT_EQ(zkt::watches_below(path + suffix, s), std::set<std::string>{}) << suffix << ": a watch stayed";
    }
    hm.unlock();
    hrw.unlock();
    hsem.release();
  }
}

// An asynchronous acquire whose wait_context deadline has passed makes one attempt too: granted on
// a free lock, errc::lock_timeout behind a holder, nothing left behind.
TEST(StandardContract, AnAsynchronousAcquireWithAPastDeadlineTriesOnce) {
  zklock::session s{zkt::options()}, hs{zkt::options()};
  const auto path = zkt::unique_path("std-async-once");
  const zklock::wait_context past{steady::now() - 1s};
  {
    zkt::completion c;
    zklock::mutex m{s, path};
    m.async_lock(past, c.callback());
    ASSERT_TRUE(c.wait());
    EXPECT_EQ(c.code(), std::error_code{});
    EXPECT_TRUE(c.hold().owns_lock());
  }
  zklock::mutex holder{hs, path};
  holder.lock();
  zkt::completion r, w, l;
  zklock::mutex m{s, path};
  zklock::shared_mutex rw{s, path + "-rw"};
  zklock::counting_semaphore sem{s, path + "-sem", 1};
  zklock::shared_mutex hrw{hs, path + "-rw"};
  zklock::counting_semaphore hsem{hs, path + "-sem", 1};
  hrw.lock();
  hsem.acquire();
  m.async_lock(past, r.callback());
  rw.async_lock_shared(past, w.callback());
  sem.async_acquire(past, l.callback());
  for (auto* c : {&r, &w, &l}) {
    ASSERT_TRUE(c->wait());
    EXPECT_EQ(c->code(), std::error_code{zklock::errc::lock_timeout});
    EXPECT_FALSE(c->hold().owns_lock());
  }
  s.flush();
  EXPECT_EQ(zkt::children(path).size(), 1u);
  EXPECT_EQ(zkt::children(path + "-rw").size(), 1u);
  EXPECT_EQ(zkt::children(path + "-sem").size(), 1u);
  holder.unlock();
  hrw.unlock();
  hsem.release();
}

// Releasing what is not held: nothing happens, nothing throws; the error_code overloads say
// errc::not_held. Every type and side, before any hold and after the last one ended.
TEST(StandardContract, ReleasingWhatIsNotHeldDoesNothingAndIsReported) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("std-not-held");
  const std::error_code not_held{zklock::errc::not_held};
  zklock::mutex m{s, path + "-m"};
  zklock::recursive_mutex rm{s, path + "-rm"};
  zklock::owner_mutex om{s, path + "-om"};
  zklock::shared_mutex rw{s, path + "-rw"};
  zklock::counting_semaphore sem{s, path + "-sem", 2};
  zklock::lock_hold empty;
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "never held" : "after the last hold ended");
    std::error_code ec;
    m.unlock();
    m.unlock(ec);
    EXPECT_EQ(ec, not_held);
    rm.unlock();
    rm.unlock(ec);
    EXPECT_EQ(ec, not_held);
    om.unlock();
    om.unlock(ec);
    EXPECT_EQ(ec, not_held);
    rw.unlock();
    rw.unlock(ec);
    EXPECT_EQ(ec, not_held);
    rw.unlock_shared();
    rw.unlock_shared(ec);
    EXPECT_EQ(ec, not_held);
    sem.release();
    sem.release(ec);
    EXPECT_EQ(ec, not_held);
    empty.unlock();
    empty.unlock(ec);
    EXPECT_EQ(ec, not_held);
    // Control: a real hold is released with a cleared code, and then there is nothing left to release.
    m.lock();
    m.unlock(ec);
    EXPECT_EQ(ec, std::error_code{});
    rm.lock();
    rm.lock();
    rm.unlock(ec);
    EXPECT_EQ(ec, std::error_code{}) << "a re-entered hold: one count released";
    rm.unlock(ec);
    EXPECT_EQ(ec, std::error_code{});
    om.lock();
    om.unlock();
    rw.lock();
    rw.unlock(ec);
    EXPECT_EQ(ec, std::error_code{});
    rw.lock_shared();
    rw.unlock_shared(ec);
    EXPECT_EQ(ec, std::error_code{});
    sem.acquire();
    sem.release(ec);
    EXPECT_EQ(ec, std::error_code{});
    zkt::completion c;
    m.async_lock(c.callback());
    ASSERT_TRUE(c.wait());
    empty = std::move(c.hold());
    empty.unlock(ec);
    EXPECT_EQ(ec, std::error_code{});
  }
  for (const auto* suffix : {"-m", "-rm", "-om", "-rw", "-sem"}) EXPECT_TRUE(zkt::children(path + suffix).empty()) << suffix;
}

}  // namespace
