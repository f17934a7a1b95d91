// SPDX-License-Identifier: Apache-2.0
// Test support for asynchronous acquires: a recorder of one completion, and a user executor whose
// queue the test's own thread drains.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>
#include <utility>
import zklock;

namespace zkt {

/// What the callback of one asynchronous acquire saw: how often it ran, its code, its hold and the
/// thread it ran on. Must outlive the acquire (declare it before the lock object).
class completion {
 public:
  /// Returns: the callback for async_lock / async_lock_shared / async_acquire; it records into *this.
  auto callback() {
    return [this](std::error_code ec, zklock::lock_hold h) { record(ec, std::move(h)); };
  }
  /// Effects: waits until the callback has run (at most `limit`, a failure guard). Returns: whether it ran.
  bool wait(std::chrono::milliseconds limit = std::chrono::seconds{30}) {
    std::unique_lock lk{mu_};
    return cv_.wait_for(lk, limit, [&] { return calls_ > 0; });
  }
  /// Returns: how often the callback ran.
  int calls() const {
    std::lock_guard lk{mu_};
    return calls_;
  }
  /// Returns: the code of the last run.
  std::error_code code() const {
    std::lock_guard lk{mu_};
    return ec_;
  }
  /// Returns: the thread of the last run.
  std::thread::id thread() const {
    std::lock_guard lk{mu_};
    return thread_;
  }
  /// Returns: when the callback last ran.
  std::chrono::steady_clock::time_point at() const {
    std::lock_guard lk{mu_};
    return at_;
  }
  /// Returns: the hold of the last run (use once the callback ran: it runs once).
  zklock::lock_hold& hold() { return hold_; }

 private:
  void record(std::error_code ec, zklock::lock_hold h) {
    // Notified under the lock: a waiter may destroy *this as soon as it sees the call.
    std::lock_guard lk{mu_};
    ++calls_;
    ec_ = ec;
    hold_ = std::move(h);
    thread_ = std::this_thread::get_id();
    at_ = std::chrono::steady_clock::now();
    cv_.notify_all();
  }
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int calls_ = 0;
  std::error_code ec_;
  zklock::lock_hold hold_;
  std::thread::id thread_;
  std::chrono::steady_clock::time_point at_;
};

/// A user executor: completions are queued and run by whoever calls run_until (the test's thread).
/// Must outlive every acquire given get().
class queue_executor {
 public:
  /// Returns: the executor to pass to an asynchronous acquire.
  zklock::executor get() {
    return [this](std::function<void()> f) {
      std::lock_guard lk{mu_};
      queue_.push_back(std::move(f));
      ++posted_;
      cv_.notify_all();
    };
  }
  /// Returns: how many functions were handed to the executor so far.
  std::size_t posted() const {
    std::lock_guard lk{mu_};
    return posted_;
  }
  /// Effects: waits until `n` functions were handed over in all (at most `limit`). Returns: whether.
  bool await_posted(std::size_t n, std::chrono::milliseconds limit = std::chrono::seconds{30}) {
    std::unique_lock lk{mu_};
    return cv_.wait_for(lk, limit, [&] { return posted_ >= n; });
  }
  /// Effects: runs the queued functions on this thread, waiting for more, until `done()` holds
  /// (checked after each) or `limit` passes. Returns: whether `done()` held.
  template <class Pred>
  bool run_until(Pred done, std::chrono::milliseconds limit = std::chrono::seconds{30}) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      std::function<void()> f;
      {
        std::unique_lock lk{mu_};
        if (!cv_.wait_until(lk, deadline, [&] { return !queue_.empty(); })) return done();
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
    return true;
  }
  /// Effects: runs what is queued now, without waiting. Returns: how many functions ran.
  std::size_t run_queued() {
    std::size_t n = 0;
    for (;;) {
      std::function<void()> f;
      {
        std::lock_guard lk{mu_};
        if (queue_.empty()) return n;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
      ++n;
    }
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::size_t posted_ = 0;
};

}  // namespace zkt
