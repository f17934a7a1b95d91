// SPDX-License-Identifier: Apache-2.0
// Asynchronous acquisition: the callback and the awaitable forms of every lock type wait their turn
// behind blocking holders, time out and cancel leaving nothing behind, complete where the caller
// says, and complete exactly once, in queue order.
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "async_probe.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zkt::completion;

/// A minimal coroutine task: starts at once, runs to its end, frees itself; nobody awaits it (its
/// body reports through a std::promise).
struct task {
  struct promise_type {
    task get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

/// What one co_await gave: the code it threw (clear: granted), the hold, the thread it resumed on.
struct outcome {
  std::error_code ec;
  zklock::lock_hold hold;
  std::thread::id thread;
};

/// co_awaits `start()` (an acquire's awaitable) and reports into `out` (which must outlive it).
template <class Start>
task await_into(Start start, std::promise<outcome>& out) {
  outcome o;
  try {
    o.hold = co_await start();
  } catch (const std::system_error& e) {
    o.ec = e.code();
  }
  o.thread = std::this_thread::get_id();
  out.set_value(std::move(o));
}

/// Returns: the outcome (waiting at most 30 s, a failure guard: then the code is timed_out).
outcome get(std::future<outcome>& f) {
  if (f.wait_for(30s) != std::future_status::ready) {
    ADD_FAILURE() << "the coroutine was never resumed";
    return {std::make_error_code(std::errc::timed_out), {}, {}};
  }
  return f.get();
}

bool ready(const std::future<outcome>& f) { return f.wait_for(0s) == std::future_status::ready; }

/// Expects: `c` ran once and was granted a hold on `path` with a fencing token above `after`.
void expect_granted(completion& c, const std::string& path, std::int64_t after = 0) {
  EXPECT_EQ(c.calls(), 1);
  EXPECT_EQ(c.code(), std::error_code{}) << c.code().message();
  EXPECT_TRUE(c.hold().owns_lock());
  EXPECT_TRUE(static_cast<bool>(c.hold()));
  EXPECT_TRUE(c.hold().still_owned());
  EXPECT_EQ(c.hold().path(), path);
  if (c.hold()) EXPECT_GT(c.hold().fencing_token(), after);
}

/// Expects: `c` ran once, failed with `want` and holds nothing.
void expect_failed(completion& c, zklock::errc want) {
  EXPECT_EQ(c.calls(), 1);
  EXPECT_EQ(c.code(), std::error_code{want}) << c.code().message();
  EXPECT_FALSE(c.hold().owns_lock());
}

template <class C>
class AsyncCallback : public ::testing::Test {};
TYPED_TEST_SUITE(AsyncCallback, zkt::combos);

// Behind a blocking holder of another session: queued, completed only once the holder unlocks;
// the hold is the one node left, of our session, and it excludes the blocking holder.
TYPED_TEST(AsyncCallback, MutexWaitsForTheBlockingHolder) {
  const auto path = zkt::unique_path("async-mutex");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  completion c;
  typename TypeParam::mutex holder{hs, path}, m{as, path};
  holder.lock();
  const auto before = holder.fencing_token();
  m.async_lock(c.callback());
  ASSERT_TRUE(zkt::await_children(path, 2)) << "the acquire never queued";
  EXPECT_EQ(c.calls(), 0) << "completed while the blocking holder holds";
  holder.unlock();
  ASSERT_TRUE(c.wait());
  expect_granted(c, path, before);
  const auto nodes = zkt::children(path);
  ASSERT_EQ(nodes.size(), 1u);
  const auto node = zkt::stat_node(path + "/" + nodes.front());
  EXPECT_EQ(node.ephemeral_owner, as.id());
  EXPECT_EQ(node.czxid, c.hold().fencing_token());
  EXPECT_FALSE(m.owns_lock()) << "the hold is the lock_hold's, not the object's";
  EXPECT_FALSE(holder.try_lock()) << "the asynchronous hold does not exclude";
  c.hold().unlock();
  EXPECT_FALSE(c.hold().owns_lock());
  ASSERT_TRUE(zkt::await_children(path, 0));
  EXPECT_TRUE(holder.try_lock());
  holder.unlock();
  EXPECT_EQ(c.calls(), 1);
}

// A reader behind a blocking writer; a blocking reader shares with it; an async writer waits for
// both readers, then excludes readers.
TYPED_TEST(AsyncCallback, SharedMutexReadersShareAndAWriterExcludes) {
  const auto path = zkt::unique_path("async-rw");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  completion reader, writer;
  typename TypeParam::shared_mutex holder{hs, path}, rw{as, path};
  holder.lock();
  rw.async_lock_shared(reader.callback());
  ASSERT_TRUE(zkt::await_children(path, 2));
  EXPECT_EQ(reader.calls(), 0) << "a reader completed while a writer holds";
  holder.unlock();
  ASSERT_TRUE(reader.wait());
  expect_granted(reader, path);
  EXPECT_TRUE(holder.try_lock_shared()) << "readers do not share";
  rw.async_lock(writer.callback());
  ASSERT_TRUE(zkt::await_children(path, 3));
  holder.unlock_shared();
  EXPECT_EQ(writer.calls(), 0) << "a writer completed while a reader holds";
  const auto reader_token = reader.hold().fencing_token();
  reader.hold().unlock();
  ASSERT_TRUE(writer.wait());
  expect_granted(writer, path, reader_token);
  EXPECT_FALSE(holder.try_lock_shared()) << "the writer does not exclude readers";
  EXPECT_FALSE(holder.try_lock()) << "the writer does not exclude writers";
  writer.hold().unlock();
  ASSERT_TRUE(zkt::await_children(path, 0));
}

// Two leases: both held by a blocking holder; an async lease is granted when one is returned, the
// next one when the async lease is; the holder cannot exceed the count meanwhile.
TYPED_TEST(AsyncCallback, SemaphoreLeasesGoInTurn) {
  const auto path = zkt::unique_path("async-sem");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  completion first, second;
  typename TypeParam::semaphore holder{hs, path, 2}, sem{as, path, 2};
  holder.acquire();
  holder.acquire();
  sem.async_acquire(first.callback());
  ASSERT_TRUE(zkt::await_children(path, 3));
  EXPECT_EQ(first.calls(), 0) << "a third lease of two";
  holder.release();
  ASSERT_TRUE(first.wait());
  expect_granted(first, path);
  sem.async_acquire(second.callback());
  ASSERT_TRUE(zkt::await_children(path, 3));
  EXPECT_EQ(second.calls(), 0) << "a third lease of two";
  EXPECT_EQ(sem.held_leases(), 0) << "async leases are the lock_holds', not the object's";
  const auto first_token = first.hold().fencing_token();
  first.hold().unlock();
  ASSERT_TRUE(second.wait());
  expect_granted(second, path, first_token);
  EXPECT_FALSE(holder.try_acquire()) << "three leases of two";
  second.hold().unlock();
  holder.release();
  ASSERT_TRUE(zkt::await_children(path, 0));
}

template <class C>
class AsyncDeadline : public ::testing::Test {};
TYPED_TEST_SUITE(AsyncDeadline, zkt::combos);

// Every kind, behind a holder, with a short deadline: lock_timeout, not before the deadline, and
// once the completion has run, neither a node nor a watch of the attempt is on the server.
TYPED_TEST(AsyncDeadline, EveryKindTimesOutLeavingNothing) {
  const auto base = zkt::unique_path("async-deadline");
  const std::string mp = base + "/m", rwp = base + "/rw", sp = base + "/sem";
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  std::array<completion, 4> c;
  typename TypeParam::mutex holder_m{hs, mp}, m{cs, mp};
  typename TypeParam::shared_mutex holder_rw{hs, rwp}, rw{cs, rwp};
  typename TypeParam::semaphore holder_sem{hs, sp, 1}, sem{cs, sp, 1};
  holder_m.lock();
  holder_rw.lock();
  holder_sem.acquire();
  const auto held_m = zkt::children(mp), held_rw = zkt::children(rwp), held_sem = zkt::children(sp);
  const zklock::wait_context wc{.deadline = std::chrono::steady_clock::now() + 300ms};
  m.async_lock(wc, c[0].callback());
  rw.async_lock_shared(wc, c[1].callback());
  rw.async_lock(wc, c[2].callback());
  sem.async_acquire(wc, c[3].callback());
  for (auto& one : c) {
    ASSERT_TRUE(one.wait());
    expect_failed(one, zklock::errc::lock_timeout);
    EXPECT_GE(one.at(), wc.deadline) << "gave up before the deadline";
  }
  EXPECT_EQ(zkt::children(mp), held_m);
  EXPECT_EQ(zkt::children(rwp), held_rw);
  EXPECT_EQ(zkt::children(sp), held_sem);
  // (what may stay is the session's one watch on the semaphore's node, kept for its next waiter while
  // the semaphore object lives, if the acquire armed it before it gave up: see
  // NoLeftovers.FailedSemaphoreTries)
  for (const auto& w : zkt::watches_below(base, cs)) EXPECT_EQ(w, sp) << "a watch of the failed acquires stayed";
  // Without a deadline of its own, the timeout policy's bound applies.
  completion bounded;
  typename TypeParam::timed_mutex timed{cs, mp};
  const auto start = std::chrono::steady_clock::now();
  timed.async_lock(bounded.callback());
  ASSERT_TRUE(bounded.wait());
  expect_failed(bounded, zklock::errc::lock_timeout);
  EXPECT_GE(bounded.at() - start, TypeParam::timed_bound) << "gave up before the policy's bound";
  EXPECT_EQ(zkt::children(mp), held_m);
  holder_m.unlock();
  holder_rw.unlock();
  holder_sem.release();
}

// A coroutine co_awaits all three kinds in turn and holds them together.
task take_three(zklock::mutex& m, zklock::shared_mutex& rw, zklock::counting_semaphore& sem,
                std::promise<std::vector<zklock::lock_hold>>& out) {
  try {
    std::vector<zklock::lock_hold> holds;
    holds.push_back(co_await m.async_lock());
    holds.push_back(co_await rw.async_lock_shared());
    holds.push_back(co_await sem.async_acquire());
    out.set_value(std::move(holds));
  } catch (...) {
    out.set_exception(std::current_exception());
  }
}

TEST(AsyncAwait, ACoroutineHoldsEveryKind) {
  const auto base = zkt::unique_path("async-await");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  std::promise<std::vector<zklock::lock_hold>> out;
  auto got = out.get_future();
  zklock::mutex holder{hs, base + "/m"}, m{as, base + "/m"};
  zklock::shared_mutex rw{as, base + "/rw"}, holder_rw{hs, base + "/rw"};
  zklock::counting_semaphore sem{as, base + "/sem", 1}, holder_sem{hs, base + "/sem", 1};
  (void)m.async_lock();  // an awaitable never awaited starts nothing
  holder.lock();
  holder_rw.lock_shared();  // readers share: no wait for the reader
  take_three(m, rw, sem, out);
  ASSERT_TRUE(zkt::await_children(base + "/m", 2));
  EXPECT_NE(got.wait_for(0s), std::future_status::ready) << "resumed while the holder holds";
  holder.unlock();
  ASSERT_EQ(got.wait_for(30s), std::future_status::ready);
  const auto holds = got.get();
  ASSERT_EQ(holds.size(), 3u);
  for (const auto& h : holds) {
    EXPECT_TRUE(h.owns_lock()) << h.path();
    if (h) EXPECT_GT(h.fencing_token(), 0);
  }
  EXPECT_EQ(holds[1].path(), base + "/rw");
  EXPECT_EQ(zkt::children(base + "/m").size(), 1u) << "the awaitable never awaited queued";
  holder_rw.unlock_shared();
  EXPECT_FALSE(holder.try_lock());
  EXPECT_FALSE(holder_rw.try_lock()) << "the coroutine's read hold does not exclude a writer";
  EXPECT_FALSE(holder_sem.try_acquire());
}

// A writer co_awaited behind a blocking reader; errors arrive as std::system_error: the deadline's
// lock_timeout, the stop token's cancelled (which matches std::errc::operation_canceled), a closed
// session's session_closed.
TEST(AsyncAwait, ErrorsAreThrownAsSystemErrors) {
  const auto path = zkt::unique_path("async-await-errors");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  std::promise<outcome> granted, timed_out, cancelled, after_close;
  auto f_granted = granted.get_future(), f_timed_out = timed_out.get_future(), f_cancelled = cancelled.get_future();
  auto f_after_close = after_close.get_future();
  std::stop_source stop;
  zklock::shared_mutex holder{hs, path}, rw{as, path};
  holder.lock_shared();
  await_into([&rw] { return rw.async_lock(); }, granted);
  ASSERT_TRUE(zkt::await_children(path, 2));
  EXPECT_FALSE(ready(f_granted));
  holder.unlock_shared();
  const auto writer = get(f_granted);
  EXPECT_EQ(writer.ec, std::error_code{});
  EXPECT_TRUE(writer.hold.owns_lock());
  const auto held = zkt::children(path);

  await_into([&rw, wc = zklock::wait_context{.deadline = std::chrono::steady_clock::now() + 300ms}] {
    return rw.async_lock_shared(wc);
  }, timed_out);
  const auto late = get(f_timed_out);
  EXPECT_EQ(late.ec, std::error_code{zklock::errc::lock_timeout}) << late.ec.message();
  EXPECT_FALSE(late.hold.owns_lock());
  EXPECT_EQ(zkt::children(path), held);

  await_into([&rw, wc = zklock::wait_context{.stop = stop.get_token()}] { return rw.async_lock(wc); }, cancelled);
  ASSERT_TRUE(zkt::await_children(path, 2));
  stop.request_stop();
  const auto stopped = get(f_cancelled);
  EXPECT_EQ(stopped.ec, std::error_code{zklock::errc::cancelled}) << stopped.ec.message();
  EXPECT_EQ(stopped.ec, std::errc::operation_canceled);
  EXPECT_FALSE(stopped.hold.owns_lock());
  EXPECT_EQ(zkt::children(path), held);

  as.close();  // the writer's hold is lost with it
  await_into([&rw] { return rw.async_lock_shared(); }, after_close);
  const auto refused = get(f_after_close);
  EXPECT_EQ(refused.ec, std::error_code{zklock::errc::session_closed}) << refused.ec.message();
}

// A stop while pending, and a stop requested before the call: cancelled, for every kind, leaving
// only the holders' nodes.
TEST(AsyncCancel, StopWhilePendingAndStopBeforeTheCall) {
  const auto base = zkt::unique_path("async-cancel");
  const std::string mp = base + "/m", rwp = base + "/rw", sp = base + "/sem";
  zklock::session hs{zkt::options()}, cs{zkt::options()};
  std::array<completion, 8> c;
  zklock::mutex holder_m{hs, mp}, m{cs, mp};
  zklock::shared_mutex holder_rw{hs, rwp}, rw{cs, rwp};
  zklock::counting_semaphore holder_sem{hs, sp, 1}, sem{cs, sp, 1};
  holder_m.lock();
  holder_rw.lock();
  holder_sem.acquire();
  auto start_all = [&](const zklock::wait_context& wc, std::size_t first) {
    m.async_lock(wc, c[first].callback());
    rw.async_lock_shared(wc, c[first + 1].callback());
    rw.async_lock(wc, c[first + 2].callback());
    sem.async_acquire(wc, c[first + 3].callback());
  };
  std::stop_source pending;
  start_all({.stop = pending.get_token()}, 0);
  ASSERT_TRUE(zkt::await_children(mp, 2) && zkt::await_children(rwp, 3) && zkt::await_children(sp, 2));
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(c[i].calls(), 0) << i;
  EXPECT_TRUE(zkt::await_watch(base, cs)) << "control: a pending acquire's watch is listed";
  pending.request_stop();
  std::stop_source before;
  before.request_stop();
  start_all({.stop = before.get_token()}, 4);
  for (std::size_t i = 0; i < c.size(); ++i) {
    ASSERT_TRUE(c[i].wait()) << i;
    expect_failed(c[i], zklock::errc::cancelled);
  }
  EXPECT_EQ(zkt::children(mp).size(), 1u);
  EXPECT_EQ(zkt::children(rwp).size(), 1u);
  EXPECT_EQ(zkt::children(sp).size(), 1u);
  for (const auto& w : zkt::watches_below(base, cs)) EXPECT_EQ(w, sp) << "a watch stayed";  // (as above)
}

// A user executor: the completion is handed to it (not run before it runs it), and runs on the
// thread that drains it; a coroutine is resumed there too.
TEST(AsyncExecutor, AUserExecutorRunsTheCompletionOnItsThread) {
  const auto path = zkt::unique_path("async-executor");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  zkt::queue_executor ex;
  completion c, inline_run;
  std::promise<outcome> resumed;
  auto f = resumed.get_future();
  zklock::mutex holder{hs, path}, m{as, path};
  holder.lock();
  m.async_lock({}, c.callback(), ex.get());
  ASSERT_TRUE(zkt::await_children(path, 2));
  holder.unlock();
  ASSERT_TRUE(ex.await_posted(1)) << "nothing was handed to the executor";
  EXPECT_EQ(c.calls(), 0) << "ran without the executor";
  ASSERT_TRUE(ex.run_until([&] { return c.calls() > 0; }));
  expect_granted(c, path);
  EXPECT_EQ(c.thread(), std::this_thread::get_id());
  const auto posted = ex.posted();

  await_into([&m, e = ex.get()] { return m.async_lock({}, e); }, resumed);
  ASSERT_TRUE(zkt::await_children(path, 2));
  c.hold().unlock();
  ASSERT_TRUE(ex.await_posted(posted + 1));
  EXPECT_FALSE(ready(f)) << "resumed without the executor";
  ASSERT_TRUE(ex.run_until([&] { return ready(f); }));
  auto o = f.get();
  EXPECT_EQ(o.ec, std::error_code{});
  EXPECT_TRUE(o.hold.owns_lock());
  EXPECT_EQ(o.thread, std::this_thread::get_id());
  // An executor that runs the completion at once (on zklock's algorithm thread) works too.
  m.async_lock({}, inline_run.callback(), [](std::function<void()> run) { run(); });
  ASSERT_TRUE(zkt::await_children(path, 2));
  o.hold.unlock();
  ASSERT_TRUE(inline_run.wait());
  expect_granted(inline_run, path);
}

// The default: the completion runs, and the coroutine resumes, on another thread than the caller's.
TEST(AsyncExecutor, TheDefaultRunsOffTheCallersThread) {
  const auto path = zkt::unique_path("async-default-executor");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  completion c;
  std::promise<outcome> resumed;
  auto f = resumed.get_future();
  zklock::mutex holder{hs, path}, m{as, path};
  m.async_lock(c.callback());
  ASSERT_TRUE(c.wait());
  expect_granted(c, path);
  EXPECT_NE(c.thread(), std::this_thread::get_id());
  c.hold().unlock();
  holder.lock();
  await_into([&m] { return m.async_lock(); }, resumed);
  ASSERT_TRUE(zkt::await_children(path, 2));
  holder.unlock();
  auto o = get(f);
  EXPECT_TRUE(o.hold.owns_lock());
  EXPECT_NE(o.thread, std::this_thread::get_id());
}

// A completion that takes long does not hold up the watches of its session: a blocking waiter of
// the same session is woken and granted meanwhile (the default completion thread is not
// ZooKeeper's event thread).
TEST(AsyncExecutor, ASlowCompletionDoesNotDelayTheSessionsWatches) {
  const auto path = zkt::unique_path("async-slow");
  zklock::session s{zkt::options()}, other{zkt::options()};
  std::promise<void> entered, leave, left;
  auto f_entered = entered.get_future(), f_left = left.get_future();
  auto f_leave = leave.get_future().share();
  bool waited = false;
  {
    zklock::mutex a{s, path + "-a"}, blocked{s, path}, holder{other, path};
    holder.lock();
    a.async_lock([&, f_leave](std::error_code, zklock::lock_hold) {
      entered.set_value();
      (void)f_leave.wait_for(60s);
      left.set_value();
    });
    EXPECT_EQ(f_entered.wait_for(30s), std::future_status::ready) << "the completion never ran";
    {
      std::jthread waiter([&] {
        waited = blocked.try_lock_for(30s);
        if (waited) blocked.unlock();
      });
      EXPECT_TRUE(zkt::await_children(path, 2));
      holder.unlock();
    }
    leave.set_value();
    EXPECT_EQ(f_left.wait_for(30s), std::future_status::ready);
  }
  EXPECT_TRUE(waited) << "the waiter's watch waited for a slow completion";
}

// Acquires of one session run their steps at once, yet those of one path queue in the order of the
// calls, also on a path whose lock node and parents do not exist yet (the first acquire creates
// them while the others wait for their turn to send): 30 issued at once, each released in its
// completion, complete in the order issued.
TEST(AsyncExactlyOnce, AcquiresOfAFreshPathQueueInTheOrderOfTheCalls) {
  constexpr int n = 30;
  const auto path = zkt::unique_path("async-fresh") + "/missing/parents";
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> order;
  std::vector<std::int64_t> tokens;
  for (int i = 0; i < n; ++i)
    m.async_lock([&, i](std::error_code ec, zklock::lock_hold h) {
      std::lock_guard lk{mu};
      order.push_back(ec ? -1 : i);
      if (h) tokens.push_back(h.fencing_token());
      cv.notify_all();
    });  // released as h goes out of scope
  std::unique_lock lk{mu};
  ASSERT_TRUE(cv.wait_for(lk, 60s, [&] { return order.size() == n; })) << order.size() << " of " << n << " completed";
  for (int i = 0; i < n; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i) << "out of the order of the calls";
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]) << i;
}

