// SPDX-License-Identifier: Apache-2.0
// zklock::session: the class, its state machine (which state, which generation) and its listeners,
// and close(). Runs on the caller's thread, except listener_list::notify (on the session worker, and
// on the thread that calls close()) and the state machine's worker side (session_thread.cpp). The
// handle itself: handle.cpp.
module;
#include <arpa/inet.h>
#include <netinet/in.h>
#include <unistd.h>
#include <sys/socket.h>
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
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
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
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

std::string digest_id(std::string_view user, std::string_view password) {
  return detail::digest_identity(digest(user, password).credential);
}

namespace detail {

// ---- the state machine ---------------------------------------------------------------------------

state_view state_machine::view_locked() const noexcept { return {st_, gen_, sid_, negotiated_, closed_}; }

state_view state_machine::view() const noexcept {
  std::lock_guard lk{mu_};
  return view_locked();
}

void state_machine::check_live(std::uint64_t g, const call_name& what) const {
  std::lock_guard lk{mu_};
  view_locked().check_live(g, what);
}

std::uint64_t state_machine::live_generation(const call_name& what) const {
  std::lock_guard lk{mu_};
  const state_view v = view_locked();
  v.check_live(v.generation, what);
  return v.generation;
}

bool state_machine::wait_connected(clock::time_point deadline, std::uint64_t g, const call_name& what) {
  std::unique_lock lk{mu_};
  auto ready = [&] {
    return closed_ || gen_ != g || st_ == session_state::connected || st_ == session_state::expired;
  };
  if (fiber* f = this_fiber()) {
    // A step of an asynchronous acquire parks its fiber and looks again every few milliseconds:
    // its step thread runs other steps meanwhile (a disconnection is rare; a blocked thread per
    // step waiting through one would hold up the session's other acquires).
    constexpr auto poll = std::chrono::milliseconds{10};
    while (!ready()) {
      const auto now = clock::now();
      if (now >= deadline) return false;
      lk.unlock();
      fiber_park(*f, fiber_ticket(*f), deadline - now < poll ? deadline : now + poll);
      lk.lock();
    }
  } else if (deadline == clock::time_point::max())
    cv_.wait(lk, ready);
  else if (!cv_.wait_until(lk, deadline, ready))
    return false;
  view_locked().check_live(g, what);
  return true;
}

bool state_machine::wait_for(session_state s, std::chrono::milliseconds timeout) const {
  std::unique_lock lk{mu_};
  return cv_.wait_for(lk, timeout, [&] { return st_ == s; });
}

bool state_machine::next_session_ready(std::uint64_t g, const std::shared_ptr<wake_target>& w) {
  std::lock_guard lk{mu_};
  if (closed_) throw_error(errc::session_closed, "zklock: waiting for the next session");
  if (gen_ > g && st_ == session_state::connected) return true;
  if (!opts_.reestablish_after_expiry)
    throw_error(errc::session_expired, "zklock: the session expired (reestablish_after_expiry is off)");
  if (reopen_refused_ && st_ == session_state::expired)
    throw_error(errc::session_expired, "zklock: the session expired and a new one was refused");
  if (w) next_waiters_.add(w);
  return false;
}

std::stop_token state_machine::loss_token(std::uint64_t g) const {
  std::lock_guard lk{mu_};
  if (gen_ == g && !closed_) return loss_.get_token();
  std::stop_source gone;
  gone.request_stop();
  return gone.get_token();
}

void state_machine::post(session_state s) {
  if (s == st_) return;
  if (s == session_state::suspended) suspended_at_ = clock::now();
  st_ = s;
  events_.push_back(s);
  cv_.notify_all();
  next_waiters_.wake_all();
}

bool state_machine::close() noexcept {
  std::lock_guard lk{mu_};
  if (closed_) return false;
  closed_ = true;
  stop_worker_ = true;
  cv_.notify_all();
  return true;
}

std::stop_source state_machine::loss() const noexcept {
  std::lock_guard lk{mu_};
  return loss_;
}

void state_machine::wake_next_session_waiters() noexcept {
  std::lock_guard lk{mu_};
  next_waiters_.wake_all();
}

std::deque<session_state> state_machine::take_events() noexcept {
  std::lock_guard lk{mu_};
  return std::exchange(events_, {});
}

void state_machine::finish_close() noexcept {
  std::lock_guard lk{mu_};
  st_ = session_state::closed;
  cv_.notify_all();
}

// ---- the listeners ---------------------------------------------------------------------------------

std::uint64_t listener_list::add(state_listener l) {
  std::unique_lock<std::mutex> ll;
  if (!in_listener()) ll = std::unique_lock{mu_};  // else ours already
  const auto id = next_++;
  listeners_.emplace(id, std::move(l));
  return id;
}

void listener_list::remove(std::uint64_t id) noexcept {
  std::unique_lock<std::mutex> ll;
  if (!in_listener()) ll = std::unique_lock{mu_};  // else ours already
  listeners_.erase(id);
}

void listener_list::notify(session_state s, const state_machine& states, bool before_close) noexcept {
  std::unique_lock<std::mutex> ll;
  const bool nested = in_listener();  // close() from inside a listener
  if (!nested) {
    ll = std::unique_lock{mu_};
    dispatcher_.store(std::this_thread::get_id());
  }
  try {
    const auto snapshot = listeners_;  // a listener may add or remove listeners
    for (auto& [id, l] : snapshot) {
      if (!listeners_.contains(id)) continue;
      // e.g. a listener closed the session: "closed" was the last word
      if (s != session_state::closed && !before_close && states.view().closed) break;
      try {
        l(s);
      } catch (...) {  // a listener's exception must not end the session's thread
      }
    }
  } catch (...) {  // allocation failure while copying: the listeners miss this change
  }
  if (!nested) dispatcher_.store(std::thread::id{});
}

// ---- the session ---------------------------------------------------------------------------------

session_impl::~session_impl() {
  if (runner) {
    runner->drain();  // acquires started after close() complete too (session_closed)
    runner->stop();
  }
  // close() called from a listener cannot join the worker it runs on: join it here.
  if (worker.joinable() && worker.get_id() != std::this_thread::get_id()) worker.join();
  reaper.join();
}

void session_impl::shutdown() noexcept {
  if (!states.close()) return;
  reaper.request_stop();
  timers.stop();  // a closed session's nodes go with it: no bound left to keep
  watches.wake_all();  // waiters see `closed` at once, not after the handle is closed
  states.loss().request_stop();  // a closed session holds nothing
  states.wake_next_session_waiters();
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
  reaper.join();
  // Background requests (releases and retried deletes) not answered yet: a handle closed now
  // drops their completions (answered ZCLOSING on its loop thread, not by the server), and with them what they own. While connected their replies are one round
  // trip away: wait for them, briefly. (Closed, the state no longer changes but by this call.)
  if (states.view().state == session_state::connected)
    deletes.await_idle(std::min<clock::duration>(opts.connect_timeout, std::chrono::seconds{2}));
  close_handle();
  // Changes posted before close() that the worker had not delivered when it stopped (e.g. an
  // `expired` queued behind a slow listener): listeners hear them, in order, before `closed`.
  // Nothing is posted any more (the watcher ignores a closed session), so the queue is final.
  // From a listener (on the worker), the changes after the one being delivered stay undelivered:
  // the listeners after the closing one do not hear that one either.
  std::deque<session_state> undelivered;
  if (worker.get_id() != std::this_thread::get_id()) undelivered = states.take_events();
  for (const session_state s : undelivered) listeners.notify(s, states, true);
  listeners.notify(session_state::closed, states);
  states.finish_close();
}

}  // namespace detail

