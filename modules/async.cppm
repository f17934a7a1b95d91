// SPDX-License-Identifier: Apache-2.0
// zklock:async — waiting without a thread: the asynchronous acquires of every lock type.
//
// m.async_lock(), sm.async_lock_shared(), sem.async_acquire() and the rest run the one algorithm
// (zklock:algorithm) with the wake_resume model (zklock:step): while it waits, an acquire is a
// suspended coroutine frame, not a blocked thread. Two shapes, the same acquire:
//   - a completion callback, started at once: cb(std::error_code, lock_hold) runs exactly once;
//   - an awaitable, started when awaited: `zklock::lock_hold h = co_await m.async_lock(wc);`
//     (any coroutine type; errors are thrown as std::system_error).
// The policy bundle's watch strategy, timeout and hooks apply to them; its wake-up and reentrancy
// axes do not (an asynchronous acquire suspends instead of blocking a thread, and its hold is the
// lock_hold's, not a thread's).
// Where the completion (or the awaiting coroutine) runs is the caller's choice: on the executor it
// passes (a callable taking the function to run: an asio strand's post, an event loop's queue), or
// by default on the session's completion thread, which never runs ZooKeeper's event or I/O loop
// nor the algorithm, so a slow continuation delays neither watches nor other acquires.
//
// Limits worth knowing. A session's asynchronous acquires run their steps on fibers (zklock:step),
// several at once: their requests are in flight together, and a step that waits for a reply or
// through a disconnection parks its fiber, holding up no other acquire, its deadline or its stop
// (up to max_fibers steps under way; beyond, steps wait for a fiber). A step resumed by its reply
// runs on the session's I/O loop thread: a hook that blocks there delays every reply. Cancel a pending acquire
// with its stop token, never by destroying the coroutine suspended in its co_await (the completion
// would resume a destroyed frame); await an awaitable while its lock object lives.
module;
#include <chrono>
#include <concepts>
#include <coroutine>
#include <cstdint>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <condition_variable>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>
export module zklock:async;
import :errors;
import :session;
import :revoke;
import :operations;
import :holds;
import :algorithm;
import :hooks;
import :step;
import :policies;
import :timeout;

namespace zklock::detail {
struct hold_maker;
}

export namespace zklock {

/// Runs a completion: a callable taking the function to run (e.g. one that posts it to an asio
/// strand or an event loop's queue). It may run it later on any thread, or at once; run inline, a
/// completion runs on one of the session's step threads and must neither block nor destroy the
/// lock or the session. An empty executor (the default) means the session's completion thread.
using executor = std::function<void(std::function<void()>)>;

/// A hold granted by an asynchronous acquire: of a mutex, of either side of a shared mutex, or one
/// lease of a semaphore; also a semaphore lease from the blocking acquire_lease(). Owns it the way std::unique_lock owns a lock: releases it when destroyed.
/// Belongs to no thread and not to the lock object (it may outlive it); the session must outlive it.
class lock_hold {
 public:
  /// Effects: an empty hold (owns nothing).
  lock_hold() noexcept = default;
  /// Effects: takes over `o`'s hold; `o` is left empty.
  lock_hold(lock_hold&& o) noexcept
      : s_(std::exchange(o.s_, nullptr)), h_(std::move(o.h_)), path_(std::move(o.path_)), report_(std::move(o.report_)) {}
  /// Effects: releases the hold owned, then takes over `o`'s. Returns: *this.
  lock_hold& operator=(lock_hold&& o) noexcept {
    if (this != &o) {
      unlock();
      s_ = std::exchange(o.s_, nullptr);
      h_ = std::move(o.h_);
      path_ = std::move(o.path_);
      report_ = std::move(o.report_);
    }
    return *this;
  }
  lock_hold(const lock_hold&) = delete;
  lock_hold& operator=(const lock_hold&) = delete;
  /// Effects: unlock().
  ~lock_hold() { unlock(); }

