// SPDX-License-Identifier: Apache-2.0
// async_coroutine — coroutines co_await zklock locks on one thread, with no coroutine library.
//
// usage: example_async_coroutine [HOSTS]
//   HOSTS: "host:port[,host:port...][/chroot]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
// A tiny event loop (main's thread) runs every coroutine and every completion. Four workers take
// turns on one mutex and update a counter with a suspension between read and write; others take a
// semaphore lease and two read holds, and one shows a deadline and a stop token. Exits 1 if mutual
// exclusion broke, an update was lost, a token went backwards or a completion ran twice or never.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>
#include <vector>
import zklock;

namespace {

// ---- a minimal coroutine task: starts at once, keeps its exception, is destroyed by its owner
struct task {
  struct promise_type {
    std::exception_ptr error;
    task get_return_object() { return task{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_always final_suspend() noexcept { return {}; }  // the frame stays until ~task
    void return_void() noexcept {}
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };
  explicit task(std::coroutine_handle<promise_type> h) : h_{h} {}
  task(task&& o) noexcept : h_{std::exchange(o.h_, {})} {}
  task& operator=(task&&) = delete;
  ~task() {
    if (h_) h_.destroy();
  }
  bool done() const { return h_.done(); }
  void rethrow_if_failed() const {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
  }

 private:
  std::coroutine_handle<promise_type> h_;
};

// ---- a tiny event loop: a queue of functions, drained by main's thread
class event_loop {
  using clock = std::chrono::steady_clock;

