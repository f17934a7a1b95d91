// SPDX-License-Identifier: Apache-2.0
// The C client's handle of a session: its I/O loop, opening it (connect, auth, chroot check),
// closing it, and its session watcher, with the state machine's side of them (a new generation, the
// client's states). open_handle runs on the caller's thread (the session's constructor,
// reestablish()) or on the session worker (re-establishment after expiry); close_handle on whichever
// thread closes or gives up the session; session_watcher on the handle's loop thread.
module;
#include <pthread.h>
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
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
#include <system_error>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#if ZKLOCK_HAVE_TLS
#include <openssl/err.h>
#endif
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;

namespace zklock::detail {

// ---- the I/O loop -------------------------------------------------------------------------------------

// The C client's internal flush (zklock's private copy; not in its public header): writes what the
// socket takes of the queued requests. Returns: < 0 if a write failed (the socket is broken).
extern "C" int zklock_zk_flush_send_queue(zhandle_t* zh, int timeout);

/// The C client's send(2) (cmake/zklockPrivateClient.cmake renames its one call to this): it writes
/// each request as its 4-byte length and then the request, two writes, and with Nagle's algorithm
/// off (TCP_NODELAY) each went out as a packet of its own, one more for the server to take in too.
/// A length prefix goes with MSG_MORE instead: the kernel holds it until the request's own write,
/// which sends both. (The client's other 4-byte write, "isro" when it probes a read-only server,
/// reads as a length no request has, and goes at once.) While the I/O loop's thread runs a batch of
/// completions (send_batch, below), every write goes with MSG_MORE: the requests that the batch's
/// steps send leave together when it ends, in as few packets as they fill.
namespace {
thread_local bool t_batching = false;  // this thread runs a send_batch
thread_local int t_held_fd = -1;       // a socket to which it wrote with MSG_MORE meanwhile
}  // namespace

/// Effects: from now on this thread's writes through zklock_zk_sys_send are held (MSG_MORE).
extern "C" void zklock_zk_send_batch_begin() noexcept { t_batching = true; }

/// Effects: ends the thread's batch: sends at once what its writes left held.
extern "C" void zklock_zk_send_batch_end() noexcept {
  t_batching = false;
  if (const int fd = std::exchange(t_held_fd, -1); fd >= 0) {
    // Setting TCP_NODELAY (on already) pushes the frames held. (A socket the client closed
    // meanwhile was forgotten: zklock_zk_sys_close.)
    const int on = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on);
  }
}

/// The C client's close(2) (renamed as its send): a socket closed while a batch holds writes to it
/// is forgotten first, so that the batch's end does not touch a descriptor reused meanwhile.
extern "C" int zklock_zk_sys_close(int fd) {
  if (fd == t_held_fd) t_held_fd = -1;
  return ::close(fd);
}

extern "C" ssize_t zklock_zk_sys_send(int fd, const void* buf, std::size_t len, int flags) {
  constexpr std::uint32_t longest_request = 64u << 20;  // far above the server's limit (jute.maxbuffer)
  if (t_batching) {
    t_held_fd = fd;
    flags |= MSG_MORE;
  } else if (len == 4) {
    std::uint32_t prefix;
    std::memcpy(&prefix, buf, sizeof prefix);
    if (ntohl(prefix) <= longest_request) flags |= MSG_MORE;
  }
  return ::send(fd, buf, len, flags);
}

/// Replaces the single-threaded client's own (see cmake/zklockPrivateClient.cmake): called by every
/// request right after it is queued (timeout 0), by a ping, and by zookeeper_close (3000 ms). A
/// request's write that fails is left for the loop to find (the socket is broken: its poll reports
/// it, and the client's read or write there fails every request sent and reconnects), instead of
/// the client's own handling, which closes the socket and leaves the requests sent on it waiting
/// for replies first in line.
extern "C" int zklock_zk_adaptor_send_queue(zhandle_t* zh, int timeout) {
  const int rc = zklock_zk_flush_send_queue(zh, timeout);
  return rc < 0 && timeout == 0 ? 0 : rc;
}