  /// Effects: releases the hold (its node is deleted, in the background if the connection is
  /// down, and without waiting for the delete's reply on a thread of the session's runner, e.g. in
  /// a completion given no executor: the completions after it do not wait for a round trip); the
  /// hold is empty afterwards. Does nothing if it is empty (unlock(ec) reports that, as for every
  /// lock type). Never throws.
  void unlock() noexcept {
    std::error_code ec;
    unlock(ec);
  }
  /// Effects: as unlock(); `ec` is errc::not_held if the hold was empty, else the server's refusal
  /// of the delete if it refused (errc::no_auth; not known on a runner's thread, where the reply is
  /// not waited for), or cleared. Never throws.
  void unlock(std::error_code& ec) noexcept {
    if (!s_) {
      ec = make_error_code(errc::not_held);
      return;
    }
    session* s = std::exchange(s_, nullptr);
    ec = detail::end_hold(*s, h_, path_, report_);
    h_ = {};
    path_.clear();
    report_ = {};
  }
  /// Returns: whether it owns a hold.
  bool owns_lock() const noexcept { return s_ != nullptr; }
  /// Returns: owns_lock().
  explicit operator bool() const noexcept { return owns_lock(); }
  /// Returns: the permits the hold takes: n for a semaphore lease of n permits (acquire_lease(n)),
  /// else 1; 0 if empty.
  std::ptrdiff_t permits() const noexcept { return s_ ? static_cast<std::ptrdiff_t>(detail::weight_of(h_.node.path)) : 0; }
  /// Returns: the hold's fencing token (its node's creation zxid; larger than every earlier
  /// holder's). Throws: std::system_error(errc::not_held) if empty.
  std::int64_t fencing_token() const {
    held("fencing_token()");
    return h_.node.czxid;
  }
  /// Returns: a token that fires when the hold is asked to let go (revoke(), Curator's Revoker),
  /// by the policy it was granted with (see on_revoke; the first call arms a watch on its node).
  /// Throws: std::system_error(errc::not_held) if empty.
  std::stop_token revocation_token() const {
    held("revocation_token()");
    return detail::revocation_token_of(*s_, h_);
  }
  /// Returns: the hold's fence: its node and fencing token, for guarded writes
  /// (session::commit_if_held). Throws: std::system_error(errc::not_held) if empty.
  zklock::fence fence() const {
    held("fence()");
    return {h_.node.path, h_.node.czxid};
  }
  /// Returns: a token that fires when the hold can no longer be guaranteed (as
  /// basic_mutex::lost_token; the first call arms a watch on its node). Throws:
  /// std::system_error(errc::not_held) if empty.
  std::stop_token lost_token() const {
    held("lost_token()");
    return detail::lost_token_of(*s_, h_);
  }
  /// Returns: whether it owns a hold and no loss of it was signalled.
  bool still_owned() const noexcept { return s_ && detail::still_owned_of(*s_, h_); }
  /// Returns: the path of the lock (or semaphore) node held; empty if the hold is empty.
  const std::string& path() const noexcept { return path_; }

 private:
  friend struct detail::hold_maker;
  lock_hold(session& s, detail::hold h, std::string path, detail::release_reporter r) noexcept
      : s_(&s), h_(std::move(h)), path_(std::move(path)), report_(std::move(r)) {}
  void held(const char* fn) const {
    if (!s_) detail::throw_error(errc::not_held, std::string{"zklock: "} + fn + " on an empty lock_hold");
  }
  session* s_ = nullptr;
  detail::hold h_;
  std::string path_;
  detail::release_reporter report_;  // the granting lock object's hooks, if they listen
};

/// What co_await on an asynchronous acquire waits for: started when awaited, it resumes the
/// awaiting coroutine (on the executor given, or on the session's completion thread) with the
/// hold. Await it once.
class hold_awaitable {
 public:
  /// The acquire to start: it calls its argument once, with the outcome.
  using starter = std::function<void(std::function<void(std::error_code, lock_hold)>)>;
  /// Effects: an awaitable that runs `start` when awaited, an acquire of the lock node `path` (named
  /// in its errors).
  explicit hold_awaitable(starter start, std::string path = {}) : start_(std::move(start)), path_(std::move(path)) {}

