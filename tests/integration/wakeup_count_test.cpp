// SPDX-License-Identifier: Apache-2.0
// What tells the watch strategies apart: how many waiters a release wakes. Counted by the hooks
// (acquire_stats::wakeups) for every watch strategy x wake-up combination: with the predecessor
// watch each release wakes only the two waiters behind it (the first is granted, the second
// learns it is next), so every waiter wakes at most twice however long the queue; with the
// children watch every waiter wakes on every join and leave (a herd). A semaphore release wakes
// only the few waiters that watch the lease, never the whole queue.
#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <chrono>
#include <numeric>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// Wake-ups of every granted acquire, by lock path: what one test's hooks heard (each test has
/// its own book, given to its locks through their hooks instances).
struct wake_book {
  std::mutex mu;
  std::map<std::string, std::vector<std::size_t>> wakeups;  // in grant order
  std::map<std::thread::id, std::vector<std::size_t>> failed;  // wake-ups of attempts that gave up, by thread
};

struct wake_hooks {
  static constexpr bool enabled = true;
  wake_book* book = nullptr;
  void on_acquire(const zklock::acquire_stats& s) noexcept {
    std::lock_guard lk{book->mu};
    if (s.acquired)
      book->wakeups[std::string{s.path}].push_back(s.wakeups);
    else
      book->failed[std::this_thread::get_id()].push_back(s.wakeups);  // hooks run on the acquiring thread
  }
  void on_release(const zklock::release_stats&) noexcept {}
};

/// Polls the server until it counts `n` more watches than `before` (every queued waiter waits: a
/// children watch cannot be seen otherwise). Returns: whether within 30 s.
bool await_watch_count(long long before, long long n) {
  const auto limit = std::chrono::steady_clock::now() + std::chrono::seconds{30};
  while (zkt::server_watch_count() < before + n) {
    if (std::chrono::steady_clock::now() > limit) return false;
    std::this_thread::yield();
  }
  return true;
}

/// Returns: the wake-ups of the granted acquires of `path`, in grant order.
std::vector<std::size_t> granted_wakeups(wake_book& book, const std::string& path) {
  std::lock_guard lk{book.mu};
  return book.wakeups[path];
}

template <class W, class K>
struct counted {
  struct policies : zklock::default_policies {
    using watch = W;
    using wakeup = K;
    using hooks = wake_hooks;
  };
  using mutex = zklock::basic_mutex<policies>;
  using semaphore = zklock::basic_counting_semaphore<policies>;
  static constexpr bool predecessor = std::is_same_v<W, zklock::watch_predecessor>;
};
// Each strategy once (what it wakes is the strategy's), with the pairings zkt::combos leaves out.
using counted_combos = ::testing::Types<counted<zklock::watch_predecessor, zklock::wake_latch>,
                                        counted<zklock::watch_children, zklock::wake_condition_variable>>;

template <class C>
class WakeupCount : public ::testing::Test {};
TYPED_TEST_SUITE(WakeupCount, counted_combos);