namespace {
thread_local const io_loop* t_loop = nullptr;  // the loop whose thread this is

#if ZKLOCK_HAVE_SASL
/// What Cyrus SASL's client asks of a handle (session_options::sasl), for as long as the handle
/// lives: the C client keeps a pointer to the callback array, and calls them while it connects.
struct sasl_answers {
  std::string user, realm;
  std::vector<unsigned char> secret;  // a sasl_secret_t: its length, then the password
  sasl_callback_t callbacks[5];

  explicit sasl_answers(const sasl_options& o) : user{o.user}, realm{o.realm} {
    secret.resize(sizeof(sasl_secret_t) + o.password.size());
    auto* s = reinterpret_cast<sasl_secret_t*>(secret.data());
    s->len = static_cast<unsigned long>(o.password.size());
    std::memcpy(s->data, o.password.data(), o.password.size());
    callbacks[0] = {SASL_CB_USER, as_callback(&simple), this};
    callbacks[1] = {SASL_CB_AUTHNAME, as_callback(&simple), this};
    callbacks[2] = {SASL_CB_PASS, as_callback(&pass), this};
    callbacks[3] = {SASL_CB_GETREALM, as_callback(&get_realm), this};
    callbacks[4] = {SASL_CB_LIST_END, nullptr, nullptr};
  }
  /// Cyrus SASL's table stores every callback as int(*)(void), and calls each with the signature
  /// its id names: the cast is its API's.
  template <class F>
  static auto as_callback(F* f) noexcept -> int (*)() {
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wcast-function-type-mismatch"
    return reinterpret_cast<int (*)()>(f);
#pragma clang diagnostic pop
  }
  sasl_answers(const sasl_answers&) = delete;
  sasl_answers& operator=(const sasl_answers&) = delete;
  ~sasl_answers() { std::fill(secret.begin(), secret.end(), 0); }

  static int simple(void* self, int id, const char** result, unsigned* len) {
    const auto* a = static_cast<const sasl_answers*>(self);
    if (id != SASL_CB_USER && id != SASL_CB_AUTHNAME) return SASL_BADPARAM;
    *result = a->user.c_str();
    if (len) *len = static_cast<unsigned>(a->user.size());
    return SASL_OK;
  }
  static int pass(sasl_conn_t*, void* self, int id, sasl_secret_t** out) {
    auto* a = static_cast<sasl_answers*>(self);
    if (id != SASL_CB_PASS) return SASL_BADPARAM;
    *out = reinterpret_cast<sasl_secret_t*>(a->secret.data());
    return SASL_OK;
  }
  static int get_realm(void* self, int id, const char** available, const char** result) {
    const auto* a = static_cast<const sasl_answers*>(self);
    if (id != SASL_CB_GETREALM) return SASL_BADPARAM;
    *result = !a->realm.empty() ? a->realm.c_str() : (available && *available ? *available : "");
    return SASL_OK;
  }
};

/// Returns: whether Cyrus SASL's client side is initialised (once per process).
bool sasl_client_ready() {
  static const int rc = sasl_client_init(nullptr);
  return rc == SASL_OK;
}
#endif

/// Returns: why this thread's last TLS handshake failed, as OpenSSL says (its error queue is the
/// thread's: the loop's, where the C client ran the handshake), which it then clears; empty if
/// OpenSSL says nothing: the handshake ran out of time (a slow or silent server), no refusal.
std::string tls_reason() {
#if ZKLOCK_HAVE_TLS
  std::string reason;
  while (const unsigned long e = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(e, text, sizeof text);
    reason = text;  // the last is the one that ended the handshake
  }
  return reason;
#else
  return {};
#endif
}

/// While it lives, the thread's writes to a socket are held (MSG_MORE, see zklock_zk_sys_send); its
/// end sends what they left held at once. For the loop's turns: one reply batch can resume hundreds
/// of asynchronous steps, each sending a request or two, which otherwise left as a packet each (a
/// wake-up each for the server, and for anything between).
class send_batch {
 public:
  send_batch() noexcept { zklock_zk_send_batch_begin(); }
  ~send_batch() { zklock_zk_send_batch_end(); }
  send_batch(const send_batch&) = delete;
  send_batch& operator=(const send_batch&) = delete;
};
/// The longest the loop polls without looking at the handle again (a safety net: a send whose tail
/// the socket did not take wakes it at once, see nudge).
constexpr int max_poll_ms = 1000;
/// The least the loop waits after a connection attempt failed at once.
constexpr int min_retry_ms = 10;
/// How often the C client resolves its server list again while connected (see io_loop::open).
constexpr int resolution_delay_ms = 60'000;
}  // namespace