  /// Returns: false (the acquire always runs first).
  bool await_ready() const noexcept { return false; }
  /// Effects: starts the acquire; its completion resumes `h`. Throws: what starting throws (then
  /// `h` is not suspended).
  void await_suspend(std::coroutine_handle<> h) {
    // The completion may resume `h`, and so destroy *this, before start returns: run a local copy.
    const starter start = std::move(start_);
    start([this, h](std::error_code ec, lock_hold held) {
      ec_ = ec;
      hold_ = std::move(held);
      h.resume();
    });
  }
  /// Returns: the hold. Throws: std::system_error with the acquire's error (errc::lock_timeout,
  /// errc::cancelled, errc::session_closed, errc::session_expired, ...).
  lock_hold await_resume() {
    if (ec_) throw std::system_error(ec_, "zklock: asynchronous acquire of " + path_);
    return std::move(hold_);
  }

 private:
  starter start_;
  std::string path_;
  std::error_code ec_;
  lock_hold hold_;
};

}  // namespace zklock

// Outside any `export`: reachable by the lock templates wherever they are instantiated, never
// visible to `import zklock;`.
namespace zklock::detail {

/// Makes lock_holds (its constructor is private).
struct hold_maker {
  static lock_hold make(session& s, hold h, std::string path, release_reporter r) noexcept {
    return lock_hold{s, std::move(h), std::move(path), std::move(r)};
  }
};

/// The asynchronous acquires of one lock object that have not handed their completion over yet:
/// the object's destructor stops them and waits for them. Thread-safe.
class pending_acquires {
 public:
  /// One acquire's place in the registry: its stop source, and its links (the acquire holds it, so
  /// that registering costs no allocation of ours).
  struct entry {
    std::stop_source stop;
    entry* prev = nullptr;
    entry* next = nullptr;
  };
  /// Effects: registers the acquire whose entry `e` is (it stays put until remove(e)). Never throws.
  void add(entry& e) noexcept {
    std::lock_guard lk{mu_};
    e.prev = nullptr;
    e.next = head_;
    if (head_) head_->prev = &e;
    head_ = &e;
  }
  /// Effects: the acquire of `e` handed its completion over (or never started). Never throws.
  void remove(entry& e) noexcept {
    std::lock_guard lk{mu_};
    (e.prev ? e.prev->next : head_) = e.next;
    if (e.next) e.next->prev = e.prev;
    e.prev = e.next = nullptr;
    cv_.notify_all();
  }
  /// Returns: whether the lock object is being destroyed.
  bool closing() const noexcept {
    std::lock_guard lk{mu_};
    return closing_;
  }
  /// Effects: stops every registered acquire and waits until each has handed its completion over
  /// (not from one of `r`'s step threads: there nothing can be waited for), then until the completion
  /// thread ran those it got. Never throws.
  void close(async_runner* r) noexcept {
    std::unique_lock lk{mu_};
    closing_ = true;
    for (entry* e = head_; e; e = e->next) e->stop.request_stop();
    if (!r || !head_) return;
    if (r->on_runner_thread() && !r->on_completion_thread()) return;
    cv_.wait(lk, [&] { return head_ == nullptr; });
    lk.unlock();
    r->flush_completions();
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  entry* head_ = nullptr;  // the registered acquires' entries, linked through them
  bool closing_ = false;
};

/// Asks `s` to stop when `stop` is requested.
struct stop_relay {
  std::stop_source s;
  void operator()() const noexcept { s.request_stop(); }
};

/// Effects: hands the outcome of an asynchronous acquire of `path` (its error, or its hold `h`,
/// whose release `report` hears of) to `done(std::error_code, lock_hold)`, run on `ex` (or the
/// completion thread of `r`).
template <class Done>
void deliver(session& s, const std::string& path, std::error_code ec, std::optional<hold> h,
             const release_reporter& report, async_runner& r, const executor& ex, Done&& done) {
  struct outcome {
    std::error_code ec;
    lock_hold held;
    std::remove_cvref_t<Done> done;
  };
  auto out = std::make_shared<outcome>(
      outcome{ec, h ? hold_maker::make(s, std::move(*h), path, report) : lock_hold{}, std::forward<Done>(done)});
  r.complete(ex, [out] { out->done(out->ec, std::move(out->held)); });
}

/// Returns: the error an asynchronous acquire reports for the exception `e` of the algorithm.
inline std::error_code error_of(const std::exception_ptr& e) noexcept {
  try {
    std::rethrow_exception(e);
  } catch (const std::system_error& x) {
    return x.code();
  } catch (const std::bad_alloc&) {
    return std::make_error_code(std::errc::not_enough_memory);
  } catch (...) {
    return make_error_code(errc::system_error);
  }
}

/// The bookkeeping of one asynchronous acquire: where it runs, its lock object's registry entry
/// and its own stop source (a stop request, or the lock object going, ends its wait).
struct async_ticket {
  std::shared_ptr<async_runner> runner;
  std::shared_ptr<pending_acquires> registry;
  pending_acquires::entry entry;  // (its stop source)
};

/// Effects: ends an asynchronous acquire: reports it to `hooks` if the algorithm returned (`g`),
/// makes its outcome (the hold; else errc::session_closed if its lock object is going,
/// errc::cancelled if `stopped`, errc::lock_timeout; or the error of `error`), hands it to `done`
/// on `ex`, then leaves the lock object's registry.
template <LockPolicies P, class Done>
void finish_async(session& s, const std::string& path, const hooks_ref<typename P::hooks>& hooks,
                  acquire_probe<P>& probe, std::optional<std::optional<grant>> g, const std::exception_ptr& error,
                  bool stopped, async_ticket& t, const executor& ex, Done&& done, const hold_bounds& bounds,
                  on_revoke revocation) {
  std::error_code ec;
  std::optional<hold> h;
  if (g) {
    h = probe.finish(hooks, path, std::move(*g));
    if (h) {
      try {
        settle_grant(s, *h, revocation, bounds);
      } catch (...) {  // no timer: the hold was let go
        ec = error_of(std::current_exception());
        h.reset();
      }
    }
    if (!h && !ec)
      ec = make_error_code(t.registry->closing() ? errc::session_closed
                           : stopped             ? errc::cancelled
                                                 : errc::lock_timeout);
  } else {
    ec = error_of(error);
  }
  deliver(s, path, ec, std::move(h), hooks.reporter(), *t.runner, ex, std::forward<Done>(done));
  t.registry->remove(t.entry);
}

/// One asynchronous acquire with the policies `P` and `rule` on `path` (the lock object's, which
/// outlives it): what it needs besides the algorithm's own frames, on the heap until it ends.
/// The algorithm (acquire_node with wake_resume) runs detached on the runner's step threads;
/// when it ends, `finished` hands the outcome to `done(std::error_code, lock_hold)` on `ex`.
template <LockPolicies P, class Rule, class Done>
struct async_acquire {
  session& s;
  const std::string& path;
  const hooks_ref<typename P::hooks>& hooks;  // the lock object's (it outlives the acquire)
  Rule rule;
  std::stop_token user_stop;  // the caller's (its wait_context's)
  async_ticket t;
  wait_context wc;  // the deadline, and the ticket's stop token
  executor ex;
  Done done;
  send_turn turn;  // its create goes out after those of the acquires of `path` started before it
  acquire_probe<P> probe{};
  on_revoke revocation = on_revoke::notify;  // the policy its hold is granted with
  std::stop_callback<stop_relay> link{user_stop, stop_relay{t.entry.stop}};  // a user's stop ends the wait