// ---- session -------------------------------------------------------------------------------------

namespace {
session_options from_connect(std::string_view connect) {
  session_options o;
  o.connect = std::string{connect};
  return o;
}

constexpr std::size_t max_auth_bytes = 64 * 1024;  // in one request, beyond which the server drops the connection

/// Effects: checks options.auth (see session's constructor). Throws: std::invalid_argument.
void validate_auth(const session_options& options) {
  std::size_t bytes = 0;
  for (const auth_info& a : options.auth) {
    if (a.scheme.empty()) throw std::invalid_argument("zklock::session: auth scheme is empty");
    if (a.scheme.find('\0') != std::string::npos || a.credential.find('\0') != std::string::npos)
      throw std::invalid_argument("zklock::session: auth scheme or credential contains a NUL character");
    if (a.scheme == "digest" && a.credential.find(':') == std::string::npos)
      throw std::invalid_argument("zklock::session: a digest credential is \"user:password\" (see zklock::digest)");
    bytes += a.scheme.size() + a.credential.size();
  }
  if (bytes > max_auth_bytes)
    throw std::invalid_argument("zklock::session: auth schemes and credentials are over 64 KiB (the server would drop the connection)");
}

/// Returns: "scheme:id" of `e`, for messages.
std::string acl_name(const acl_entry& e) { return e.scheme + ":" + e.id; }

/// Effects: checks options.acl: each entry well formed, and the whole letting this session read,
/// create and delete children of the nodes it creates (ZooKeeper checks CREATE and DELETE on the
/// parent: without them a contender could not queue, or could queue and never leave).
/// Throws: std::invalid_argument naming the entry or the missing permission.
void validate_acl(const session_options& options) {
  if (options.acl.empty()) return;
  std::vector<std::string> my_digest_ids;
  for (const auth_info& a : options.auth)
    if (a.scheme == "digest" && a.credential.find(':') != std::string::npos)
      my_digest_ids.push_back(detail::digest_identity(a.credential));
  std::size_t bytes = 0;
  int mine = 0;  // the permissions this session gets from the ACL
  for (const acl_entry& e : options.acl) {
    const std::string what = "zklock::session: acl entry \"" + acl_name(e) + "\": ";
    if (e.scheme.empty()) throw std::invalid_argument(what + "empty scheme");
    if (e.scheme.find('\0') != std::string::npos || e.id.find('\0') != std::string::npos)
      throw std::invalid_argument(what + "contains a NUL character");
    if (e.perms < 1 || e.perms > perm::all)
      throw std::invalid_argument(what + "perms " + std::to_string(e.perms) + " outside 1..31 (perm:: bits)");
    bool applies = true;  // schemes zklock cannot judge from the client side (ip, sasl, x509, ...)
    if (e.scheme == "world") {
      if (e.id != "anyone") throw std::invalid_argument(what + "the world scheme has one id, \"anyone\"");
    } else if (e.scheme == "auth") {
      if (options.auth.empty() && !options.sasl)
        throw std::invalid_argument(what + "the auth scheme stands for the session's credentials, and it has none");
    } else if (e.scheme == "digest") {
      const auto colon = e.id.find(':');
      if (colon == 0 || colon == std::string::npos || colon + 1 == e.id.size() ||
          e.id.find(':', colon + 1) != std::string::npos)
        throw std::invalid_argument(what + "a digest id is \"user:base64(sha1(user:password))\" (see zklock::digest_id)");
      applies = std::find(my_digest_ids.begin(), my_digest_ids.end(), e.id) != my_digest_ids.end();
    }
    if (applies) mine |= e.perms;
    bytes += e.scheme.size() + e.id.size();
  }
  if (bytes > max_auth_bytes)
    throw std::invalid_argument("zklock::session: acl entries are over 64 KiB (the server would drop the connection)");
  constexpr int needed = perm::read | perm::create | perm::remove;
  if ((mine & needed) != needed) {
    constexpr std::pair<int, const char*> rights[] = {
        {perm::read, "READ"}, {perm::create, "CREATE"}, {perm::remove, "DELETE"}};
    std::string missing;
    for (const auto& [bit, name] : rights)
      if (!(mine & bit)) missing += (missing.empty() ? "" : ", ") + std::string{name};
    throw std::invalid_argument("zklock::session: the acl does not give this session " + missing +
                                " (it must read, create and delete its contender nodes under the lock nodes it "
                                "creates: give them to world:anyone, auth, or its digest id)");
  }
}

/// Throws: errc::not_supported: session_options::`option` asks for `feature`, which the C client
/// this zklock was built on lacks; says how to get one.
[[noreturn]] void not_built_with(const char* feature, const char* option) {
  detail::throw_error(errc::not_supported, std::string{"zklock::session: session_options::"} + option + " asks for " +
                                               feature + ", but this zklock was built on a ZooKeeper C client without "
                                               "it (Debian's). Run tools/setup --with-tls-sasl and build zklock again "
                                               "(see docs/security.md)");
}

/// Effects: checks options.tls (see session's constructor). Throws: std::invalid_argument;
/// errc::not_supported where the C client has no TLS.
void validate_tls(const session_options& o) {
  if (!o.tls) return;
  if (!has_tls()) not_built_with("TLS", "tls");
  auto file = [](const std::string& f, const char* name) {
    const std::string what = std::string{"zklock::session: tls."} + name;
    if (f.empty()) throw std::invalid_argument(what + " is empty (the ZooKeeper C client needs all three files)");
    // The C client takes the files as one comma-separated string.
    if (f.find(',') != std::string::npos || f.find('\0') != std::string::npos)
      throw std::invalid_argument(what + " \"" + f + "\" contains a comma or a NUL character");
    if (::access(f.c_str(), R_OK) != 0) throw std::invalid_argument(what + " \"" + f + "\" is not a readable file");
  };
  file(o.tls->ca_file, "ca_file");
  file(o.tls->cert_file, "cert_file");
  file(o.tls->key_file, "key_file");
  if (o.tls->key_password.find(',') != std::string::npos || o.tls->key_password.find('\0') != std::string::npos)
    throw std::invalid_argument("zklock::session: tls.key_password contains a comma or a NUL character "
                                "(the C client cannot pass it on)");
}

/// Effects: checks options.sasl (see session's constructor). Throws: std::invalid_argument;
/// errc::not_supported where the C client has no SASL, or with tls.
void validate_sasl(const session_options& o) {
  if (!o.sasl) return;
  if (!has_sasl()) not_built_with("SASL", "sasl");
  if (o.tls)
    detail::throw_error(errc::not_supported,
                        "zklock::session: the ZooKeeper C client 3.8 cannot use TLS and SASL in one session: give "
                        "session_options::tls or sasl, not both");
  const sasl_options& a = *o.sasl;
  auto text = [](const std::string& v, const char* name, bool required) {
    if (required && v.empty()) throw std::invalid_argument(std::string{"zklock::session: sasl."} + name + " is empty");
    if (v.find('\0') != std::string::npos)
      throw std::invalid_argument(std::string{"zklock::session: sasl."} + name + " contains a NUL character");
  };
  text(a.mechanism, "mechanism", true);
  text(a.service, "service", true);
  text(a.host, "host", true);
  const bool digest = a.mechanism == "DIGEST-MD5";
  text(a.user, "user", digest);
  text(a.password, "password", digest);
  text(a.realm, "realm", false);
}
}  // namespace

