// SPDX-License-Identifier: Apache-2.0
// A burst of asynchronous acquires parks many steps at once, each on a fiber with a stack of its
// own; once those steps have ended, the session keeps the pages of a few stacks, not of every one
// the burst made, and the fibers that gave theirs back start their next steps afresh.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "fiber_stacks.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using stacks = zkt::fiber_stacks;
using zkt::fiber_stacks_now;

/// Queues `n` asynchronous acquires of `m` behind `holder` (held), waits until the server lists them
/// all, then lets `holder` go and waits for every completion: each must come once, granted, in the
/// order issued (fencing tokens increasing). `queued` runs while all n are queued.
template <class Queued>
void burst(zklock::mutex& holder, zklock::mutex& m, const std::string& path, Queued queued) {
  constexpr int n = 300;
  struct record {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> order;
    std::vector<std::int64_t> tokens;
    std::vector<std::error_code> failures;
    std::array<std::atomic<int>, n> calls{};
  };
  auto r = std::make_shared<record>();
  holder.lock();
  for (int i = 0; i < n; ++i)
    m.async_lock([r, i](std::error_code ec, zklock::lock_hold h) {  // released as h goes
      r->calls[static_cast<std::size_t>(i)].fetch_add(1);
      std::lock_guard lk{r->mu};
      r->order.push_back(i);
      if (ec || !h) r->failures.push_back(ec);
      if (h) r->tokens.push_back(h.fencing_token());
      r->cv.notify_all();
    });
  ASSERT_TRUE(zkt::await_children(path, n + 1)) << "not all acquires queued";
  queued();
  holder.unlock();
  std::unique_lock lk{r->mu};
  ASSERT_TRUE(r->cv.wait_for(lk, 60s, [&] { return r->order.size() == n; })) << "completions missing";
  EXPECT_TRUE(r->failures.empty()) << r->failures.front().message();
  for (std::size_t i = 0; i < r->order.size(); ++i) EXPECT_EQ(r->order[i], static_cast<int>(i)) << "out of queue order";
  for (std::size_t i = 1; i < r->tokens.size(); ++i) EXPECT_GT(r->tokens[i], r->tokens[i - 1]) << i;
  lk.unlock();
  for (int i = 0; i < n; ++i) EXPECT_EQ(r->calls[static_cast<std::size_t>(i)].load(), 1) << i;
}

TEST(FiberStacks, ABurstGivesItsStacksBackOnceItsStepsEndAndTheFibersStartAfresh) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
  GTEST_SKIP() << "under a sanitizer a fiber keeps its stack (a fresh start would abandon frames the "
                  "sanitizer tracks): the unsanitized preset tests this";
#endif
#endif
#if !defined(__x86_64__)
  GTEST_SKIP() << "fibers keep their stacks where they switch by swapcontext (not x86-64)";
#endif
  const auto path = zkt::unique_path("fiber-stacks");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  zklock::mutex holder{hs, path};
  zklock::mutex m{as, path};
  const stacks before = fiber_stacks_now();
  stacks made;
  burst(holder, m, path, [&] {
    // Every step ends with its watches' request, after its listing: until then its fiber is busy.
    const auto until = std::chrono::steady_clock::now() + 30s;
    do {
      made = fiber_stacks_now();
      if (made.count - before.count >= 32 && made.touched - before.touched <= 16) break;
      std::this_thread::sleep_for(10ms);  // polling what /proc says of the stacks
    } while (std::chrono::steady_clock::now() < until);
    EXPECT_GE(made.count - before.count, 32) << "the burst parked fewer steps at once than this test needs";
    EXPECT_LE(made.touched - before.touched, 16)
        << "of " << (made.count - before.count) << " fibers made, " << (made.touched - before.touched)
        << " keep pages of their stacks (" << (made.resident - before.resident)
        << " bytes), with none of their steps under way";
  });
  // Again on the same session: the fibers that gave their pages back (all but 16 of those made)
  // run steps again, started afresh.
  burst(holder, m, path, [] {});
  EXPECT_TRUE(zkt::await_children(path, 0));
}

}  // namespace