  using algorithm = step<std::optional<grant>>;

  /// Effects: the algorithm ended: takes its outcome, frees its frame and this, and finishes.
  static void finished(std::coroutine_handle<algorithm::promise_type> h, void* self) noexcept {
    std::unique_ptr<async_acquire> a{static_cast<async_acquire*>(self)};
    a->turn.sent();  // (if it never sent its create) while the lock object, whose path it refers to, lives
    std::optional<std::optional<grant>> g = std::move(h.promise().value);
    const std::exception_ptr error = h.promise().error;
    h.destroy();
    finish_async<P>(a->s, a->path, a->hooks, a->probe, std::move(g), error, a->user_stop.stop_requested(), a->t,
                    a->ex, std::move(a->done), a->wc.hold, a->revocation);
  }

  /// Returns: the detached algorithm of `a`, to resume once on a step thread (from then on
  /// it owns `a`).
  static std::coroutine_handle<> make(std::unique_ptr<async_acquire>& a) {
    auto h = acquire_node<typename P::watch, wake_resume>(a->s, a->path, a->rule, a->wc, a->probe.counters(),
                                                          &a->turn)
                 .detach(&finished, a.get());
    a.release();
    return h;
  }
};

/// The asynchronous side of a lock object: starts its acquires and, when the object goes, stops
/// and awaits those still pending.
template <LockPolicies P>
class async_side {
 public:
  /// Effects: the asynchronous side of the lock node `path` on `s`, reporting to `hooks` (both
  /// must outlive it).
  async_side(session& s, const std::string& path, const hooks_ref<typename P::hooks>& hooks)
      : s_(s), path_(path), hooks_(hooks) {}
  /// Effects: stops every pending acquire and waits until each has completed (session_closed).
  /// Touches no session: a lock object that never acquired asynchronously may outlive its session.
  ~async_side() { pending_->close(runner_.get()); }
  async_side(const async_side&) = delete;
  async_side& operator=(const async_side&) = delete;

