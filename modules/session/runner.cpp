// SPDX-License-Identifier: Apache-2.0
// The runner of a session's asynchronous acquires (zklock:step): its step threads (posted
// coroutine resumptions and tasks, several at once), its timer thread (the waits' deadlines), its
// completion thread, the
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

namespace {
// The runner whose thread this is, and whether it is its completion thread (on_runner_thread).
thread_local const async_runner* t_runner = nullptr;
thread_local bool t_completion = false;
}  // namespace

async_runner::async_runner() = default;

void async_runner::start(const std::shared_ptr<async_runner>& self) {
  // Each thread keeps the runner alive until it ends: a runner stopped from one of its own threads
  // (a completion that closes the session) is destroyed by that thread, after its loop is over.
  self_ = self;
  try {
    timer_ = std::thread([self] { self->run_timers(); });
    completion_ = std::thread([self] { self->run_completions(); });
    {
      std::lock_guard lk{mu_};
      ++starting_;
    }
    steps_.emplace_back([self] { self->run_steps(); });
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
  bool spawn;
  {
    std::lock_guard lk{mu_};
    tasks_.push_back(std::move(f));
    // Every idle or starting thread takes one task: start another only for a task none will take.
    spawn = !stopping_ && tasks_.size() > idle_ + starting_ && steps_.size() + starting_ < max_step_threads;
    if (spawn) ++starting_;
  }
  cv_.notify_one();
  add_step_thread(spawn);
}

void async_runner::add_step_thread(bool spawn) noexcept {
  if (!spawn) return;
  const auto self = self_.lock();
  std::unique_lock lk{mu_};
  if (self && !stopping_) {
    try {
      steps_.emplace_back([self] { self->run_steps(); });
      return;  // run_steps counts it started
    } catch (...) {  // no thread: the running ones take the task later
    }
  }
  --starting_;
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

bool async_runner::on_runner_thread() const noexcept { return t_runner == this; }

bool async_runner::on_completion_thread() const noexcept { return t_runner == this && t_completion; }

std::size_t async_runner::step_threads() const noexcept {
  std::lock_guard lk{mu_};
  return steps_.size();
}

void async_runner::drain() noexcept {
  std::vector<std::shared_ptr<resume_waiter>> wake;
  {
    std::lock_guard lk{mu_};
    for (auto& [p, w] : suspended_)
      if (auto s = w.lock()) wake.push_back(std::move(s));
  }
  for (auto& w : wake) w->wake();
  if (on_runner_thread() && !on_completion_thread()) return;  // a step: nothing can be waited for
  {
    std::unique_lock lk{mu_};
    done_cv_.wait(lk, [&] { return unfinished_ == 0 || stopping_; });
  }
  if (!on_completion_thread()) flush_completions();
}

void async_runner::flush_completions() noexcept {
  if (on_runner_thread()) return;
  std::unique_lock lk{mu_};
  const std::uint64_t ticket = queued_seq_;
  done_cv_.wait(lk, [&] { return run_seq_ >= ticket || stopping_; });
}

void async_runner::stop() noexcept {
  std::vector<std::thread> threads;
  {
    std::lock_guard lk{mu_};
    stopping_ = true;
    threads = std::move(steps_);
    steps_.clear();
    if (timer_.joinable()) threads.push_back(std::move(timer_));
    if (completion_.joinable()) threads.push_back(std::move(completion_));
  }
  cv_.notify_all();
  timer_cv_.notify_all();
  comp_cv_.notify_all();
  done_cv_.notify_all();
  for (std::thread& t : threads) {
    if (!t.joinable()) continue;
    if (t.get_id() == std::this_thread::get_id())
      t.detach();  // the last owner let go on this very thread: it ends by itself
    else
      t.join();
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
  if (first) timer_cv_.notify_one();  // the timer thread sleeps until the earliest deadline
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

void async_runner::run_steps() {
  t_runner = this;
  std::unique_lock lk{mu_};
  --starting_;
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stopping_ || !tasks_.empty(); });
    --idle_;
    if (stopping_) return;
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    lk.unlock();
    task();  // a step of an acquire: its requests hold this thread for their round trips
    task = nullptr;
    lk.lock();
  }
}

void async_runner::run_timers() {
  t_runner = this;
  std::unique_lock lk{mu_};
  for (;;) {
    if (stopping_) return;
    // a wait that timed out resumes in deadline order (its acquire's step runs on a step thread)
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
    if (timers_.empty()) {
      timer_cv_.wait(lk);
    } else {
      const clock::time_point until = timers_.begin()->first.first;  // a copy: the timer may go meanwhile
      timer_cv_.wait_until(lk, until);
    }
  }
}

void async_runner::run_completions() {
  t_runner = this;
  t_completion = true;
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

// ---- the order of the creates ------------------------------------------------------------------

std::uint64_t send_order::take(const std::string& path) {
  std::lock_guard lk{mu_};
  auto it = lines_.find(path);
  if (it == lines_.end()) it = lines_.emplace(path, line{}).first;
  return it->second.next++;
}

bool send_order::my_turn(const std::string& path, std::uint64_t ticket, const std::shared_ptr<wake_target>& w) {
  std::lock_guard lk{mu_};
  const auto it = lines_.find(path);
  if (it == lines_.end() || it->second.serving >= ticket) return true;
  if (w) it->second.waiting[ticket] = w;
  return false;
}

void send_order::done(const std::string& path, std::uint64_t ticket) noexcept {
  std::shared_ptr<wake_target> next;
  {
    std::lock_guard lk{mu_};
    const auto it = lines_.find(path);
    if (it == lines_.end()) return;
    line& l = it->second;
    l.waiting.erase(ticket);
    if (ticket != l.serving) {
      if (ticket > l.serving) l.finished.insert(ticket);  // ahead of its turn (stopped, failed)
      return;
    }
    ++l.serving;
    while (!l.finished.empty() && *l.finished.begin() == l.serving) {
      l.finished.erase(l.finished.begin());
      ++l.serving;
    }
    if (l.serving == l.next) {
      lines_.erase(it);  // every ticket given is done
      return;
    }
    const auto w = l.waiting.find(l.serving);
    if (w != l.waiting.end()) {
      next = std::move(w->second);
      l.waiting.erase(w);
    }
  }
  if (next) next->wake();
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
