// SPDX-License-Identifier: Apache-2.0
// The runner of a session's asynchronous acquires (zklock:step): its algorithm thread (posted
// coroutine resumptions and tasks, and the waits' deadlines), its completion thread, the
// resume_waiter that a watch, a stop request or a deadline uses to resume a suspended acquire, and
// the session's hooks: runner_of starts it, close() drains it, the session's destructor stops it.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock;
import :session_impl;

namespace zklock::detail {

// ---- the runner --------------------------------------------------------------------------------

async_runner::async_runner() = default;

void async_runner::start(const std::shared_ptr<async_runner>& self) {
  // Each thread keeps the runner alive until it ends: a runner stopped from one of its own threads
  // (a completion that closes the session) is destroyed by that thread, after its loop is over.
  algorithm_ = std::thread([self] { self->run_algorithm(); });
  try {
    completion_ = std::thread([self] { self->run_completions(); });
  } catch (...) {
    stop();
    throw;
  }
}

async_runner::~async_runner() { stop(); }

void async_runner::post(std::coroutine_handle<> h) {
  post(std::function<void()>{[h] { h.resume(); }});
}

void async_runner::post(std::function<void()> f) {
  {
    std::lock_guard lk{mu_};
    tasks_.push_back(std::move(f));
  }
  cv_.notify_one();
}

void async_runner::complete(const std::function<void(std::function<void()>)>& ex, std::function<void()> f) {
  if (ex) {
    try {
      ex(std::move(f));
    } catch (...) {  // the executor refused it: the completion is lost, but the count must end
    }
    end_acquire();
    return;
  }
  {
    std::lock_guard lk{mu_};
    completions_.push_back(std::move(f));
    ++queued_seq_;
    --unfinished_;
  }
  comp_cv_.notify_one();
  done_cv_.notify_all();
}

void async_runner::begin_acquire() {
  std::lock_guard lk{mu_};
  ++unfinished_;
}

void async_runner::end_acquire() noexcept {
  {
    std::lock_guard lk{mu_};
    --unfinished_;
  }
  done_cv_.notify_all();
}

bool async_runner::on_runner_thread() const noexcept {
  const auto me = std::this_thread::get_id();
  return me == algorithm_.get_id() || me == completion_.get_id();
}

bool async_runner::on_completion_thread() const noexcept {
  return std::this_thread::get_id() == completion_.get_id();
}

void async_runner::drain() noexcept {
  std::vector<std::shared_ptr<resume_waiter>> wake;
  {
    std::lock_guard lk{mu_};
    for (auto& [p, w] : suspended_)
      if (auto s = w.lock()) wake.push_back(std::move(s));
  }
  for (auto& w : wake) w->wake();
  const auto me = std::this_thread::get_id();
  if (me == algorithm_.get_id()) return;
  {
    std::unique_lock lk{mu_};
    done_cv_.wait(lk, [&] { return unfinished_ == 0 || stopping_; });
  }
  if (me != completion_.get_id()) flush_completions();
}

void async_runner::flush_completions() noexcept {
  if (on_runner_thread()) return;
  std::unique_lock lk{mu_};
  const std::uint64_t ticket = queued_seq_;
  done_cv_.wait(lk, [&] { return run_seq_ >= ticket || stopping_; });
}

void async_runner::stop() noexcept {
  {
    std::lock_guard lk{mu_};
    if (stopping_ && !algorithm_.joinable() && !completion_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  comp_cv_.notify_all();
  done_cv_.notify_all();
  for (std::thread* t : {&algorithm_, &completion_}) {
    if (!t->joinable()) continue;
    if (t->get_id() == std::this_thread::get_id())
      t->detach();  // the last owner let go on this very thread: it ends by itself
    else
      t->join();
  }
}

async_runner::timer_key async_runner::add_timer(clock::time_point at, std::weak_ptr<resume_waiter> w) {
  timer_key k;
  bool first;
  {
    std::lock_guard lk{mu_};
    k = {at, next_timer_++};
    timers_.emplace(k, std::move(w));
    first = timers_.begin()->first == k;
  }
  if (first) cv_.notify_one();  // the algorithm thread sleeps until the earliest deadline
  return k;
}

void async_runner::cancel_timer(const timer_key& k) noexcept {
  std::lock_guard lk{mu_};
  timers_.erase(k);
}

void async_runner::track(resume_waiter* w, std::weak_ptr<resume_waiter> p) {
  std::lock_guard lk{mu_};
  suspended_.emplace(w, std::move(p));
}

void async_runner::untrack(resume_waiter* w) noexcept {
  std::lock_guard lk{mu_};
  suspended_.erase(w);
}

void async_runner::run_algorithm() {
  std::unique_lock lk{mu_};
  for (;;) {
    if (stopping_) return;
    // deadlines first: a wait that timed out resumes in deadline order
    std::vector<std::shared_ptr<resume_waiter>> due;
    const auto now = clock::now();
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      if (auto w = timers_.begin()->second.lock()) due.push_back(std::move(w));
      timers_.erase(timers_.begin());
    }
    if (!due.empty()) {
      lk.unlock();
      for (auto& w : due) w->expire();
      due.clear();
      lk.lock();
      continue;
    }
    if (tasks_.empty()) {
      if (timers_.empty())
        cv_.wait(lk);
      else
        cv_.wait_until(lk, timers_.begin()->first.first);
      continue;
    }
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lk.unlock();
    task();  // a step of an acquire: its requests block this thread for their round trips
    task = nullptr;
    lk.lock();
  }
}

void async_runner::run_completions() {
  std::unique_lock lk{mu_};
  for (;;) {
    comp_cv_.wait(lk, [&] { return stopping_ || !completions_.empty(); });
    if (stopping_) return;
    auto f = std::move(completions_.front());
    completions_.pop_front();
    lk.unlock();
    try {
      f();
    } catch (...) {  // a completion's exception must not end the thread
    }
    f = nullptr;
    lk.lock();
    ++run_seq_;
    done_cv_.notify_all();
  }
}

// ---- the waiter ----------------------------------------------------------------------------------

void resume_waiter::wake() noexcept {
  std::coroutine_handle<> h;
  {
    std::lock_guard lk{mu_};
    fired_ = true;
    if (!h_ || resumed_) return;
    resumed_ = true;
    h = h_;
    if (timer_) r_->cancel_timer(*timer_);
  }
  r_->untrack(this);
  try {
    r_->post(h);
  } catch (...) {  // allocation failure: nothing else can resume it
    std::terminate();
  }
}

void resume_waiter::expire() noexcept {
  std::coroutine_handle<> h;
  {
    std::lock_guard lk{mu_};
    if (!h_ || resumed_) return;
    resumed_ = true;
    h = h_;
  }
  r_->untrack(this);
  try {
    r_->post(h);
  } catch (...) {
    std::terminate();
  }
}

bool resume_waiter::suspend(std::coroutine_handle<> h, std::chrono::steady_clock::time_point deadline) {
  r_->track(this, weak_from_this());
  std::lock_guard lk{mu_};
  if (fired_) {
    r_->untrack(this);
    return false;
  }
  h_ = h;
  if (deadline != std::chrono::steady_clock::time_point::max()) timer_ = r_->add_timer(deadline, weak_from_this());
  return true;
}

// ---- the session's runner --------------------------------------------------------------------------

std::shared_ptr<async_runner> runner_of(session& sess) {
  session_impl& s = impl_of(sess);
  std::lock_guard lk{s.runner_mu};
  if (!s.runner) {
    auto r = std::make_shared<async_runner>();
    r->start(r);
    s.runner = std::move(r);
  }
  return s.runner;
}

}  // namespace zklock::detail