/// Waiter threads that each take a lock, report the grant, and release when told to.
class relay {
 public:
  void granted(int who) {
    std::lock_guard lk{mu_};
    order_.push_back(who);
    cv_.notify_all();
  }
  /// Blocks until `n` grants happened. Returns: the grant order so far.
  std::vector<int> await_grants(std::size_t n) {
    std::unique_lock lk{mu_};
    cv_.wait(lk, [&] { return order_.size() >= n; });
    return order_;
  }
  void allow_release(int who) {
    std::lock_guard lk{mu_};
    released_.push_back(who);
    cv_.notify_all();
  }
  void await_release_permission(int who) {
    std::unique_lock lk{mu_};
    cv_.wait(lk, [&] {
      for (int r : released_)
        if (r == who) return true;
      return false;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> order_;
  std::vector<int> released_;
};

/// On a failed assertion: lets every waiter go and ends the holder's session, so that the waiter
/// threads finish instead of blocking the test's end.
struct unblock_on_exit {
  relay& r;
  zklock::session& holder;
  int waiters;
  ~unblock_on_exit() {
    for (int i = 0; i < waiters; ++i) r.allow_release(i);
    holder.close();
  }
};

// A holder and four waiters queued one after the other; the holds are then handed down the queue
// one release at a time.
TYPED_TEST(WakeupCount, AMutexReleaseWakesOneWaiterOrTheHerd) {
  wake_book book;
  constexpr int waiters = 4;
  const auto path = zkt::unique_path("wake-mutex");
  zklock::session hs{zkt::options()};
  typename TypeParam::mutex holder{hs, path, wake_hooks{&book}};
  holder.lock();
  const long long watches_before = zkt::server_watch_count();
  relay r;
  std::vector<std::jthread> threads;
  unblock_on_exit guard{r, hs, waiters};
  for (int i = 0; i < waiters; ++i) {
    threads.emplace_back([&, i] {
      zklock::session s{zkt::options()};
      typename TypeParam::mutex m{s, path, wake_hooks{&book}};
      m.lock();
      r.granted(i);
      r.await_release_permission(i);
      m.unlock();
    });
    ASSERT_TRUE(zkt::await_children(path, static_cast<std::size_t>(i) + 2));  // queued in this order
  }
  // One children watch per waiter; or, with the predecessor watch, waiter i watches its own node
  // and the nearest two of the i + 1 contenders ahead of it.
  long long armed = waiters;
  if constexpr (TypeParam::predecessor) {
    armed = 0;
    for (long long i = 0; i < waiters; ++i) armed += 1 + std::min(i + 1, 2LL);
  }
  ASSERT_TRUE(await_watch_count(watches_before, armed)) << "not every waiter waits";
  {
    std::lock_guard lk{book.mu};
    book.wakeups[path].clear();  // the holder's own grant
  }
  holder.unlock();
  for (int i = 0; i < waiters; ++i) {
    const auto order = r.await_grants(static_cast<std::size_t>(i) + 1);
    ASSERT_EQ(order.back(), i) << "FIFO";
    r.allow_release(i);
  }
  threads.clear();
  const auto woke = granted_wakeups(book, path);
  ASSERT_EQ(woke.size(), static_cast<std::size_t>(waiters));
  [[maybe_unused]] const std::size_t total = std::accumulate(woke.begin(), woke.end(), std::size_t{0});
  if constexpr (TypeParam::predecessor) {
    EXPECT_EQ(woke[0], 1u) << "the first waiter wakes once, at its turn";
    for (std::size_t i = 1; i < woke.size(); ++i)
      EXPECT_LE(woke[i], 2u) << "waiter " << i << ": once the holder two ahead leaves, then at its turn";
  } else {
    // Every waiter wakes at least at its turn; the ones further back also at every join behind them
    // and at every release ahead of them.
    for (std::size_t i = 0; i < woke.size(); ++i) EXPECT_GE(woke[i], 1u) << "waiter " << i;
    // (Changes close together can reach a waiter as one wake-up: count them all together.)
    EXPECT_GT(total, woke.size()) << "a children watch wakes every waiter on every change";
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

// Two leases held, four waiters queued. The leases are returned out of order (the second holder
// first), and every granted waiter returns its lease at once. With the predecessor watch a waiter
// watches the four leases nearest ahead of it (twice the leases) and wakes only when one of them
// goes: at most once per lease ahead of it; joins behind it never wake it.
TYPED_TEST(WakeupCount, ASemaphoreReleaseWakesAtMostTheFirstWaiters) {
  wake_book book;
  constexpr int waiters = 4;
  const auto path = zkt::unique_path("wake-sem");
  zklock::session hs{zkt::options()};
  typename TypeParam::semaphore holder{hs, path, 2, wake_hooks{&book}};
  holder.acquire();
  holder.acquire();
  const long long watches_before = zkt::server_watch_count();
  relay r;
  std::vector<std::jthread> threads;
  unblock_on_exit guard{r, hs, waiters};
  for (int i = 0; i < waiters; ++i) {
    threads.emplace_back([&, i] {
      zklock::session s{zkt::options()};
      typename TypeParam::semaphore sem{s, path, 2, wake_hooks{&book}};
      sem.acquire();
      r.granted(i);
      r.await_release_permission(i);
      sem.release();
    });
    ASSERT_TRUE(zkt::await_children(path, static_cast<std::size_t>(i) + 3));
  }
  // One children watch per waiter; or, with the predecessor watch, waiter i watches its own node
  // and the nearest four (twice the leases; looking ahead) or two of the 2 + i leases ahead of it.
  long long armed = waiters;
  if constexpr (TypeParam::predecessor) {
    armed = 0;
    const bool look_ahead = zkt::options().look_ahead_round_trip == std::chrono::microseconds::zero();
    for (long long i = 0; i < waiters; ++i) armed += 1 + std::min(i + 2, look_ahead ? 4LL : 2LL);
  }
  ASSERT_TRUE(await_watch_count(watches_before, armed)) << "not every waiter waits";
  {
    std::lock_guard lk{book.mu};
    book.wakeups[path].clear();
  }
  holder.release();  // returns the second lease first: out of order
  r.await_grants(1);
  holder.release();
  r.await_grants(2);
  for (int i = 0; i < waiters; ++i) r.allow_release(i);
  threads.clear();
  const auto woke = granted_wakeups(book, path);
  ASSERT_EQ(woke.size(), static_cast<std::size_t>(waiters));
  [[maybe_unused]] const std::size_t total = std::accumulate(woke.begin(), woke.end(), std::size_t{0});
  if constexpr (TypeParam::predecessor) {
    EXPECT_EQ(woke[0], 1u) << "the first waiter wakes once: at the first release";
    for (std::size_t i = 1; i < woke.size(); ++i)
      EXPECT_LE(woke[i], 2 + i) << "waiter " << i << ": at most once per lease ahead of it, never for joins behind";
  } else {
    EXPECT_GT(total, woke.size()) << "a children watch wakes every waiter on every change";
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

// A timed try keeps one deadline across every wake-up: ten contenders queue ahead of ours and give
// up one after another, the nearest first, so that ours wakes and re-arms again and again. It still
// returns false once its own deadline has passed, not a wait after its last wake-up.
TYPED_TEST(WakeupCount, OneDeadlineAcrossEveryWakeup) {
  wake_book book;
  constexpr int ahead = 10;
  const auto path = zkt::unique_path("wake-deadline");
  zklock::session hs{zkt::options()};
  typename TypeParam::mutex holder{hs, path, wake_hooks{&book}};
  holder.lock();
  std::vector<std::unique_ptr<zklock::session>> sessions;
  for (int k = 0; k < ahead; ++k) sessions.push_back(std::make_unique<zklock::session>(zkt::options()));
  zklock::session ws{zkt::options()};
  typename TypeParam::mutex waiter{ws, path, wake_hooks{&book}};
  // The contenders ahead give up on a stop request (no deadline of their own: however long the queue
  // takes to build, none leaves before it is built).
  std::vector<std::stop_source> stops(ahead);
  std::vector<std::jthread> quitters;
  for (int k = 0; k < ahead; ++k) {
    quitters.emplace_back([&, s = sessions[static_cast<std::size_t>(k)].get(), stop = stops[static_cast<std::size_t>(k)].get_token()] {
      typename TypeParam::mutex m{*s, path, wake_hooks{&book}};
      EXPECT_FALSE(m.try_lock(zklock::wait_context{.stop = stop}));
    });
    ASSERT_TRUE(zkt::await_children(path, static_cast<std::size_t>(k) + 2));
  }
  // Once ours is queued too, the one just ahead of it gives up first, then every 60 ms the next one,
  // all well before our deadline.
  const auto ours = std::chrono::steady_clock::now() + std::chrono::milliseconds{60 * ahead} + 1s;
  std::jthread driver{[&] {
    const bool queued = zkt::await_children(path, static_cast<std::size_t>(ahead) + 2);
    EXPECT_TRUE(queued) << "ours never queued behind the ten";
    for (int k = ahead; k-- > 0;) {
      stops[static_cast<std::size_t>(k)].request_stop();
      if (queued) std::this_thread::sleep_for(60ms);  // the pace of the give-ups
    }
  }};
  EXPECT_FALSE(waiter.try_lock_until(ours));
  const auto returned = std::chrono::steady_clock::now();
  driver.join();
  quitters.clear();
  EXPECT_GE(returned, ours);
  EXPECT_LT(returned, ours + 2s) << "the deadline moved with the wake-ups";
  std::vector<std::size_t> failed;
  {
    std::lock_guard lk{book.mu};
    failed = book.failed[std::this_thread::get_id()];
  }
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_GE(failed.back(), 3u) << "ours should have woken at several give-ups ahead of it";
  holder.unlock();
  EXPECT_TRUE(zkt::children(path).empty());
}

}  // namespace
