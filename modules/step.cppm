// SPDX-License-Identifier: Apache-2.0
// zklock:step — how the one algorithm waits without owning the thread it runs on.
//
// The algorithm (zklock:algorithm) is written once, as C++20 coroutines of the type step<T>. Its
// ZooKeeper requests are ordinary calls; its waits for a watch are `co_await`s. What a wait does
// depends on the wake-up model the algorithm is instantiated with:
//   - a blocking model (wake_condition_variable, wake_latch: the bundle's wakeup axis) blocks the
//     calling thread inside the co_await, so the coroutine never suspends: lock() runs the whole
//     algorithm on its own thread, as a plain call (step::run);
//   - wake_resume suspends the coroutine instead: the watch, the deadline or a stop request
//     resumes it on the session's runner thread. That is how the asynchronous acquires
//     (zklock:async) wait: a thousand waiting acquires are a thousand suspended coroutine frames,
//     not a thousand threads.
// The runner of a session, started by its first asynchronous acquire, has three kinds of thread:
// its step threads (run the asynchronous acquires' steps, each on a fiber of its own: a step whose
// request waits for its reply, or for a reconnection, parks the fiber and the thread takes the next
// step, so the steps of several acquires keep their requests in flight together on a few threads),
// its timer thread (resumes the waits whose deadline passed, and parked fibers whose timer is due;
// never runs a step) and its completion thread (runs completions that have no executor of their
// own). A step thread is started when a step is posted and none is idle, up to max_step_threads;
// they end with the runner. A reply resumes its parked step on the session's I/O loop thread (which
// runs the ZooKeeper client and its completions), until the step parks again or ends (as a bare client's callback sends its next request
// there); a watch resumes its acquire there too, on a free fiber; and a fiber whose step ended there
// takes the next step waiting for a fiber at once. So a step costs no thread switch of its own while
// replies and watch events come; a step thread takes what the completion thread cannot (a step
// posted from elsewhere, no free fiber, a timer's wake-up).
module;
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>
export module zklock:step;
import :session;
import :wakeup;
import :operations;

// Outside any `export`: reachable by the lock templates wherever they are instantiated, never
// visible to `import zklock;`.
namespace zklock::detail {

/// A lazily started coroutine of the algorithm returning T: awaited by its caller (which it resumes
/// when done, by symmetric transfer), or run to its end on the calling thread (step::run).
template <class T>
class [[nodiscard]] step {
 public:
  struct promise_type {
    std::optional<T> value;
    std::exception_ptr error;
    std::coroutine_handle<> continuation;
    void (*on_done)(std::coroutine_handle<promise_type>, void*) noexcept = nullptr;  // see detach
    void* done_context = nullptr;

    step get_return_object() noexcept { return step{std::coroutine_handle<promise_type>::from_promise(*this)}; }
    std::suspend_always initial_suspend() noexcept { return {}; }
    struct final_awaiter {
      bool await_ready() noexcept { return false; }
      std::coroutine_handle<> await_suspend(std::coroutine_handle<promise_type> h) noexcept {
        auto& p = h.promise();
        if (p.continuation) return p.continuation;
        if (p.on_done) p.on_done(h, p.done_context);  // takes the result and destroys the frame
        return std::noop_coroutine();
      }
      void await_resume() noexcept {}
    };
    final_awaiter final_suspend() noexcept { return {}; }
    template <class U>
    void return_value(U&& v) {
      value.emplace(std::forward<U>(v));
    }
    void unhandled_exception() noexcept { error = std::current_exception(); }
  };

  step(step&& o) noexcept : h_(std::exchange(o.h_, {})) {}
  step& operator=(step&&) = delete;
  /// Effects: destroys the coroutine's frame (and so everything it still owns).
  ~step() {
    if (h_) h_.destroy();
  }

  bool await_ready() const noexcept { return false; }
  std::coroutine_handle<> await_suspend(std::coroutine_handle<> caller) noexcept {
    h_.promise().continuation = caller;
    return h_;
  }
  /// Returns: the coroutine's result. Throws: what the coroutine threw.
  T await_resume() {
    if (h_.promise().error) std::rethrow_exception(h_.promise().error);
    return std::move(*h_.promise().value);
  }