io_loop::io_loop(session_impl* s, std::uint64_t g) : ctx{s, g} {
  ctx.loop = this;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw std::system_error(errno, std::generic_category(), "zklock::session: eventfd");
}

io_loop::~io_loop() {
  close();
  closing_ = true;
  run_deferred();  // what was deferred after the loop ended (or with no loop): with no handle
  ::close(wake_fd_);
}

bool io_loop::open(const std::string& connect, watcher_fn watcher, int timeout_ms, const clientid_t* id,
                   void* context) {
  // No lock: no other thread knows the handle before its loop starts (and open_handle calls this
  // holding handle.mu, which the loop's completions take after mu_).
  errno = 0;
  if (const auto& tls = ctx.impl->opts.tls) {
#if ZKLOCK_HAVE_TLS
    // The C client's form: "ca,cert,key[,passphrase]" (validate_tls refused commas in them). It
    // takes no log callback here: set right after, before its loop first runs.
    std::string files = tls->ca_file + "," + tls->cert_file + "," + tls->key_file;
    if (!tls->key_password.empty()) files += "," + tls->key_password;
    zh_ = zookeeper_init_ssl(connect.c_str(), files.c_str(), watcher, timeout_ms, id, context, 0);
    std::fill(files.begin(), files.end(), '\0');
    if (zh_) zoo_set_log_callback(zh_, &zk_log_line);
#else
    errno = ENOTSUP;  // not reached: validate_tls refuses it first
#endif
  } else if (const auto& sasl = ctx.impl->opts.sasl) {
#if ZKLOCK_HAVE_SASL
    if (!sasl_client_ready()) {
      errno = ENOTSUP;  // Cyrus SASL could not start (no plugins?)
      return false;
    }
    auto answers = std::make_shared<sasl_answers>(*sasl);
    zoo_sasl_params_t params{sasl->service.c_str(), sasl->host.c_str(), sasl->mechanism.c_str(), answers->callbacks};
    zh_ = zookeeper_init_sasl(connect.c_str(), watcher, timeout_ms, id, context, 0, &zk_log_line, &params);
    sasl_ = std::move(answers);  // the handle reads them until it is closed (the loop's end)
#else
    errno = ENOTSUP;  // not reached: validate_sasl refuses it first
#endif
  } else {
    zh_ = zookeeper_init2(connect.c_str(), watcher, timeout_ms, id, context, 0, &zk_log_line);
  }
  if (!zh_) return false;
  // By default the client resolves its server list each time its I/O loop checks the socket
  // (getaddrinfo: a netlink socket and /etc/hosts, about ten system calls, several times per
  // request: a third of the client's CPU at loopback). Once a minute still sees a DNS change, for
  // the next connection.
  zoo_set_servers_resolution_delay(zh_, resolution_delay_ms);
  thread_ = std::thread{[this] { run(); }};
  return true;
}

bool io_loop::on_loop_thread() const noexcept { return t_loop == this; }

void io_loop::wake() noexcept {
  const std::uint64_t one = 1;
  [[maybe_unused]] const auto n = ::write(wake_fd_, &one, sizeof one);  // EAGAIN: it is awake already
}

void io_loop::nudge() noexcept {
  if (t_loop == this || fd_ < 0 || polls_write_) return;  // the loop looks at the handle before it polls
  pollfd p{fd_, POLLOUT, 0};
  if (::poll(&p, 1, 0) == 1 && (p.revents & POLLOUT)) return;  // all sent (the client stops at a full socket)
  wake();
}

void io_loop::defer(std::function<void(zhandle_t*)> op) {
  {
    std::lock_guard l{deferred_mu_};
    deferred_.push_back(std::move(op));
    has_deferred_.store(true, std::memory_order_release);
  }
  wake();  // if no thread calls with_handle soon, the loop makes it
}