bool has_tls() noexcept { return ZKLOCK_HAVE_TLS != 0; }

bool has_sasl() noexcept { return ZKLOCK_HAVE_SASL != 0; }

session::session(std::string_view connect) : session(from_connect(connect)) {}

session::session(session_options options) {
  std::string chroot = detail::validate_connect(options.connect);
  if (options.session_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: session_timeout must be positive");
  if (options.connect_timeout <= std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: connect_timeout must be positive");
  if (options.session_timeout > std::chrono::hours{24})
    throw std::invalid_argument("zklock::session: session_timeout is unreasonably long");
  validate_auth(options);
  validate_acl(options);
  validate_tls(options);
  validate_sasl(options);
  if (options.loss_tolerance < std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session: loss_tolerance must not be negative (zero = the default)");
  if (options.look_ahead_round_trip < std::chrono::microseconds::zero())
    throw std::invalid_argument("zklock::session: look_ahead_round_trip must not be negative (zero = always)");
  impl_ = std::make_unique<detail::session_impl>(std::move(options));
  impl_->chroot = std::move(chroot);
  impl_->open_handle(true);  // throws; nothing else to undo yet
  // The changes so far happened before anyone could add a listener: they are not "later".
  (void)impl_->states.take_events();
  impl_->worker = std::thread([p = impl_.get()] { p->run_worker(); });
}

session::~session() { close(); }

void session::close() noexcept {
  if (impl_) impl_->shutdown();
}

session_state session::state() const noexcept { return impl_->states.view().state; }

std::int64_t session::id() const noexcept { return impl_->states.view().id; }

std::uint64_t session::generation() const noexcept { return impl_->states.view().generation; }

std::chrono::milliseconds session::negotiated_timeout() const noexcept { return impl_->states.view().negotiated; }

std::uint64_t session::add_state_listener(state_listener l) { return impl_->listeners.add(std::move(l)); }

void session::remove_state_listener(std::uint64_t id) noexcept { impl_->listeners.remove(id); }

bool session::wait_for(session_state s, std::chrono::milliseconds timeout) const {
  if (timeout < std::chrono::milliseconds::zero())
    throw std::invalid_argument("zklock::session::wait_for: negative timeout (" + std::to_string(timeout.count()) + " ms)");
  return impl_->states.wait_for(s, timeout);
}

void session::flush() {
  detail::session_impl& s = *impl_;
  const detail::call_name what{"zklock::session::flush"};
  const auto deadline = detail::clock::now() + s.opts.connect_timeout;
  auto rc = s.call(deadline, s.states.live_generation(what), what, nullptr, [](zhandle_t* zh, const void* d) {
    return zoo_aexists(zh, "/", 0, &detail::reply_to::on_stat, d);  // "/" is the chroot when there is one: it exists
  });
  if (!rc) detail::throw_error(errc::operation_timeout, what.text());
  if (*rc != ZOK) detail::fail(*rc, what);
}

void session::reestablish() {
  const detail::state_view v = impl_->states.view();
  if (v.closed) detail::throw_error(errc::session_closed, "zklock::session::reestablish");
  if (v.state != session_state::expired) return;
  impl_->open_handle();
}

const session_options& session::options() const noexcept { return impl_->opts; }

session_credentials session::credentials() const {
  detail::session_impl& s = *impl_;
  std::shared_lock hl{s.handle.mu};  // the generation and its handle change together
  const detail::state_view v = s.states.view();
  if (v.closed) detail::throw_error(errc::session_closed, "zklock::session::credentials");
  // Expired, or a new handle still connecting: there is no session a second handle could join.
  if (v.state == session_state::expired || v.state == session_state::connecting || !s.handle.loop || v.id == 0)
    detail::throw_error(errc::session_expired, "zklock::session::credentials: no live session");
  const auto loop = s.handle.loop;
  hl.unlock();  // the loop's lock comes first (its completions take the session's locks)
  std::optional<clientid_t> id;
  loop->with_handle([&](zhandle_t* zh) {
    if (const clientid_t* c = zh ? ::zoo_client_id(zh) : nullptr) id = *c;
  });
  if (!id || id->client_id != v.id)
    detail::throw_error(errc::session_expired, "zklock::session::credentials: no live session");
  return {id->client_id, std::string{id->passwd, sizeof id->passwd}};
}

std::string session::server_address() const {
  detail::session_impl& s = *impl_;
  const auto loop = s.handle.current();
  if (!loop || s.states.view().state != session_state::connected) return {};
  sockaddr_storage peer{};
  socklen_t len = sizeof peer;
  if (!loop->with_handle([&](zhandle_t* zh) {
        return zh && ::zookeeper_get_connected_host(zh, reinterpret_cast<sockaddr*>(&peer), &len);
      }))
    return {};
  char ip[INET6_ADDRSTRLEN] = {};
  if (peer.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&peer);
    if (!::inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip)) return {};
    return std::string{ip} + ":" + std::to_string(ntohs(a->sin_port));
  }
  if (peer.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&peer);
    if (!::inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip)) return {};
    return "[" + std::string{ip} + "]:" + std::to_string(ntohs(a->sin6_port));
  }
  return {};
}