  /// Effects: gives the coroutine up to run on its own: when it ends, it calls
  /// `done(handle, context)`, which must take its result (promise().value or .error) and destroy
  /// it. Returns: its handle, to resume once to start it.
  std::coroutine_handle<> detach(void (*done)(std::coroutine_handle<promise_type>, void*) noexcept,
                                 void* context) && noexcept {
    h_.promise().on_done = done;
    h_.promise().done_context = context;
    return std::exchange(h_, {});
  }

  /// Effects: runs the coroutine to its end on this thread (it must never suspend: every wait of a
  /// blocking wake-up model blocks instead). Returns, Throws: as await_resume.
  T run() {
    h_.resume();
    if (!h_.done()) std::terminate();  // a blocking model suspended: a bug, not a condition
    return await_resume();
  }

 private:
  explicit step(std::coroutine_handle<promise_type> h) noexcept : h_(h) {}
  std::coroutine_handle<promise_type> h_;
};

class resume_waiter;
class async_runner;

// ---- fibers: where a step waits for its replies ------------------------------------------------
// A step of an asynchronous acquire runs on a fiber: a small stack of its own, run by a step thread.
// When its request's reply is outstanding (session_impl::await_reply) or its session is not
// connected (state_machine::wait_connected), the fiber parks: the step thread takes the next step,
// and the reply's completion (or a timer) makes the fiber ready again, to be resumed by whichever
// step thread is free. So a session's steps keep all their requests in flight together on a few
// threads, and a reply costs no thread switch of its own while the step threads are busy. The
// blocking calls (lock() on the caller's thread) never run on a fiber. Defined in runner.cpp.
struct fiber;

/// Returns: the fiber this thread is running (a step), or nullptr (any other thread).
fiber* this_fiber() noexcept;
/// Returns: the ticket of the fiber's next park (fiber_park); a wake-up for an older one is ignored.
std::uint64_t fiber_ticket(fiber& f) noexcept;
/// Effects: makes `f` ready again if `ticket` is its current park's and nothing woke it yet (once
/// per ticket; it may not have parked yet: it is resumed once it has): resumes it on this thread
/// if `here` (until it parks again or ends its step: the session's I/O loop takes a
/// reply's step at once, as a bare client's callback would), else queues it for a step thread.
/// Thread-safe; never throws.
void fiber_wake(fiber& f, std::uint64_t ticket, bool here = false) noexcept;
/// Effects: on `f` (this_fiber()): parks it until fiber_wake(f, ticket), or until `until`
/// (time_point::max(): no timer). Returns on the step thread that resumes it.
void fiber_park(fiber& f, std::uint64_t ticket, std::chrono::steady_clock::time_point until);

/// Returns: whether the caller runs on a thread of any session's runner outside a step (a
/// completion given no executor of its own), where nothing should wait for a round trip.
bool on_a_runner_thread() noexcept;

/// While one lives on a thread that runs no fiber, a wait resumed there (resume_waiter::wake) runs
/// its step at once on this thread, on a free fiber, instead of queueing it for a step thread. For
/// the session's I/O loop thread, in a watch's callback. Not copyable.
class steps_here {
 public:
  steps_here() noexcept;
  ~steps_here();
  steps_here(const steps_here&) = delete;
  steps_here& operator=(const steps_here&) = delete;

 private:
  bool was_;
};

/// The order in which a session's asynchronous acquires of one lock path send their creates: the
/// order they were started in (so a lock object's acquires queue as they were called), while
/// everything else they send, and the acquires of other paths, go at once. Thread-safe.
class send_order {
 public:
  /// Returns: the next ticket of `path` (the order of the calls).
  std::uint64_t take(const std::string& path);
  /// Returns: whether every earlier ticket of `path` is done (sent its create, or gave up); if not,
  /// `w` is woken once they are.
  bool my_turn(const std::string& path, std::uint64_t ticket, const std::shared_ptr<wake_target>& w);
  /// Effects: `ticket` of `path` is done; wakes the next one's waiter when its turn comes. Never throws.
  void done(const std::string& path, std::uint64_t ticket) noexcept;