void io_loop::run_deferred() {
  if (!has_deferred_.load(std::memory_order_acquire)) return;
  std::vector<std::function<void(zhandle_t*)>> ops;
  {
    std::lock_guard l{deferred_mu_};
    ops.swap(deferred_);
    has_deferred_.store(false, std::memory_order_relaxed);
  }
  for (auto& op : ops) op(closing_ ? nullptr : zh_);
}

void io_loop::close() noexcept {
  stop_.store(true);
  // Never from its own completions (it would wait for itself): then it ends after them, and the
  // owner's close joins it.
  if (!thread_.joinable() || t_loop == this) return;
  wake();
  thread_.join();
}

void io_loop::run() {
  ::pthread_setname_np(::pthread_self(), "zklock-io");  // for ps, top, perf and gdb
  t_loop = this;
  for (;;) {
    pollfd fds[2] = {{-1, 0, 0}, {wake_fd_, POLLIN, 0}};
    int timeout = max_poll_ms;
    {
      std::lock_guard l{mu_};
      run_deferred();
      if (stop_.load()) {
        // Closing on this thread: the completions the client calls now (ZCLOSING) and the calls
        // they make find no handle.
        closing_ = true;
        run_deferred();
        zookeeper_close(std::exchange(zh_, nullptr));
        run_deferred();  // what its last completions deferred: with no handle
        return;
      }
      int fd = -1;
      int interest = 0;
      timeval tv{};
      const int rc = zookeeper_interest(zh_, &fd, &interest, &tv);
      if (fd >= 0) {
        fds[0] = {fd, static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                          ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)),
                  0};
      }
      fd_ = fd;
      polls_write_ = (interest & ZOOKEEPER_WRITE) != 0;
      long long ms = static_cast<long long>(tv.tv_sec) * 1000 + (tv.tv_usec + 999) / 1000;
      if (rc == ZINVALIDSTATE)
        ms = max_poll_ms;  // expired, or its credentials refused: nothing to do until it is closed
      else if (rc != ZOK && fd < 0 && ms == 0)
        ms = min_retry_ms;  // a connection that failed at once: try again soon, without spinning
      timeout = static_cast<int>(std::clamp<long long>(ms, 0, max_poll_ms));
    }
    ::poll(fds, 2, timeout);
    if (fds[1].revents & POLLIN) {
      std::uint64_t n;
      [[maybe_unused]] const auto r = ::read(wake_fd_, &n, sizeof n);
    }
    int events = 0;
    if (fds[0].fd >= 0) {
      if (fds[0].revents & (POLLIN | POLLERR)) events |= ZOOKEEPER_READ;
      if (fds[0].revents & (POLLOUT | POLLHUP)) events |= ZOOKEEPER_WRITE;
    }
    std::lock_guard l{mu_};
    fd_ = -1;  // until the next interest: callers leave the socket to the loop meanwhile
    if (stop_.load()) continue;  // closes above
    const send_batch batch;
    run_deferred();
    // A refused handshake counts towards the constructor's giving up at once (wait_opened); one
    // that ran out of time is tried again, as any failed connection attempt, until connect_timeout
    // (a server's first handshakes can be slow: a cold JVM under load took over a second).
    if (zookeeper_process(zh_, events) == ZSSLCONNECTIONERROR)
      if (std::string reason = tls_reason(); !reason.empty()) ctx.impl->states.on_tls_failure(ctx.generation, std::move(reason));
    // A SASL authentication the server refused puts the handle in AUTH_FAILED without a session
    // event (the C client 3.8's zoo_sasl_mark_failed): tell the state machine as if there was one.
    if (ctx.impl->opts.sasl && !sasl_failed_ && zoo_state(zh_) == ZOO_AUTH_FAILED_STATE) {
      sasl_failed_ = true;
      ctx.impl->states.on_client_state(ctx.generation, ZOO_AUTH_FAILED_STATE, zh_);
    }
  }
}

// ---- the state machine's side of the handle --------------------------------------------------------