  /// Effects: starts an acquire with `rule` within `wc` (and the timeout policy's bound); `done`
  /// runs once on `ex` (default: the completion thread) with the outcome. Never blocks.
  /// Throws: std::system_error if the runner's threads cannot be started; std::bad_alloc.
  template <class Rule, class Done>
  void start(const Rule& rule, const wait_context& wc, executor ex, Done done, on_revoke revocation = on_revoke::notify) {
    if (!runner_) runner_ = runner_of(s_);
    const auto& r = runner_;
    const wait_context bounded{std::min(wc.deadline, P::timeout::lock_deadline(clock::now())), wc.stop};
    const std::stop_source own;
    r->begin_acquire();
    try {
      using acquire = async_acquire<P, Rule, Done>;
      auto a = std::unique_ptr<acquire>{new acquire{s_, path_, hooks_, rule, wc.stop,
                                                    async_ticket{r, pending_, pending_acquires::entry{own}},
                                                    wait_context{bounded.deadline, own.get_token(), wc.hold}, std::move(ex),
                                                    std::move(done), send_turn{*r, path_}, acquire_probe<P>{}, revocation}};
      acquire* const raw = a.get();
      pending_->add(raw->t.entry);  // (where it stays: in the acquire)
      std::coroutine_handle<> task;
      try {
        task = acquire::make(a);  // from here on the algorithm owns `*raw`
        r->post(task);
      } catch (...) {
        if (task) task.destroy();  // never started: its frame only refers to `*raw`
        pending_->remove(raw->t.entry);
        if (task) delete raw;  // (else `a` still owns it)
        throw;
      }
    } catch (...) {
      r->end_acquire();
      throw;
    }
  }

  /// Returns: an awaitable of an acquire with `rule` within `wc`, resumed on `ex`.
  template <class Rule>
  hold_awaitable awaitable(const Rule& rule, const wait_context& wc, executor ex, on_revoke revocation = on_revoke::notify) {
    return hold_awaitable{[this, rule, wc, ex = std::move(ex), revocation](std::function<void(std::error_code, lock_hold)> done) {
                            start(rule, wc, ex, std::move(done), revocation);
                          },
                          path_};
  }

 private:
  session& s_;
  const std::string& path_;
  const hooks_ref<typename P::hooks>& hooks_;
  std::shared_ptr<pending_acquires> pending_ = std::make_shared<pending_acquires>();
  std::shared_ptr<async_runner> runner_;  // the session's, from the first asynchronous acquire on
};

}  // namespace zklock::detail

export namespace zklock {

/// A completion callback of an asynchronous acquire: called once with the outcome and, on success,
/// the hold.
template <class C>
concept AcquireCallback = std::move_constructible<C> && std::invocable<C&, std::error_code, lock_hold>;

}  // namespace zklock