 private:
  struct line {
    std::uint64_t next = 0;                 // the next ticket to give
    std::uint64_t serving = 0;              // every ticket below it is done
    std::set<std::uint64_t> finished;       // done, above `serving`
    std::map<std::uint64_t, std::shared_ptr<wake_target>> waiting;
  };
  std::mutex mu_;
  std::map<std::string, line, std::less<>> lines_;  // a line goes once every ticket is done
};

/// The threads that run a session's asynchronous acquires (see the banner). Thread-safe.
class async_runner {
 public:
  using clock = std::chrono::steady_clock;
  /// How many step threads it may start: a step waits for its replies parked on its fiber, not
  /// holding a thread; more threads than cores only cover a step blocked in a user's hook.
  static constexpr std::size_t max_step_threads = 4;
  /// How many steps may be under way at once (each on a fiber with its own stack); later ones wait.
  static constexpr std::size_t max_fibers = 256;
  /// Effects: a runner without threads yet (start() starts them).
  async_runner();
  /// Effects: stop(). Never throws.
  ~async_runner();
  /// Effects: starts the timer and completion threads and one step thread, which keep `self` (this
  /// runner) alive until they end (after stop()). Throws: std::system_error if a thread cannot be
  /// started.
  void start(const std::shared_ptr<async_runner>& self);
  async_runner(const async_runner&) = delete;
  async_runner& operator=(const async_runner&) = delete;

  /// Effects: resumes `h` (or runs `f`) on a fiber of a step thread (starting one if none is idle
  /// and fewer than max_step_threads run). Posts start in the order posted, several at once.
  void post(std::coroutine_handle<> h);
  void post(std::function<void()> f);
  /// Effects: as post(h), but runs `h` at once on this thread (on a free fiber, until it parks or
  /// ends) when a steps_here lives on it, no fiber runs here and no step waits for a fiber.
  void resume_here(std::coroutine_handle<> h);
  /// Effects: runs `f` on `ex` if given, else on the completion thread; then counts one acquire
  /// finished (begin_acquire). Never throws once `f` is handed over.
  void complete(const std::function<void(std::function<void()>)>& ex, std::function<void()> f);

  /// Effects: counts an acquire started (it ends with complete()).
  void begin_acquire();
  /// Effects: counts an acquire finished without a completion (it could not be posted).
  void end_acquire() noexcept;

  /// Effects: wakes every suspended wait (their acquires then see the closed session), and waits
  /// until every acquire started has handed its completion over and, unless called from the
  /// completion thread, until those of the completion thread have run. From a step thread it
  /// waits for nothing. Never throws.
  void drain() noexcept;
  /// Effects: waits until every completion queued for the completion thread so far has run
  /// (returns at once on one of the runner's threads). Never throws.
  void flush_completions() noexcept;
  /// Returns: whether the caller runs on one of this runner's threads.
  bool on_runner_thread() const noexcept;
  /// Returns: whether the caller runs on its completion thread.
  bool on_completion_thread() const noexcept;
  /// Returns: how many step threads it has started (for tests and benchmarks).
  std::size_t step_threads() const noexcept;
  /// Returns: the order of its acquires' creates, per lock path.
  send_order& order() noexcept { return order_; }

  /// Effects: stops and joins the threads (detaches a thread that calls it); pending work is
  /// dropped. Idempotent. Never throws.
  void stop() noexcept;