void state_machine::on_client_state(std::uint64_t g, int state, zhandle_t* zh) {
  std::lock_guard lk{mu_};
  // A replaced handle, or one given up: `expired` ends a generation for good. (A handle given up
  // after a long disconnection may still reconnect, its session alive on the server, before the
  // worker closes it: that must not bring the generation back to `connected`.)
  if (g != gen_ || closed_ || st_ == session_state::expired) return;
  if (state == ZOO_CONNECTED_STATE) {
    connected_once_ = true;
    if (const clientid_t* id = zoo_client_id(zh)) sid_ = id->client_id;
    negotiated_ = std::chrono::milliseconds{zoo_recv_timeout(zh)};
    post(session_state::connected);
  } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
    post(connected_once_ ? session_state::suspended : session_state::connecting);
  } else if (state == ZOO_EXPIRED_SESSION_STATE) {
    post(session_state::expired);
  } else if (state == ZOO_AUTH_FAILED_STATE) {
    auth_failed_ = true;
    cv_.notify_all();
  }
}

bool state_machine::reopen_wanted() const noexcept {
  std::lock_guard lk{mu_};
  return closed_ || st_ == session_state::expired;
}

std::pair<std::stop_source, std::uint64_t> state_machine::begin_generation() {
  std::lock_guard lk{mu_};
  if (closed_) throw_error(errc::session_closed, "zklock::session: opening a new handle");
  auto old_loss = std::exchange(loss_, std::stop_source{});
  ++gen_;
  reopen_refused_ = false;
  connected_once_ = false;
  auth_failed_ = false;
  tls_failures_ = 0;
  tls_reason_.clear();
  sid_ = 0;
  post(session_state::connecting);
  return {std::move(old_loss), gen_};
}

state_machine::opened state_machine::wait_opened(clock::time_point deadline) {
  // A handshake that failed once with every server of the connect string ends the wait: the
  // certificates will not change by waiting. (Later, a connected session's reconnections keep
  // trying, as they do after any other failure.)
  const std::string_view hosts = std::string_view{opts_.connect}.substr(0, opts_.connect.find('/'));
  const auto servers = static_cast<std::size_t>(1 + std::ranges::count(hosts, ','));
  std::unique_lock lk{mu_};
  if (!cv_.wait_until(lk, deadline, [&] {
        return st_ == session_state::connected || auth_failed_ || closed_ || tls_failures_ >= servers;
      }))
    return opened::timed_out;
  if (st_ != session_state::connected && !closed_ && !auth_failed_) return opened::tls_failed;
  return auth_failed_ ? opened::auth_failed : opened::ready;
}

void state_machine::on_tls_failure(std::uint64_t g, std::string reason) {
  {
    std::lock_guard lk{mu_};
    if (g != gen_ || connected_once_) return;
    ++tls_failures_;
    tls_reason_ = std::move(reason);
  }
  cv_.notify_all();
}

std::string state_machine::tls_failure() const {
  std::lock_guard lk{mu_};
  return tls_reason_;
}

void state_machine::open_failed(bool first) {
  std::lock_guard lk{mu_};
  post(first ? session_state::closed : session_state::expired);
}

// ---- the handle --------------------------------------------------------------------------------------

void session_impl::session_watcher(zhandle_t* zh, int type, int state, const char*, void* vctx) {
  if (type != ZOO_SESSION_EVENT || !vctx) return;
  const auto* c = static_cast<const handle_ctx*>(vctx);
  c->impl->states.on_client_state(c->generation, state, zh);
}

void session_impl::close_handle() {
  // Taken out under the lock (a sender that copied it finds it closing), closed without it: the
  // loop's thread runs completions that may take it.
  std::shared_ptr<io_loop> loop;
  {
    std::unique_lock hl{handle.mu};
    loop = std::move(handle.loop);
  }
  if (loop) {
    loop->close();  // the client's last completions run on the loop's thread: none after this
    answer_unanswered(loop->ctx, ZCLOSING);  // what the client will never answer now
  }
  watches.wake_all();  // a closed handle fires no watch: its waiters must hear of it
}

