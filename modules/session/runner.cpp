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
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)

#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

// How a fiber switches: a few lines of assembly on x86-64, glibc's swapcontext elsewhere (or when
// ZKLOCK_FIBER_UCONTEXT is defined).
#if defined(__x86_64__) && !defined(ZKLOCK_FIBER_UCONTEXT)
#define ZKLOCK_FIBER_ASM 1
#else
#include <ucontext.h>
#endif

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#include <sanitizer/common_interface_defs.h>
#define ZKLOCK_FIBER_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#include <sanitizer/tsan_interface.h>
#define ZKLOCK_FIBER_TSAN 1
#endif
#endif
module zklock;
import :session_impl;

// What libstdc++ keeps per thread about the exceptions in flight (<cxxabi.h>'s __cxa_eh_globals):
// a fiber that parks inside a catch block, or while unwinding, and resumes on another thread takes
// its own along (run_fiber).
namespace __cxxabiv1 {
struct __cxa_eh_globals;
extern "C" __cxa_eh_globals* __cxa_get_globals() noexcept;
}  // namespace __cxxabiv1

#if ZKLOCK_FIBER_ASM
// The switch between a step thread's stack and a fiber's (x86-64, System V): saves the callee-saved
// registers and the SSE and x87 control words on the stack it leaves, stores that stack pointer in
// *from, and restores the same from `to`. (glibc's swapcontext also saves the signal mask, with a
// system call each way, and is intercepted by AddressSanitizer; a fiber needs neither.) A new
// fiber's first switch "returns" into zklock_fiber_start, which calls r13(r12) on an aligned stack.
extern "C" void zklock_fiber_switch(void** from, void* to) noexcept;
extern "C" void zklock_fiber_start() noexcept;
asm(R"(
  .text
  .globl zklock_fiber_switch
  .hidden zklock_fiber_switch
  .type zklock_fiber_switch,@function
  .p2align 4
zklock_fiber_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size zklock_fiber_switch, .-zklock_fiber_switch

  .globl zklock_fiber_start
  .hidden zklock_fiber_start
  .type zklock_fiber_start,@function
  .p2align 4
zklock_fiber_start:
  movq %r12, %rdi
  andq $-16, %rsp
  callq *%r13
  ud2
  .size zklock_fiber_start, .-zklock_fiber_start
)");
#endif

namespace zklock::detail {

// ---- fibers --------------------------------------------------------------------------------------

struct fiber {
  /// The mapping's size past its guard page: a step's frames are small (the algorithm's coroutine
  /// frames are on the heap), a sanitizer's are not; only the pages a step touches are resident.
  static constexpr std::size_t stack_size = 256 * 1024;