 private:
  friend class resume_waiter;
  friend void fiber_wake(fiber& f, std::uint64_t ticket, bool here) noexcept;
  friend void fiber_park(fiber& f, std::uint64_t ticket, std::chrono::steady_clock::time_point until);
  /// Effects: queues the parked (or parking) fiber `f` to be resumed by a step thread. Never throws.
  void post_ready(fiber* f) noexcept;
  /// Effects: fiber_wake(f, ticket) at `at` (by the timer thread).
  void add_fiber_timer(clock::time_point at, fiber* f, std::uint64_t ticket);
  /// Effects: runs `f` on this thread until it parks or ends its step (mu_ not held); when its step
  /// ends and a step waits for a fiber (and no woken one for a step thread), runs that one on it
  /// next, a few times at most.
  void run_fiber(fiber* f) noexcept;
  /// Effects: runs `f` on this thread until it parks or ends its step. Returns: whether it ended it.
  bool enter(fiber* f) noexcept;
  /// Effects: `f` (whose step ended) joins the fibers without a step; once no step is under way or
  /// waits for a fiber, the least recently used of those beyond a few give their stacks' pages
  /// back. mu_ held. Never throws (free_fibers_ has room: it never outgrows fibers_).
  void idle_locked(fiber* f) noexcept;
  /// Returns: a fiber without a step (the most recently used), or nullptr. mu_ held.
  fiber* take_free_locked() noexcept;
  using timer_key = std::pair<clock::time_point, std::uint64_t>;
  timer_key add_timer(clock::time_point at, std::weak_ptr<resume_waiter> w);
  void cancel_timer(const timer_key& k) noexcept;
  /// Effects: links `w` into the suspended waits (drain wakes them); untrack unlinks it (if linked).
  void track(resume_waiter* w) noexcept;
  void untrack(resume_waiter* w) noexcept;
  /// Effects: starts one more step thread if `spawn` says so (mu_ not held). Never throws.
  void add_step_thread(bool spawn) noexcept;
  void run_steps();
  void run_timers();
  void run_completions();

  mutable std::mutex mu_;
  std::condition_variable cv_;       // the step threads'
  std::condition_variable timer_cv_; // the timer thread's
  std::condition_variable done_cv_;  // drain and flush waiters'
  std::condition_variable comp_cv_;  // the completion thread's
  std::deque<std::function<void()>> tasks_;  // steps not started yet
  std::deque<fiber*> ready_;                 // parked steps woken, to resume (before new ones)
  std::vector<fiber*> fibers_;               // every fiber made (freed with the runner)
  std::vector<fiber*> free_fibers_;          // of which have no step (the most recently used last)
  std::size_t trimmed_ = 0;                  // free_fibers_[0, trimmed_) gave their stacks' pages back
  std::size_t making_fibers_ = 0;            // being made (they count against max_fibers)
  std::map<clock::time_point, std::vector<std::pair<fiber*, std::uint64_t>>> fiber_timers_;  // by tick
  std::deque<std::function<void()>> completions_;
  std::map<timer_key, std::weak_ptr<resume_waiter>> timers_;
  resume_waiter* suspended_ = nullptr;  // the suspended waits, linked through their own fields (no node of ours each)
  std::uint64_t next_timer_ = 1;
  std::uint64_t unfinished_ = 0;      // acquires begun whose completion was not handed over yet
  std::uint64_t queued_seq_ = 0;      // completions queued for the completion thread
  std::uint64_t run_seq_ = 0;         // of which have run
  std::size_t idle_ = 0;              // step threads waiting for a task
  std::size_t starting_ = 0;          // step threads being started
  bool stopping_ = false;
  std::weak_ptr<async_runner> self_;  // what a new step thread keeps alive
  send_order order_;
  std::vector<std::thread> steps_;
  std::thread timer_;
  std::thread completion_;
};

class resume_waiter final : public wake_target, public std::enable_shared_from_this<resume_waiter> {
 public:
  /// Effects: a waiter whose acquire runs on `r`.
  explicit resume_waiter(std::shared_ptr<async_runner> r) noexcept : r_(std::move(r)) {}
  /// Effects: leaves the runner's suspended waits, if in them. Never throws.
  ~resume_waiter();
  resume_waiter(const resume_waiter&) = delete;
  resume_waiter& operator=(const resume_waiter&) = delete;
  /// Effects: marks it woken; resumes the suspended acquire, if any. Never throws.
  void wake() noexcept override;
  /// Effects: suspends the acquire `h` until a wake-up or `deadline` (time_point::max(): none).
  /// Returns: false if it was woken already (then `h` must not suspend).
  bool suspend(std::coroutine_handle<> h, std::chrono::steady_clock::time_point deadline);
  /// Returns: whether it was woken (not just timed out).
  bool woke() const noexcept {
    std::lock_guard lk{mu_};
    return fired_;
  }