void session_impl::open_handle(bool first) {
  std::lock_guard rl{handle.reopen_mu};
  // The worker and reestablish() may both get here: the second has nothing to do.
  if (!first && !states.reopen_wanted()) return;
  close_handle();
  const auto deadline = clock::now() + opts.connect_timeout;
  std::stop_source old_loss;
  {
    // One step for callers: the new generation and its handle appear together (a call that saw
    // the new generation with no handle yet would hand the C client a null handle).
    std::unique_lock hl{handle.mu};
    std::uint64_t g;
    std::tie(old_loss, g) = states.begin_generation();
    auto loop = std::make_shared<io_loop>(this, g);
    refresh_client_log_level();
    if (!loop->open(opts.connect, &session_watcher, static_cast<int>(opts.session_timeout.count()), nullptr,
                    &loop->ctx)) {
      const int e = errno;
      states.open_failed(first);
      old_loss.request_stop();
      throw std::system_error(e ? e : EINVAL, std::generic_category(),
                              "zklock::session: the ZooKeeper client refused \"" + opts.connect + "\"");
    }
    handle.loop = std::move(loop);
  }
  old_loss.request_stop();  // holds of the replaced handle are gone, if they were not already
  auto fail = [&](errc e, const std::string& what) {
    close_handle();
    states.open_failed(first);
    throw_error(e, what);
  };
  const auto opened = states.wait_opened(deadline);
  if (opened == state_machine::opened::timed_out)
    fail(errc::connect_timeout, "zklock::session: no session with \"" + opts.connect + "\" within " +
                                    std::to_string(opts.connect_timeout.count()) + " ms");
  if (opened == state_machine::opened::auth_failed) {
    if (opts.sasl)
      fail(errc::auth_failed, "zklock::session: SASL authentication (" + opts.sasl->mechanism +
                                  (opts.sasl->user.empty() ? "" : " as " + opts.sasl->user) +
                                  ") refused by the server");
    fail(errc::auth_failed, "zklock::session: authentication failed");
  }
  if (opened == state_machine::opened::tls_failed)
    fail(errc::ssl_connection_error, "zklock::session: the TLS handshake with \"" + opts.connect +
                                         "\" failed: " + states.tls_failure() +
                                         " (check the TLS options: the CA file must hold the CA that signed "
                                         "the servers' certificates, and the servers must trust this client's)");
  // Each credential in order, each answered before the next is sent; the C client keeps them all
  // and sends them again on every reconnection.
  for (const auth_info& auth : opts.auth) {
    struct auth_wait {
      std::mutex m;
      std::condition_variable c;
      bool done = false;
      int rc = 0;
    };
    auto w = std::make_shared<auth_wait>();
    auto* held = new std::shared_ptr<auth_wait>(w);  // freed by the completion
    const auto loop = handle.current();
    const int rc = !loop ? static_cast<int>(ZINVALIDSTATE) : loop->with_handle([&](zhandle_t* zh) {
      if (!zh) return static_cast<int>(ZINVALIDSTATE);
      return zoo_add_auth(
          zh, auth.scheme.c_str(), auth.credential.data(), static_cast<int>(auth.credential.size()),
          [](int rc2, const void* data) {
            auto* p = static_cast<std::shared_ptr<auth_wait>*>(const_cast<void*>(data));
            {
              std::lock_guard l{(*p)->m};
              (*p)->done = true;
              (*p)->rc = rc2;
            }
            (*p)->c.notify_all();
            delete p;
          },
          held);
    });
    if (rc != ZOK) {
      delete held;
      fail(static_cast<errc>(rc), "zklock::session: addauth (" + auth.scheme + ")");
    }
    std::unique_lock l{w->m};
    if (!w->c.wait_until(l, deadline, [&] { return w->done; })) {
      l.unlock();
      fail(errc::connect_timeout, "zklock::session: no answer to addauth (" + auth.scheme + ") within connect_timeout");
    }
    if (w->rc != ZOK) {
      const int r = w->rc;
      l.unlock();
      fail(static_cast<errc>(r), "zklock::session: authentication (" + auth.scheme + ") refused");
    }
  }
  if (!chroot.empty()) {
    const call_name what{"zklock::session: checking chroot ", chroot};
    const int rc = request(states.view().generation, what, nullptr, [&](zhandle_t* zh, const void* data) {
      return zoo_aexists(zh, "/", 0, &reply_to::on_stat, data);
    });
    if (rc == ZNONODE) fail(errc::chroot_missing, "zklock::session: chroot " + chroot + " does not exist");
    if (rc != ZOK) fail(static_cast<errc>(rc), "zklock::session: checking chroot " + chroot);
  }
}

}  // namespace zklock::detail
