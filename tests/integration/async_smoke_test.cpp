// SPDX-License-Identifier: Apache-2.0
// A first look at the asynchronous acquires (the full suite is async_tests): a callback grant after
// a blocking holder lets go, a timeout and a cancellation that leave nothing behind, a chain of
// pending acquires issued from one thread and granted in queue order, and a lock object destroyed
// with acquires pending.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <future>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// The outcome of one asynchronous acquire, awaited by the test.
struct outcome {
  std::promise<std::pair<std::error_code, zklock::lock_hold>> p;
  std::future<std::pair<std::error_code, zklock::lock_hold>> f = p.get_future();
  auto callback() {
    return [this](std::error_code ec, zklock::lock_hold h) { p.set_value({ec, std::move(h)}); };
  }
  std::pair<std::error_code, zklock::lock_hold> get() {
    if (f.wait_for(60s) != std::future_status::ready) throw std::runtime_error("no completion within 60 s");
    return f.get();
  }
};

TEST(AsyncSmoke, GrantedAfterTheBlockingHolderUnlocks) {
  const auto path = zkt::unique_path("async-smoke");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  zklock::mutex holder{hs, path}, m{as, path};
  holder.lock();
  outcome o;
  m.async_lock(o.callback());
  ASSERT_TRUE(zkt::await_children(path, 2));
  EXPECT_EQ(o.f.wait_for(0s), std::future_status::timeout) << "granted while another holds";
  const auto before = holder.fencing_token();
  holder.unlock();
  auto [ec, h] = o.get();
  ASSERT_FALSE(ec) << ec.message();
  ASSERT_TRUE(h.owns_lock());
  EXPECT_GT(h.fencing_token(), before);
  EXPECT_TRUE(h.still_owned());
  h.unlock();
  EXPECT_FALSE(h.owns_lock());
  EXPECT_EQ(zkt::children(path).size(), 0u);
}

TEST(AsyncSmoke, TimeoutAndCancellationLeaveNothing) {
  const auto path = zkt::unique_path("async-smoke");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  zklock::mutex holder{hs, path}, m{as, path};
  holder.lock();
  outcome timed;
  m.async_lock(zklock::wait_context{.deadline = std::chrono::steady_clock::now() + 300ms}, timed.callback());
  auto [ec, h] = timed.get();
  EXPECT_EQ(ec, zklock::errc::lock_timeout);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_EQ(zkt::children(path).size(), 1u) << "the timed-out acquire left its node";

  std::stop_source stop;
  outcome cancelled;
  m.async_lock(zklock::wait_context{.stop = stop.get_token()}, cancelled.callback());
  ASSERT_TRUE(zkt::await_children(path, 2));
  stop.request_stop();
  EXPECT_EQ(cancelled.get().first, zklock::errc::cancelled);
  EXPECT_EQ(zkt::children(path).size(), 1u) << "the cancelled acquire left its node";
}

TEST(AsyncSmoke, PendingChainFromOneThreadIsGrantedInOrder) {
  const auto path = zkt::unique_path("async-smoke");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  constexpr int n = 50;
  std::mutex mu;
  std::vector<std::int64_t> tokens;
  std::atomic<int> completions{0};
  std::promise<void> all;
  for (int i = 0; i < n; ++i)
    m.async_lock([&](std::error_code ec, zklock::lock_hold h) {
      EXPECT_FALSE(ec) << ec.message();
      {
        std::lock_guard lk{mu};
        if (h) tokens.push_back(h.fencing_token());
      }
      if (++completions == n) all.set_value();
    });  // h is released when the callback returns: the next one is granted
  ASSERT_EQ(all.get_future().wait_for(60s), std::future_status::ready);
  ASSERT_EQ(tokens.size(), std::size_t{n});
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_LT(tokens[i - 1], tokens[i]) << "out of order at " << i;
  // the last hold is released as its callback returns, after it counted: its delete follows
  EXPECT_TRUE(zkt::await_children(path, 0)) << "a node is left after every hold was released";
}

TEST(AsyncSmoke, DestroyingTheLockCompletesPendingAcquires) {
  const auto path = zkt::unique_path("async-smoke");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  zklock::mutex holder{hs, path};
  holder.lock();
  std::atomic<int> closed{0}, other{0};
  {
    zklock::mutex m{as, path};
    for (int i = 0; i < 3; ++i)
      m.async_lock([&](std::error_code ec, zklock::lock_hold) {
        (ec == zklock::errc::session_closed ? closed : other)++;
      });
    ASSERT_TRUE(zkt::await_children(path, 4));
  }
  EXPECT_EQ(closed.load(), 3) << "completions before the destructor returned";
  EXPECT_EQ(other.load(), 0);
  EXPECT_EQ(zkt::children(path).size(), 1u);
}

TEST(AsyncSmoke, StopBeforeTheCallCancelsWithoutARequest) {
  const auto path = zkt::unique_path("async-smoke");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  std::stop_source stop;
  stop.request_stop();
  outcome o;
  m.async_lock(zklock::wait_context{.stop = stop.get_token()}, o.callback());
  auto [ec, h] = o.get();
  EXPECT_EQ(ec, zklock::errc::cancelled);
  EXPECT_FALSE(h.owns_lock());
  EXPECT_FALSE(zkt::exists(path)) << "the free lock was queued for although the stop came first";
}

}  // namespace