 private:
  friend class async_runner;
  /// Effects: the deadline passed: resumes the acquire unless it was resumed already.
  void expire() noexcept;
  std::shared_ptr<async_runner> r_;
  mutable small_lock mu_;
  std::coroutine_handle<> h_;
  bool fired_ = false;
  bool resumed_ = false;
  std::optional<async_runner::timer_key> timer_;
  // its links in the runner's suspended waits (guarded by the runner's mu_)
  resume_waiter* prev_ = nullptr;
  resume_waiter* next_ = nullptr;
  bool tracked_ = false;
};

/// The asynchronous wake-up model (see the banner and zklock:wakeup): waits suspend the acquire.
struct wake_resume {
  static constexpr bool fresh_per_wait = true;
  static constexpr bool resumes = true;
  using waiter = resume_waiter;
};

/// Returns: whether `W` is the asynchronous model (its waits suspend) rather than a blocking one.
template <class W>
concept ResumingWakeup = requires { requires W::resumes; };

/// One asynchronous acquire's turn to send its create (send_order): taken when it starts, given up
/// once the create is sent (create_and_list) or when the acquire ends. Refers to its runner and
/// lock path, which must outlive it or its sent() (whichever comes first). Thread-safe.
class send_turn final : public create_sent {
 public:
  /// Effects: takes the next ticket of `path` on `r`.
  send_turn(async_runner& r, const std::string& path) : r_(r), path_(path), ticket_(r_.order().take(path_)) {}
  /// Effects: sent().
  ~send_turn() { sent(); }
  send_turn(const send_turn&) = delete;
  send_turn& operator=(const send_turn&) = delete;
  /// Effects: gives the turn up (once). Never throws.
  void sent() noexcept override {
    if (!done_.exchange(true)) r_.order().done(path_, ticket_);
  }
  /// Returns: whether it may send (its turn came, or it sent already); if not, `w` (if any) is woken
  /// when it may.
  bool ready(const std::shared_ptr<wake_target>& w) {
    return done_.load() || r_.order().my_turn(path_, ticket_, w);
  }

 private:
  async_runner& r_;
  const std::string& path_;  // (a pending acquire keeps no copy of its lock's path)
  std::uint64_t ticket_;
  std::atomic<bool> done_{false};
};

/// Returns: the runner of `s`, started by the first call. Throws: std::system_error if its threads
/// cannot be started.
std::shared_ptr<async_runner> runner_of(session& s);

/// Returns: a new waiter of the model `W` for a wait of an acquire on `s`.
template <class W>
std::shared_ptr<typename W::waiter> new_waiter(session& s) {
  if constexpr (ResumingWakeup<W>) return std::make_shared<resume_waiter>(runner_of(s));
  else return std::make_shared<typename W::waiter>();
}

/// The one wait of the algorithm: `co_await wait_on<W>{waiter, deadline}` blocks the thread in
/// a blocking model's waiter, or suspends the coroutine in wake_resume's. Its value: whether the
/// waiter was woken before `deadline` passed.
template <class W>
struct wait_on {
  typename W::waiter& w;
  std::chrono::steady_clock::time_point deadline;
  bool woken = false;

  bool await_ready() {
    if constexpr (ResumingWakeup<W>) {
      return w.woke() || std::chrono::steady_clock::now() >= deadline;
    } else {
      woken = w.wait_until(deadline);
      return true;
    }
  }
  bool await_suspend(std::coroutine_handle<> h) {
    if constexpr (ResumingWakeup<W>) return w.suspend(h, deadline);
    else return false;
  }
  bool await_resume() noexcept {
    if constexpr (ResumingWakeup<W>) return w.woke();
    else return woken;
  }
};

}  // namespace zklock::detail
