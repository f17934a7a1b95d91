// SPDX-License-Identifier: Apache-2.0
// zklock::wait_until_free(): returns once a lock node has no contenders, gives up at its deadline
// or when stopped, and looks again on the next session when its session ends under the wait;
// session::await_next_generation(), which it rides on. The tests see the wait waiting through its
// on_busy callback, called with the watch armed, just before it blocks.
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "zk_test.hpp"

namespace {

using steady = std::chrono::steady_clock;

/// A wait_until_free on its own thread: what it was told each time it waited, and a stop that
/// ends it on every way out of a test.
class background_wait {
 public:
  background_wait(zklock::session& s, std::string path) {
    result_ = std::async(std::launch::async, [this, &s, path] {
      return zklock::wait_until_free(s, path, {steady::time_point::max(), stop_.get_token()}, [this](std::size_t n) {
        {
          std::lock_guard lk{mu_};
          busy_.push_back(n);
        }
        cv_.notify_all();
      });
    });
  }
  background_wait(const background_wait&) = delete;
  background_wait& operator=(const background_wait&) = delete;
  ~background_wait() {
    stop_.request_stop();
    if (result_.valid()) result_.wait();
  }
  /// Returns: whether the wait has blocked `k` times (its watch armed each time), within 30 s.
  bool waited(std::size_t k) {
    std::unique_lock lk{mu_};
    return cv_.wait_for(lk, std::chrono::seconds{30}, [&] { return busy_.size() >= k; });
  }
  /// Returns: the contender count it saw before its `i`-th block (0-based).
  std::size_t busy(std::size_t i) {
    std::lock_guard lk{mu_};
    return busy_.at(i);
  }
  /// Effects: asks the wait to stop.
  void stop() { stop_.request_stop(); }
  /// Returns: what wait_until_free returned (or throws what it threw); waits at most 30 s.
  bool result() {
    if (result_.wait_for(std::chrono::seconds{30}) != std::future_status::ready) {
      ADD_FAILURE() << "wait_until_free did not return";
      return false;
    }
    return result_.get();
  }

 private:
  std::stop_source stop_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::size_t> busy_;
  std::future<bool> result_;
};

TEST(WaitUntilFree, AMissingOrEmptyLockNodeIsFreeAtOnce) {
  const auto path = zkt::unique_path("free-missing");
  zklock::session s{zkt::options()};
  EXPECT_TRUE(zklock::wait_until_free(s, path, {steady::now()}));
  zkt::create_path(path);
  EXPECT_TRUE(zklock::wait_until_free(s, path, {steady::now()}));
}

TEST(WaitUntilFree, ReturnsWhenTheLastContenderLeavesWhateverItsKind) {
  const auto path = zkt::unique_path("free-kinds");
  zklock::session a{zkt::options()}, b{zkt::options()}, w{zkt::options()};
  zklock::shared_mutex rw{a, path};
  zklock::mutex m{b, path};  // another kind of contender on the same node: it waits for the reader
  rw.lock_shared();
  std::promise<void> let_go;
  std::thread writer{[&, done = let_go.get_future()] {  // a thread's hold: it locks and unlocks
    m.lock();
    done.wait();
    m.unlock();
  }};
  ASSERT_TRUE(zkt::await_children(path, 2));
  EXPECT_FALSE(zklock::wait_until_free(w, path, {steady::now() + std::chrono::milliseconds{50}}))
      << "a holder and a waiter: not free";
  background_wait bw{w, path};
  ASSERT_TRUE(bw.waited(1));
  EXPECT_EQ(bw.busy(0), 2u) << "on_busy is told how many contenders it waits for";
  rw.unlock_shared();  // the mutex holds next
  const bool woke = bw.waited(2);
  EXPECT_TRUE(woke) << "the reader's leaving wakes it; the mutex holder keeps it waiting";
  if (woke) EXPECT_EQ(bw.busy(1), 1u);
  let_go.set_value();
  writer.join();
  EXPECT_TRUE(bw.result());
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(WaitUntilFree, AStopRequestEndsTheWait) {
  const auto path = zkt::unique_path("free-stop");
  zklock::session a{zkt::options()}, w{zkt::options()};
  zklock::mutex m{a, path};
  m.lock();
  {
    background_wait bw{w, path};
    ASSERT_TRUE(bw.waited(1));
    bw.stop();
    EXPECT_FALSE(bw.result());
  }
  std::stop_source already;
  already.request_stop();
  EXPECT_FALSE(zklock::wait_until_free(w, path, {steady::time_point::max(), already.get_token()}));
  m.unlock();
}

TEST(WaitUntilFree, TheDeadlineEndsTheWait) {
  const auto path = zkt::unique_path("free-deadline");
  zklock::session a{zkt::options()}, w{zkt::options()};
  zklock::counting_semaphore sem{a, path, 1};
  sem.acquire();
  EXPECT_FALSE(zklock::wait_until_free(w, path, {steady::now() + std::chrono::milliseconds{100}}));
  sem.release();
}

TEST(WaitUntilFree, ASessionThatExpiresUnderTheWaitIsReplacedAndTheWaitGoesOn) {
  const auto path = zkt::unique_path("free-expiry");
  zklock::session a{zkt::options()}, w{zkt::options()};
  zklock::mutex m{a, path};
  m.lock();
  const std::uint64_t first = w.generation();
  background_wait bw{w, path};
  ASSERT_TRUE(bw.waited(1));
  ASSERT_TRUE(zkt::expire(w));
  ASSERT_TRUE(bw.waited(2)) << "the wait watches again on the next session";
  EXPECT_GT(w.generation(), first);
  m.unlock();
  EXPECT_TRUE(bw.result());
}

TEST(WaitUntilFree, WithoutReestablishmentAnExpiryThrowsSessionExpired) {
  const auto path = zkt::unique_path("free-no-reestablish");
  auto opts = zkt::options();
  opts.reestablish_after_expiry = false;
  zklock::session a{zkt::options()}, w{opts};
  zklock::mutex m{a, path};
  m.lock();
  background_wait bw{w, path};
  ASSERT_TRUE(bw.waited(1));
  ASSERT_TRUE(zkt::expire(w));
  try {
    bw.result();
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(zklock::errc::session_expired));
  }
  m.unlock();
}

TEST(WaitUntilFree, BadPathsAreRefused) {
  zklock::session s{zkt::options()};
  EXPECT_THROW(zklock::wait_until_free(s, "no-slash"), std::invalid_argument);
  EXPECT_THROW(zklock::wait_until_free(s, "/a//b"), std::invalid_argument);
  EXPECT_THROW(zklock::validate_lock_path("/a/"), std::invalid_argument);
  EXPECT_NO_THROW(zklock::validate_lock_path("/a/b"));
}

TEST(AwaitNextGeneration, ReturnsAtOnceWhenALaterGenerationIsConnectedAndThrowsWhenClosed) {
  zklock::session s{zkt::options()};
  const std::uint64_t first = s.generation();
  EXPECT_FALSE(s.await_next_generation(first, steady::now() + std::chrono::milliseconds{50}))
      << "the first generation is still alive: no later one comes";
  ASSERT_TRUE(zkt::expire(s));
  EXPECT_TRUE(s.await_next_generation(first, steady::now() + std::chrono::seconds{30}));
  EXPECT_TRUE(s.await_next_generation(first, steady::now())) << "already there";
  s.close();
  try {
    s.await_next_generation(s.generation(), steady::now() + std::chrono::seconds{1});
    ADD_FAILURE() << "no exception";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(zklock::errc::session_closed));
  }
}

}  // namespace