  // x86-64: its stack pointer while it is not running, and that of the thread that runs it, while
  // it runs; with swapcontext: its ucontext_t (in its mapping) and that thread's.
  void* sp = nullptr;
  void* back = nullptr;
  char* map = nullptr;              // its mapping: a guard page and the stack (the fiber is on the heap)
  std::size_t map_size = 0;
  char* stack = nullptr;            // the stack's lowest address
  std::size_t stack_size_ = 0;
  async_runner* runner = nullptr;
  std::function<void()> task;       // its step, while it has one
  bool task_done = false;           // it ended its step (set on the fiber, read by its thread)
  bool trimmed = false;             // its stack's pages given back while it had no step (idle_locked)
  std::atomic<bool> running{false}; // a thread runs it: a wake-up waits until it parked
  std::atomic<std::uint64_t> park{0};  // its park's ticket × 2, + 1 once woken
  struct eh_state {
    void* caught = nullptr;
    unsigned int uncaught = 0;
  } eh;                             // its exceptions in flight, while it is not running
#if ZKLOCK_FIBER_ASAN
  void* fake_stack = nullptr;
  const void* back_bottom = nullptr;
  std::size_t back_size = 0;
#endif
#if ZKLOCK_FIBER_TSAN
  void* tsan = nullptr;
  void* tsan_back = nullptr;
#endif
};

namespace {
// The runner whose thread this is (or whose step this thread runs), and whether it is its
// completion thread (on_runner_thread).
thread_local const async_runner* t_runner = nullptr;
thread_local bool t_completion = false;
thread_local fiber* t_fiber = nullptr;
thread_local bool t_steps_here = false;  // a steps_here lives on this thread
/// How many steps a fiber runs one after another before its thread looks at other work (run_fiber).
constexpr int max_chained = 8;

/// The calling thread's exceptions in flight. Not inlined (with a compiler barrier): a fiber may
/// resume on another thread, and the address of a thread's variable must not be kept across that.
[[gnu::noinline]] fiber::eh_state* eh_globals() noexcept {
  asm volatile("" ::: "memory");
  return reinterpret_cast<fiber::eh_state*>(__cxxabiv1::__cxa_get_globals());
}

[[gnu::noinline]] const async_runner* set_runner(const async_runner* r) noexcept {
  asm volatile("" ::: "memory");
  return std::exchange(t_runner, r);
}

[[gnu::noinline]] void set_this_fiber(fiber* f) noexcept {
  asm volatile("" ::: "memory");
  t_fiber = f;
}

/// Effects: leaves the fiber `f` for the step thread that runs it; returns once a step thread
/// resumes it (maybe another).
[[gnu::noinline]] void switch_out(fiber& f) noexcept {
  void* const to = f.back;
#if ZKLOCK_FIBER_ASAN
  __sanitizer_start_switch_fiber(&f.fake_stack, f.back_bottom, f.back_size);
#endif
#if ZKLOCK_FIBER_TSAN
  __tsan_switch_to_fiber(f.tsan_back, 0);
#endif
#if ZKLOCK_FIBER_ASM
  zklock_fiber_switch(&f.sp, to);
#else
  ::swapcontext(static_cast<ucontext_t*>(f.sp), static_cast<ucontext_t*>(to));
#endif
#if ZKLOCK_FIBER_ASAN
  __sanitizer_finish_switch_fiber(f.fake_stack, &f.back_bottom, &f.back_size);
#endif
}

/// The fiber's function: runs the steps it is given, one at a time, for ever.
void fiber_main(fiber* f) noexcept {
#if ZKLOCK_FIBER_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &f->back_bottom, &f->back_size);
#endif
  for (;;) {
    try {
      f->task();
    } catch (...) {  // a posted task's exception must not end the step thread
    }
    f->task = nullptr;
    f->task_done = true;
    switch_out(*f);
  }
}

#if !ZKLOCK_FIBER_ASM
/// makecontext's entry: the fiber's address in two halves.
void fiber_start(unsigned hi, unsigned lo) noexcept {
  fiber_main(reinterpret_cast<fiber*>(static_cast<std::uintptr_t>(hi) << 32 | static_cast<std::uintptr_t>(lo)));
}
#endif

#if ZKLOCK_FIBER_ASM
/// Effects: makes `f` start afresh at fiber_main on its next switch: what zklock_fiber_switch pops
/// on that switch, at the top of its stack: the control words (their defaults), r15, r14, r13 =
/// fiber_main, r12 = f, rbx, rbp, and the return address zklock_fiber_start.
void start_afresh(fiber& f) noexcept {
  auto* sp = reinterpret_cast<std::uintptr_t*>(reinterpret_cast<std::uintptr_t>(f.stack + f.stack_size_) &
                                               ~std::uintptr_t{15});
  *--sp = 0;
  *--sp = reinterpret_cast<std::uintptr_t>(&zklock_fiber_start);
  *--sp = 0;                                              // rbp
  *--sp = 0;                                              // rbx
  *--sp = reinterpret_cast<std::uintptr_t>(&f);           // r12
  *--sp = reinterpret_cast<std::uintptr_t>(&fiber_main);  // r13: never returns
  *--sp = 0;                                              // r14
  *--sp = 0;                                              // r15
  *--sp = std::uintptr_t{0x037f} << 32 | 0x1f80;          // x87 control word, MXCSR
  f.sp = sp;
}
#endif

/// Returns: a new fiber of `r`: a mapping holds its guard page and its stack (with swapcontext, its
/// ucontext_t at the top); the fiber itself is on the heap, so that a fiber without a step can give
/// its stack's pages back (idle_locked) and stay what wakers and timers point to. Throws:
/// std::bad_alloc if it cannot be mapped.
fiber* make_fiber(async_runner* r) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  const std::size_t size = page + fiber::stack_size;
  void* m = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc{};
  char* const map = static_cast<char*>(m);
  ::mprotect(map, page, PROT_NONE);  // a guard: a step that overflows its stack faults
  fiber* f;
  try {
    f = new fiber;
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
#if ZKLOCK_FIBER_ASM
  constexpr std::size_t context = 0;
#else
  constexpr std::size_t context = (sizeof(ucontext_t) + 63) & ~std::size_t{63};  // at the top
#endif
  const auto top = ((reinterpret_cast<std::uintptr_t>(map + size)) & ~std::uintptr_t{63}) - context;
  f->map = map;
  f->map_size = size;
  f->stack = map + page;
  f->stack_size_ = static_cast<std::size_t>(reinterpret_cast<char*>(top) - f->stack);
  f->runner = r;
#if ZKLOCK_FIBER_ASM
  start_afresh(*f);
#else
  auto* uc = ::new (reinterpret_cast<void*>(top)) ucontext_t{};
  if (::getcontext(uc) != 0) {
    delete f;
    ::munmap(map, size);
    throw std::bad_alloc{};
  }
  uc->uc_stack.ss_sp = f->stack;
  uc->uc_stack.ss_size = f->stack_size_;
  uc->uc_link = nullptr;  // fiber_main never returns
  const auto bits = reinterpret_cast<std::uintptr_t>(f);
  ::makecontext(uc, reinterpret_cast<void (*)()>(&fiber_start), 2, static_cast<unsigned>(bits >> 32),
                static_cast<unsigned>(bits & 0xffffffffu));
  f->sp = uc;
#endif
#if ZKLOCK_FIBER_TSAN
  f->tsan = __tsan_create_fiber(0);
#endif
  return f;
}

void free_fiber(fiber* f) noexcept {
#if ZKLOCK_FIBER_TSAN
  __tsan_destroy_fiber(f->tsan);
#endif
  ::munmap(f->map, f->map_size);
  delete f;
}

/// How many fibers without a step keep their stacks' pages (the most recently used: the next steps
/// take them), once no step is under way or waits for one; the others give theirs back (idle_locked). A burst of
/// steps makes up to max_fibers fibers, one page resident each, for the session's life otherwise.
/// Only on x86-64 without a sanitizer: a fiber that starts afresh abandons its old frames, which
/// AddressSanitizer's and ThreadSanitizer's bookkeeping of a fiber's stack would not follow.
#if ZKLOCK_FIBER_ASM && !ZKLOCK_FIBER_ASAN && !ZKLOCK_FIBER_TSAN
constexpr std::size_t keep_idle_fibers = 16;
#else
constexpr std::size_t keep_idle_fibers = std::size_t(-1);
#endif

}  // namespace

fiber* this_fiber() noexcept {
  asm volatile("" ::: "memory");
  return t_fiber;
}

std::uint64_t fiber_ticket(fiber& f) noexcept {
  // Only the fiber itself moves to a new ticket; a waker only marks the current one woken.
  const std::uint64_t next = (f.park.load(std::memory_order_relaxed) >> 1) + 1;
  f.park.store(next << 1, std::memory_order_release);
  return next;
}

void fiber_wake(fiber& f, std::uint64_t ticket, bool here) noexcept {
  std::uint64_t expect = ticket << 1;
  if (!f.park.compare_exchange_strong(expect, expect | 1, std::memory_order_acq_rel)) return;
  if (here && !this_fiber()) f.runner->run_fiber(&f);
  else f.runner->post_ready(&f);
}

void fiber_park(fiber& f, std::uint64_t ticket, std::chrono::steady_clock::time_point until) {
  if (until != std::chrono::steady_clock::time_point::max()) f.runner->add_fiber_timer(until, &f, ticket);
  switch_out(f);
}

bool on_a_runner_thread() noexcept {
  // A step (on a fiber) is not counted: its waits park the fiber, not the thread.
  return !this_fiber() && t_runner != nullptr;  // (this_fiber's barrier: it may have moved threads)
}

steps_here::steps_here() noexcept : was_(std::exchange(t_steps_here, true)) {}

steps_here::~steps_here() { t_steps_here = was_; }

bool async_runner::enter(fiber* f) noexcept {
  // A fiber woken while still parking is resumed once its old thread has left it.
  while (f->running.load(std::memory_order_acquire)) std::this_thread::yield();
  f->running.store(true, std::memory_order_relaxed);
#if ZKLOCK_FIBER_ASM
  if (f->trimmed) {  // its stack's pages were given back while it had no step (idle_locked)
    start_afresh(*f);
    f->trimmed = false;
  }
#endif
  fiber::eh_state* eh = eh_globals();
  const fiber::eh_state mine = *eh;
  *eh = f->eh;
  set_this_fiber(f);
  const async_runner* const was = set_runner(this);  // a step is on its runner, wherever it runs
  void* const to = f->sp;
  void** const back = &f->back;
#if !ZKLOCK_FIBER_ASM
  ucontext_t here;  // this thread's, while the fiber runs
  *back = &here;
#endif
#if ZKLOCK_FIBER_TSAN
  f->tsan_back = __tsan_get_current_fiber();
  __tsan_switch_to_fiber(f->tsan, 0);
#endif
#if ZKLOCK_FIBER_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, f->stack, f->stack_size_);
#endif
#if ZKLOCK_FIBER_ASM
  zklock_fiber_switch(back, to);
#else
  ::swapcontext(&here, static_cast<ucontext_t*>(to));
#endif
#if ZKLOCK_FIBER_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  set_this_fiber(nullptr);
  set_runner(was);
  eh = eh_globals();
  f->eh = *eh;
  *eh = mine;
  const bool done = f->task_done;
  f->task_done = false;
  return done;
}

void async_runner::run_fiber(fiber* f) noexcept {
  // A fiber whose step ends here takes a step waiting for a fiber next, on this thread (no step
  // thread is woken for it), a few at most: this may be the session's I/O loop thread.
  for (int chained = 0; enter(f); ++chained) {
    f->running.store(false, std::memory_order_relaxed);
    bool wanted;
    {
      std::lock_guard lk{mu_};
      if (!stopping_ && !tasks_.empty() && ready_.empty() && chained < max_chained) {
        f->task = std::move(tasks_.front());
        tasks_.pop_front();
        continue;
      }
      idle_locked(f);
      wanted = !tasks_.empty() && idle_ != 0;  // a step waits for a fiber (max_fibers)
    }
    if (wanted) cv_.notify_one();
    return;
  }
  f->running.store(false, std::memory_order_release);  // from here a wake-up may resume it anywhere
}

void async_runner::resume_here(std::coroutine_handle<> h) {
  fiber* f = nullptr;
  if (t_steps_here && !this_fiber()) {
    std::lock_guard lk{mu_};
    if (!stopping_ && tasks_.empty()) f = take_free_locked();
  }
  if (!f) return post(h);
  try {
    f->task = [h] { h.resume(); };
  } catch (...) {
    {
      std::lock_guard lk{mu_};
      idle_locked(f);
    }
    throw;
  }
  run_fiber(f);
}

void async_runner::idle_locked(fiber* f) noexcept {
  free_fibers_.push_back(f);  // (reserved: see run_steps)
  if (f->trimmed) {  // never entered since it gave its pages back (resume_here's failure): not last
    std::swap(free_fibers_[trimmed_], free_fibers_.back());
    ++trimmed_;
  }
  // Once no step is under way or waits for a fiber (not while a burst goes on, where a fiber given
  // back would soon be taken again, at the cost of a page fault): the least recently used fibers
  // beyond keep_idle_fibers that still have their pages give them back. Nothing on their stacks is
  // needed (their steps ended), and the next step of each starts it afresh (enter). They stay:
  // wakers and timers that still point to one (with an old ticket) find it, and ignore it.
  if (!tasks_.empty() || free_fibers_.size() != fibers_.size()) return;
  while (free_fibers_.size() - trimmed_ > keep_idle_fibers) {
    fiber& cold = *free_fibers_[trimmed_++];
    ::madvise(cold.stack, static_cast<std::size_t>(cold.map + cold.map_size - cold.stack), MADV_DONTNEED);
    cold.trimmed = true;
  }
}

fiber* async_runner::take_free_locked() noexcept {
  if (free_fibers_.empty()) return nullptr;
  fiber* const f = free_fibers_.back();
  free_fibers_.pop_back();
  if (trimmed_ > free_fibers_.size()) trimmed_ = free_fibers_.size();  // it was the last trimmed one
  return f;
}

void async_runner::post_ready(fiber* f) noexcept {
  bool spawn;
  {
    std::lock_guard lk{mu_};
    try {
      ready_.push_back(f);
    } catch (...) {  // nothing else would ever resume it
      std::terminate();
    }
    spawn = !stopping_ && ready_.size() > idle_ + starting_ && steps_.size() + starting_ < max_step_threads;
    if (spawn) ++starting_;
  }
  cv_.notify_one();
  add_step_thread(spawn);
}

void async_runner::add_fiber_timer(clock::time_point at, fiber* f, std::uint64_t ticket) {
  // Rounded up to a tick: one wake-up of the timer thread per tick at most, however many fibers
  // park (every request of a step arms one: the reply's "late" check). A timer is not cancelled: a
  // fiber woken otherwise has moved to another ticket when it fires.
  constexpr auto tick = std::chrono::milliseconds{10};
  const auto since = at.time_since_epoch();
  at = clock::time_point{(since + tick - clock::duration{1}) / tick * tick};
  bool first;
  {
    std::lock_guard lk{mu_};
    auto [it, added] = fiber_timers_.try_emplace(at);
    it->second.emplace_back(f, ticket);
    first = added && it == fiber_timers_.begin() && (timers_.empty() || at < timers_.begin()->first.first);
  }
  if (first) timer_cv_.notify_one();
}

// ---- the runner --------------------------------------------------------------------------------

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

async_runner::~async_runner() {
  stop();
  for (fiber* f : fibers_) free_fiber(f);  // a step parked for ever keeps what its stack held
}

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
    // (a waiter whose last owner lets go now waits in its destructor for mu_ to unlink it: lock() skips it)
    for (resume_waiter* w = suspended_; w; w = w->next_)
      if (auto s = w->weak_from_this().lock()) wake.push_back(std::move(s));
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

void async_runner::track(resume_waiter* w) noexcept {
  std::lock_guard lk{mu_};
  if (w->tracked_) return;
  w->tracked_ = true;
  w->prev_ = nullptr;
  w->next_ = suspended_;
  if (suspended_) suspended_->prev_ = w;
  suspended_ = w;
}

void async_runner::untrack(resume_waiter* w) noexcept {
  std::lock_guard lk{mu_};
  if (!w->tracked_) return;
  w->tracked_ = false;
  (w->prev_ ? w->prev_->next_ : suspended_) = w->next_;
  if (w->next_) w->next_->prev_ = w->prev_;
  w->prev_ = w->next_ = nullptr;
}

void async_runner::run_steps() {
  ::pthread_setname_np(::pthread_self(), "zklock-step");  // for ps, top, perf and gdb
  t_runner = this;
  std::unique_lock lk{mu_};
  --starting_;
  const auto may_start = [&] {
    return !tasks_.empty() && (!free_fibers_.empty() || fibers_.size() + making_fibers_ < max_fibers);
  };
  for (;;) {
    ++idle_;
    cv_.wait(lk, [&] { return stopping_ || !ready_.empty() || may_start(); });
    --idle_;
    if (stopping_) return;
    fiber* f = nullptr;
    if (!ready_.empty()) {  // a step under way first: it frees its fiber sooner
      f = ready_.front();
      ready_.pop_front();
    } else {
      if (!(f = take_free_locked())) {
        ++making_fibers_;
        lk.unlock();
        try {
          f = make_fiber(this);
        } catch (...) {  // no memory for a stack: the step waits for a fiber to come free
        }
        lk.lock();
        --making_fibers_;
        if (!f) continue;
        try {
          fibers_.push_back(f);
          // so that idle_locked never allocates (growing as fibers_ grows, not by one each time)
          if (free_fibers_.capacity() < fibers_.size()) free_fibers_.reserve(fibers_.capacity());
        } catch (...) {
          if (fibers_.back() == f) fibers_.pop_back();
          free_fiber(f);
          continue;
        }
        if (tasks_.empty()) {  // another thread took the step meanwhile
          idle_locked(f);
          continue;
        }
      }
      f->task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    lk.unlock();
    run_fiber(f);  // until its step ends or waits for a reply: then this thread takes the next
    lk.lock();
  }
}

void async_runner::run_timers() {
  ::pthread_setname_np(::pthread_self(), "zklock-timer");
  t_runner = this;
  std::unique_lock lk{mu_};
  for (;;) {
    if (stopping_) return;
    // a wait that timed out resumes in deadline order (its acquire's step runs on a step thread)
    std::vector<std::shared_ptr<resume_waiter>> due;
    std::vector<std::pair<fiber*, std::uint64_t>> parked;
    const auto now = clock::now();
    while (!timers_.empty() && timers_.begin()->first.first <= now) {
      if (auto w = timers_.begin()->second.lock()) due.push_back(std::move(w));
      timers_.erase(timers_.begin());
    }
    while (!fiber_timers_.empty() && fiber_timers_.begin()->first <= now) {
      auto& bucket = fiber_timers_.begin()->second;
      parked.insert(parked.end(), bucket.begin(), bucket.end());
      fiber_timers_.erase(fiber_timers_.begin());
    }
    if (!due.empty() || !parked.empty()) {
      lk.unlock();
      for (auto& w : due) w->expire();
      for (auto [f, ticket] : parked) fiber_wake(*f, ticket);  // fibers live as long as the runner
      due.clear();
      lk.lock();
      continue;
    }
    if (timers_.empty() && fiber_timers_.empty()) {
      timer_cv_.wait(lk);
    } else {
      // copies: the timers may go meanwhile
      clock::time_point until = clock::time_point::max();
      if (!timers_.empty()) until = timers_.begin()->first.first;
      if (!fiber_timers_.empty() && fiber_timers_.begin()->first < until) until = fiber_timers_.begin()->first;
      timer_cv_.wait_until(lk, until);
    }
  }
}

void async_runner::run_completions() {
  ::pthread_setname_np(::pthread_self(), "zklock-done");
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

resume_waiter::~resume_waiter() { r_->untrack(this); }

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
    r_->resume_here(h);  // at once on a watch's callback (steps_here), else on a step thread
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
  r_->track(this);
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