bool session::await_next_generation(std::uint64_t generation, std::chrono::steady_clock::time_point deadline) {
  return detail::next_session<wake_condition_variable>(*this, generation, deadline, {}).run();
}

// ---- generations, for the lock algorithm -----------------------------------------------------------

namespace detail {

bool next_session_ready(session& sess, std::uint64_t generation, const std::shared_ptr<wake_target>& w) {
  return impl_of(sess).states.next_session_ready(generation, w);
}

std::stop_token loss_token(const session& sess, std::uint64_t generation) {
  return impl_of(sess).states.loss_token(generation);
}

round_trip_meter& round_trips(session& sess) noexcept { return impl_of(sess).round_trips; }

bool look_ahead(session& sess) noexcept {
  session_impl& s = impl_of(sess);
  const auto limit = s.opts.look_ahead_round_trip;
  if (limit == std::chrono::microseconds::zero()) return true;
  if (limit == std::chrono::microseconds::max()) return false;
  const auto rtt = s.round_trips.estimate();
  // In microseconds: a limit near max() would overflow as nanoseconds.
  return !rtt || std::chrono::duration_cast<std::chrono::microseconds>(*rtt) > limit;
}

bool session_alive_for(const session& sess, const held_node& n) noexcept {
  return impl_of(sess).states.view().live(n.generation);
}

}  // namespace detail
}  // namespace zklock