 public:
  /// Queues f to run on the loop's thread; callable from any thread (zklock's included).
  void post(std::function<void()> f, bool completion = false) {
    {
      std::lock_guard lk{mu_};
      queue_.push_back(std::move(f));
      completions_posted_ += completion;
    }
    cv_.notify_one();
  }
  /// The executor zklock resumes our coroutines on; counts the completions it is handed.
  zklock::executor executor() {
    return [this](std::function<void()> f) { post(std::move(f), true); };
  }
  /// Runs queued functions, and timers when due, until done() holds; throws after `limit`.
  template <class Done>
  void run_until(Done done, std::chrono::seconds limit) {
    const auto until = clock::now() + limit;
    while (!done()) {
      std::function<void()> f;
      {
        std::unique_lock lk{mu_};
        for (;;) {
          const auto now = clock::now();
          for (; !timers_.empty() && timers_.begin()->first <= now; timers_.erase(timers_.begin()))
            queue_.push_back(std::move(timers_.begin()->second));
          if (!queue_.empty()) break;
          if (now >= until) throw std::runtime_error("the event loop ran out of time");
          cv_.wait_until(lk, timers_.empty() ? until : std::min(until, timers_.begin()->first));
        }
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  /// Returns: how many functions wait in the queue.
  std::size_t pending() {
    std::lock_guard lk{mu_};
    return queue_.size();
  }
  /// Returns: how many completions zklock handed to executor().
  long completions_posted() {
    std::lock_guard lk{mu_};
    return completions_posted_;
  }

  /// An awaitable that resumes the coroutine on the loop after `d`; the others run meanwhile.
  auto sleep_for(std::chrono::milliseconds d) {
    struct awaiter {
      event_loop& loop;
      clock::time_point at;
      bool await_ready() const noexcept { return false; }
      void await_suspend(std::coroutine_handle<> h) {
        std::lock_guard lk{loop.mu_};
        loop.timers_.emplace(at, [h] { h.resume(); });
      }
      void await_resume() const noexcept {}
    };
    return awaiter{*this, clock::now() + d};
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::multimap<clock::time_point, std::function<void()>> timers_;
  long completions_posted_ = 0;
};

// ---- what the coroutines share (all of it touched by main's thread only)
struct shared_state {
  int inside = 0;                // coroutines inside the mutex's critical section right now
  long counter = 0;              // incremented under the mutex, read and written around a wait
  std::int64_t last_token = 0;   // the mutex's fencing tokens must grow in grant order
  int leases_out = 0;            // semaphore leases held right now
  long awaited = 0;              // zklock awaitables co_awaited (each must complete exactly once)
  std::vector<std::string> errors;
  void check(bool ok, const char* what) {
    if (!ok) errors.emplace_back(what);
  }
};

task worker(zklock::mutex& m, event_loop& loop, shared_state& st, int rounds) {
  for (int i = 0; i < rounds; ++i) {
    ++st.awaited;
    zklock::lock_hold h = co_await m.async_lock({}, loop.executor());  // queues, never blocks
    st.check(h.owns_lock(), "a granted hold owns nothing");
    st.check(h.fencing_token() > st.last_token, "a fencing token went backwards");
    st.last_token = h.fencing_token();
    st.check(++st.inside == 1, "two coroutines inside the mutex at once");
    const long seen = st.counter;
    co_await loop.sleep_for(std::chrono::milliseconds{2});  // slow work: the others run meanwhile
    st.counter = seen + 1;
    --st.inside;
    h.unlock();             // or let h go out of scope
  }
}

task lease_user(zklock::counting_semaphore& sem, event_loop& loop, shared_state& st) {
  ++st.awaited;
  zklock::lock_hold lease = co_await sem.async_acquire({}, loop.executor());
  st.check(++st.leases_out <= 2, "more leases out than the semaphore has");
  co_await loop.sleep_for(std::chrono::milliseconds{20});
  --st.leases_out;
}  // the lease is released here

task reader(zklock::shared_mutex& rw, event_loop& loop, shared_state& st) {
  ++st.awaited;
  zklock::lock_hold r1 = co_await rw.async_lock_shared({}, loop.executor());
  ++st.awaited;  // a second read hold while the first is held: readers share
  zklock::lock_hold r2 = co_await rw.async_lock_shared({}, loop.executor());
  st.check(r1 && r2 && r1.fencing_token() < r2.fencing_token(), "two read holds not granted together");
}

// While holding the lock, a deadline and a stop token end acquires of the same lock (each async
// acquire queues a contender of its own, so our own hold blocks them).
task give_up(zklock::mutex& m, event_loop& loop, shared_state& st) {
  using namespace std::chrono_literals;
  ++st.awaited;
  zklock::lock_hold h = co_await m.async_lock({}, loop.executor());
  try {
    ++st.awaited;
    auto never = co_await m.async_lock({.deadline = std::chrono::steady_clock::now() + 200ms}, loop.executor());
    st.check(false, "granted a lock that we hold");
  } catch (const std::system_error& e) {
    st.check(e.code() == zklock::errc::lock_timeout, "a deadline did not end in lock_timeout");
  }
  std::stop_source stop;
  loop.post([&stop] { stop.request_stop(); });  // runs once we are suspended below
  try {
    ++st.awaited;
    auto never = co_await m.async_lock({.stop = stop.get_token()}, loop.executor());
    st.check(false, "granted a lock that we hold");
  } catch (const std::system_error& e) {
    st.check(e.code() == zklock::errc::cancelled, "a stop request did not end in cancelled");
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 1 ? argv[1] : env && *env ? env : "127.0.0.1:2181";
  const std::string base = "/zklock-examples/async-coroutine-" + std::to_string(::getpid());
  constexpr int workers = 4, rounds = 5;

  event_loop loop;  // declared first: outlives the session and every hold
  shared_state st;
  {
    zklock::session s{hosts};
    // Before the locks, so destroyed after them: should the loop run out of time, destroying the
    // locks completes the pending acquires (session_closed; queued, never run) before any frame goes.
    std::vector<task> tasks;
    zklock::mutex m{s, base + "/counter"};
    zklock::mutex other{s, base + "/give-up"};
    zklock::counting_semaphore sem{s, base + "/slots", 2};
    zklock::shared_mutex rw{s, base + "/catalog"};

    for (int i = 0; i < workers; ++i) tasks.push_back(worker(m, loop, st, rounds));
    for (int i = 0; i < 3; ++i) tasks.push_back(lease_user(sem, loop, st));
    tasks.push_back(reader(rw, loop, st));
    tasks.push_back(give_up(other, loop, st));
    loop.run_until([&] {
      for (const auto& t : tasks)
        if (!t.done()) return false;
      return true;
    }, std::chrono::seconds{60});
    for (const auto& t : tasks) t.rethrow_if_failed();
    st.check(loop.pending() == 0, "work left in the queue after every coroutine finished");
  }  // the locks and the session close here: nothing is pending, so nothing may complete now
  st.check(st.counter == workers * rounds, "an update was lost");
  st.check(loop.completions_posted() == st.awaited, "a completion ran twice, or never");
  for (const auto& e : st.errors) std::fprintf(stderr, "example_async_coroutine: %s\n", e.c_str());
  if (!st.errors.empty()) return 1;
  std::printf("async_coroutine: %d coroutines on one thread, counter %ld, %ld completions, last token %lld\n",
              workers + 5, st.counter, st.awaited, static_cast<long long>(st.last_token));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_async_coroutine: %s\n", e.what());
  return 1;
}
