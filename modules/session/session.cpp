// SPDX-License-Identifier: Apache-2.0
// zklock::session: the class, its state machine (which state, which generation) and its listeners,
// and close(). Runs on the caller's thread, except notify_listeners (on the session worker, and on
// the thread that calls close()). The handle itself: handle.cpp; the worker: session_thread.cpp.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock;
import :session_impl;

namespace zklock {

const char* to_string(session_state s) noexcept {
  switch (s) {
    case session_state::connecting: return "connecting";
    case session_state::connected: return "connected";
    case session_state::suspended: return "suspended";
    case session_state::expired: return "expired";
    case session_state::closed: return "closed";
  }
  return "unknown";
}

auth_info digest(std::string_view user, std::string_view password) {
  if (user.empty()) throw std::invalid_argument("zklock::digest: empty user name");
  if (user.find(':') != std::string_view::npos)
    throw std::invalid_argument("zklock::digest: user name must not contain ':'");
  std::string cred{user};
  cred += ':';
  cred += password;
  return {"digest", std::move(cred)};
}

namespace detail {

// ---- state and listeners -------------------------------------------------------------------------

session_impl::~session_impl() {
  if (runner) {
    runner->drain();  // acquires started after close() complete too (session_closed)
    runner->stop();
  }
  // close() called from a listener cannot join the worker it runs on: join it here.
  if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  if (reaper.joinable()) reaper.join();
}

void session_impl::notify_listeners(session_state s, bool before_close) noexcept {
  std::unique_lock<std::mutex> ll;
  const bool nested = in_listener();  // close() from inside a listener
  if (!nested) {
    ll = std::unique_lock{listener_mu};
    dispatcher.store(std::this_thread::get_id());
  }
  try {
    const auto snapshot = listeners;  // a listener may add or remove listeners
    for (auto& [id, l] : snapshot) {
      if (!listeners.contains(id)) continue;
      if (s != session_state::closed && !before_close) {
        std::lock_guard lk{mu};
        if (closed) break;  // e.g. a listener closed the session: "closed" was the last word
      }
      try {
        l(s);
      } catch (...) {  // a listener's exception must not end the session's thread
      }
    }
  } catch (...) {  // allocation failure while copying: the listeners miss this change
  }
  if (!nested) dispatcher.store(std::thread::id{});
}

void session_impl::post(session_state s) {
  if (s == st) return;
  if (s == session_state::suspended) suspended_at = clock::now();
  st = s;
  events.push_back(s);
  cv.notify_all();
  wake_state_waiters();
}

bool session_impl::wait_connected(clock::time_point deadline, std::uint64_t want_gen) {
  std::unique_lock lk{mu};
  auto ready = [&] { return closed || gen != want_gen || st == session_state::connected || st == session_state::expired; };
  if (deadline == clock::time_point::max())
    cv.wait(lk, ready);
  else if (!cv.wait_until(lk, deadline, ready))
    return false;
  if (closed) throw_error(errc::session_closed, "zklock");
  if (gen != want_gen || st == session_state::expired) throw_error(errc::session_expired, "zklock");
  return true;
}

std::uint64_t session_impl::current_gen() const {
  std::lock_guard lk{mu};
  if (closed) throw_error(errc::session_closed, "zklock");
  return gen;
}

void session_impl::shutdown() noexcept {
  {
    std::lock_guard lk{mu};
    if (closed) return;
    closed = true;
    stop_worker = true;
    cv.notify_all();
  }
  wake_all_groups(this);  // waiters see `closed` at once, not after the handle is closed
  std::stop_source lost;
  {
    std::lock_guard lk{mu};
    lost = loss;
  }
  lost.request_stop();  // a closed session holds nothing
  {
    std::lock_guard lk{mu};
    wake_state_waiters();
  }
  // Asynchronous acquires still pending complete now (session_closed), before close() returns.
  std::shared_ptr<async_runner> r;
  {
    std::lock_guard lk{runner_mu};
    r = runner;
  }
  if (r) r->drain();
  // From a listener (on the worker), the worker ends by itself once the listener returns; the
  // destructor joins it.
  if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  if (reaper.joinable() && reaper.get_id() != std::this_thread::get_id()) reaper.join();
  {
    // Background requests (releases and retried deletes) not answered yet: a handle closed
    // now drops their completions (the C client queues them for its completion thread, which
    // has already stopped), and with them what they own. While connected their replies are one
    // round trip away: wait for them, briefly.
    std::unique_lock lk{mu};
    cv.wait_for(lk, std::min<clock::duration>(opts.connect_timeout, std::chrono::seconds{2}),
                [&] { return inflight == 0 || st != session_state::connected; });
  }
  close_handle();
  // Changes posted before close() that the worker had not delivered when it stopped (e.g. an
  // `expired` queued behind a slow listener): listeners hear them, in order, before `closed`.
  // Nothing is posted any more (the watcher ignores a closed session), so the queue is final.
  // From a listener (on the worker), the changes after the one being delivered stay undelivered:
  // the listeners after the closing one do not hear that one either.
  std::deque<session_state> undelivered;
  if (worker.get_id() != std::this_thread::get_id()) {
    std::lock_guard lk{mu};
    undelivered.swap(events);
  }
  for (const session_state s : undelivered) notify_listeners(s, true);
  notify_listeners(session_state::closed);
  std::lock_guard lk{mu};
  st = session_state::closed;
  cv.notify_all();
}

}  // namespace detail

// ---- session -------------------------------------------------------------------------------------

namespace {
session_options from_connect(std::string_view connect) {
  session_options o;
  o.connect = std::string{connect};
  return o;
}
}  // namespace

session::session(std::string_view connect) : session(from_connect(connect)) {}

session::session(session_options options) {
  std::string chroot = detail::validate_connect(options.connect);
  if (options.session_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: session_timeout must be positive");
  if (options.connect_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: connect_timeout must be positive");
  if (options.session_timeout > std::chrono::hours{24})
    throw std::invalid_argument("zklock::session: session_timeout is unreasonably long");
  if (options.auth && options.auth->scheme.empty())
    throw std::invalid_argument("zklock::session: auth scheme is empty");
  if (options.auth && (options.auth->scheme.find('\0') != std::string::npos ||
                       options.auth->credential.find('\0') != std::string::npos))
    throw std::invalid_argument("zklock::session: auth scheme or credential contains a NUL character");
  if (options.auth && options.auth->scheme.size() + options.auth->credential.size() > 64 * 1024)
    throw std::invalid_argument("zklock::session: auth scheme and credential are over 64 KiB (the server would drop the connection)");
  if (options.loss_tolerance < std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: loss_tolerance must not be negative (zero = the default)");
  if (options.look_ahead_round_trip < std::chrono::microseconds::zero())
    throw std::invalid_argument("zklock::session: look_ahead_round_trip must not be negative (zero = always)");
  impl_ = std::make_unique<detail::session_impl>(std::move(options));
  impl_->chroot = std::move(chroot);
  impl_->open_handle(true);  // throws; nothing else to undo yet
  {
    // The changes so far happened before anyone could add a listener: they are not "later".
    std::lock_guard lk{impl_->mu};
    impl_->events.clear();
  }
  impl_->worker = std::thread([p = impl_.get()] { p->run_worker(); });
}

session::~session() { close(); }

void session::close() noexcept {
  if (impl_) impl_->shutdown();
}

session_state session::state() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->st;
}

std::int64_t session::id() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->sid;
}

std::uint64_t session::generation() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->gen;
}

std::chrono::milliseconds session::negotiated_timeout() const noexcept {
  std::lock_guard lk{impl_->mu};
  return impl_->negotiated;
}

std::uint64_t session::add_state_listener(state_listener l) {
  std::unique_lock<std::mutex> ll;
  if (!impl_->in_listener()) ll = std::unique_lock{impl_->listener_mu};  // else ours already
  const auto id = impl_->next_listener++;
  impl_->listeners.emplace(id, std::move(l));
  return id;
}

void session::remove_state_listener(std::uint64_t id) noexcept {
  std::unique_lock<std::mutex> ll;
  if (!impl_->in_listener()) ll = std::unique_lock{impl_->listener_mu};  // else ours already
  impl_->listeners.erase(id);
}

bool session::wait_for(session_state s, std::chrono::milliseconds timeout) const {
  if (timeout < std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session::wait_for: negative timeout (" + std::to_string(timeout.count()) + " ms)");
  std::unique_lock lk{impl_->mu};
  return impl_->cv.wait_for(lk, timeout, [&] { return impl_->st == s; });
}

void session::flush() {
  detail::session_impl& s = *impl_;
  const auto deadline = detail::clock::now() + s.opts.connect_timeout;
  auto rc = s.call(deadline, s.current_gen(), [](zhandle_t* zh) {
    struct Stat st {};
    return zoo_exists(zh, "/", 0, &st);  // "/" is the chroot when there is one: it exists
  });
  if (!rc) throw_error(errc::operation_timeout, "zklock::session::flush");
  if (*rc != ZOK) throw_error(static_cast<errc>(*rc), "zklock::session::flush");
}

void session::reestablish() {
  {
    std::lock_guard lk{impl_->mu};
    if (impl_->closed) throw_error(errc::session_closed, "zklock::session::reestablish");
    if (impl_->st != session_state::expired) return;
  }
  impl_->open_handle();
}

const session_options& session::options() const noexcept { return impl_->opts; }

session_credentials session::credentials() const {
  detail::session_impl& s = *impl_;
  std::shared_lock hl{s.handle_mu};  // the handle stays while we read its id
  std::lock_guard lk{s.mu};
  if (s.closed) throw_error(errc::session_closed, "zklock::session::credentials");
  // Expired, or a new handle still connecting: there is no session a second handle could join.
  if (s.st == session_state::expired || s.st == session_state::connecting || !s.zh || s.sid == 0)
    throw_error(errc::session_expired, "zklock::session::credentials: no live session");
  const clientid_t* id = ::zoo_client_id(s.zh);
  if (!id || id->client_id != s.sid)
    throw_error(errc::session_expired, "zklock::session::credentials: no live session");
  return {id->client_id, std::string{id->passwd, sizeof id->passwd}};
}

bool session::await_next_generation(std::uint64_t generation, std::chrono::steady_clock::time_point deadline) {
  return detail::await_next_session(*this, generation, deadline);
}

// ---- generations, for the lock algorithm -----------------------------------------------------------

namespace detail {

bool await_next_session(session& sess, std::uint64_t generation, clock::time_point deadline) {
  session_impl& s = sess.impl();
  std::unique_lock lk{s.mu};
  const auto settled = [&] {
    return s.closed || (s.gen > generation && s.st == session_state::connected) ||
           !s.opts.reestablish_after_expiry || (s.reopen_refused && s.st == session_state::expired);
  };
  if (deadline == clock::time_point::max())
    s.cv.wait(lk, settled);
  else if (!s.cv.wait_until(lk, deadline, settled))
    return false;
  if (s.closed) throw_error(errc::session_closed, "zklock");
  if (s.gen > generation && s.st == session_state::connected) return true;
  if (!s.opts.reestablish_after_expiry)
    throw_error(errc::session_expired, "zklock: the session expired (reestablish_after_expiry is off)");
  throw_error(errc::session_expired, "zklock: the session expired and a new one was refused");
}

bool next_session_ready(session& sess, std::uint64_t generation, const std::shared_ptr<wake_target>& w) {
  session_impl& s = sess.impl();
  std::lock_guard lk{s.mu};
  if (s.closed) throw_error(errc::session_closed, "zklock");
  if (s.gen > generation && s.st == session_state::connected) return true;
  if (!s.opts.reestablish_after_expiry)
    throw_error(errc::session_expired, "zklock: the session expired (reestablish_after_expiry is off)");
  if (s.reopen_refused && s.st == session_state::expired)
    throw_error(errc::session_expired, "zklock: the session expired and a new one was refused");
  if (w) s.state_waiters.push_back(w);
  return false;
}

std::stop_token loss_token(const session& sess, std::uint64_t generation) {
  session_impl& s = sess.impl();
  std::lock_guard lk{s.mu};
  if (s.gen == generation && !s.closed) return s.loss.get_token();
  std::stop_source gone;
  gone.request_stop();
  return gone.get_token();
}

round_trip_meter& round_trips(session& sess) noexcept { return sess.impl().round_trips; }

bool look_ahead(session& sess) noexcept {
  session_impl& s = sess.impl();
  const auto limit = s.opts.look_ahead_round_trip;
  if (limit == std::chrono::microseconds::zero()) return true;
  if (limit == std::chrono::microseconds::max()) return false;
  const auto rtt = s.round_trips.estimate();
  // In microseconds: a limit near max() would overflow as nanoseconds.
  return !rtt || std::chrono::duration_cast<std::chrono::microseconds>(*rtt) > limit;
}

bool session_alive_for(const session& sess, const held_node& n) noexcept {
  session_impl& s = sess.impl();
  std::lock_guard lk{s.mu};
  return !s.closed && s.gen == n.generation && s.st != session_state::expired;
}

}  // namespace detail
}  // namespace zklock