// One thread issues 200 acquires on one path behind a holder: each completes exactly once, granted,
// in the order issued (fencing tokens strictly increasing); even ones are released in their
// completion, odd ones later by the test's thread.
TEST(AsyncExactlyOnce, TwoHundredAcquiresAreGrantedInQueueOrder) {
  constexpr int n = 200;
  const auto path = zkt::unique_path("async-many");
  zklock::session hs{zkt::options()}, as{zkt::options()};
  struct record {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> order;
    std::vector<std::int64_t> tokens;
    std::vector<zklock::lock_hold> later;
    std::vector<std::error_code> failures;
    std::array<std::atomic<int>, n> calls{};
  };
  auto r = std::make_shared<record>();
  zklock::mutex holder{hs, path};
  auto m = std::make_unique<zklock::mutex>(as, path);
  holder.lock();
  for (int i = 0; i < n; ++i)
    m->async_lock([r, i](std::error_code ec, zklock::lock_hold h) {
      r->calls[static_cast<std::size_t>(i)].fetch_add(1);
      std::lock_guard lk{r->mu};
      r->order.push_back(i);
      if (ec || !h) r->failures.push_back(ec);
      if (h) r->tokens.push_back(h.fencing_token());
      if (i % 2 == 1) r->later.push_back(std::move(h));
      r->cv.notify_all();
    });  // even: released as h goes out of scope
  ASSERT_TRUE(zkt::await_children(path, n + 1)) << "not all acquires queued";
  holder.unlock();
  {
    std::unique_lock lk{r->mu};
    while (r->order.size() < n) {
      if (!r->cv.wait_for(lk, 60s, [&] { return r->order.size() == n || !r->later.empty(); })) break;
      auto release = std::move(r->later);
      r->later.clear();
      lk.unlock();
      release.clear();
      lk.lock();
    }
    ASSERT_EQ(r->order.size(), std::size_t{n}) << "completions missing";
    EXPECT_TRUE(r->failures.empty()) << r->failures.front().message();
    for (std::size_t i = 0; i < r->order.size(); ++i) EXPECT_EQ(r->order[i], static_cast<int>(i)) << "out of queue order";
    for (std::size_t i = 1; i < r->tokens.size(); ++i) EXPECT_GT(r->tokens[i], r->tokens[i - 1]) << i;
    r->later.clear();
  }
  m.reset();
  as.flush();
  for (int i = 0; i < n; ++i) EXPECT_EQ(r->calls[static_cast<std::size_t>(i)].load(), 1) << i;
  EXPECT_TRUE(zkt::await_children(path, 0));
}

}  // namespace
