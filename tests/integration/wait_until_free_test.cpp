// SPDX-License-Identifier: Apache-2.0
// zklock::wait_until_free(): returns once a lock node has no contenders, gives up at its deadline
// or when stopped, and looks again on the next session when its session ends under the wait;
// session::await_next_generation(), which it rides on. (The server's wchp/wchc show data watches
// only, so these tests see the wait's children watch through the server-wide zk_watch_count.)
#include <chrono>
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

/// Polls until the server counts more watches than `before`. Returns: whether within 30 s.
bool await_more_watches(long long before) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  while (zkt::server_watch_count() <= before)
    if (std::chrono::steady_clock::now() > limit) return false;
    else std::this_thread::yield();
  return true;
}

using steady = std::chrono::steady_clock;

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
  zklock::mutex m{b, path};  // another kind of contender on the same node
  rw.lock_shared();
  m.lock();
  EXPECT_FALSE(zklock::wait_until_free(w, path, {steady::now() + std::chrono::milliseconds{50}}))
      << "two holders: not free";
  const long long before = zkt::server_watch_count();
  std::vector<std::size_t> busy;  // read after get(): the future orders it
  auto waiting = std::async(std::launch::async, [&] {
    return zklock::wait_until_free(w, path, {}, [&](std::size_t n) { busy.push_back(n); });
  });
  ASSERT_TRUE(await_more_watches(before));
  rw.unlock_shared();
  EXPECT_TRUE(zkt::await_children(path, 1));
  m.unlock();
  EXPECT_TRUE(waiting.get());
  EXPECT_TRUE(zkt::children(path).empty());
  ASSERT_FALSE(busy.empty()) << "it waited at least once";
  for (const std::size_t n : busy) EXPECT_TRUE(n == 1 || n == 2) << "on_busy is told how many contenders it waits for: " << n;
}

TEST(WaitUntilFree, AStopRequestEndsTheWait) {
  const auto path = zkt::unique_path("free-stop");
  zklock::session a{zkt::options()}, w{zkt::options()};
  zklock::mutex m{a, path};
  m.lock();
  std::stop_source stop;
  const long long before = zkt::server_watch_count();
  auto waiting = std::async(std::launch::async, [&] { return zklock::wait_until_free(w, path, {steady::time_point::max(), stop.get_token()}); });
  ASSERT_TRUE(await_more_watches(before));
  stop.request_stop();
  EXPECT_FALSE(waiting.get());
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
  long long before = zkt::server_watch_count();
  auto waiting = std::async(std::launch::async, [&] { return zklock::wait_until_free(w, path); });
  ASSERT_TRUE(await_more_watches(before));
  ASSERT_TRUE(zkt::expire(w));
  before = zkt::server_watch_count();  // the expired session's watch is gone with it
  ASSERT_TRUE(w.await_next_generation(first, steady::now() + std::chrono::seconds{30}));
  ASSERT_TRUE(await_more_watches(before)) << "the wait watches again on the next session";
  m.unlock();
  EXPECT_TRUE(waiting.get());
  EXPECT_GT(w.generation(), first);
}

TEST(WaitUntilFree, WithoutReestablishmentAnExpiryThrowsSessionExpired) {
  const auto path = zkt::unique_path("free-no-reestablish");
  auto opts = zkt::options();
  opts.reestablish_after_expiry = false;
  zklock::session a{zkt::options()}, w{opts};
  zklock::mutex m{a, path};
  m.lock();
  const long long before = zkt::server_watch_count();
  auto waiting = std::async(std::launch::async, [&] { return zklock::wait_until_free(w, path); });
  ASSERT_TRUE(await_more_watches(before));
  ASSERT_TRUE(zkt::expire(w));
  try {
    waiting.get();
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
