// SPDX-License-Identifier: Apache-2.0
// The C client's handle of a session: opening it (connect, auth, chroot check), closing it, and
// its session watcher, with the state machine's side of them (a new generation, the client's
// states). open_handle runs on the caller's thread (the session's constructor, reestablish()) or on
// the session worker (re-establishment after expiry); close_handle on whichever thread closes or
// gives up the session; session_watcher on the C client's completion thread.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
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
#include <zookeeper/zookeeper.h>
module zklock;
import :session_impl;

namespace zklock::detail {

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
  sid_ = 0;
  post(session_state::connecting);
  return {std::move(old_loss), gen_};
}

state_machine::opened state_machine::wait_opened(clock::time_point deadline) {
  std::unique_lock lk{mu_};
  if (!cv_.wait_until(lk, deadline, [&] { return st_ == session_state::connected || auth_failed_ || closed_; }))
    return opened::timed_out;
  return auth_failed_ ? opened::auth_failed : opened::ready;
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
  // Taken out under the lock (no request is being handed to it then, and none will be: a sender
  // finds no handle), closed without it: the client's completion thread runs steps of
  // asynchronous acquires (replies.cpp), which may send, and zookeeper_close waits for that thread.
  zhandle_t* zh = nullptr;
  std::unique_ptr<handle_ctx> ctx;
  {
    std::unique_lock hl{handle.mu};
    zh = std::exchange(handle.zh, nullptr);
    ctx = std::move(handle.ctx);
  }
  if (zh) zookeeper_close(zh);  // joins the client's threads: no callback of it runs after this
  if (ctx) answer_unanswered(*ctx, ZCLOSING);  // what the client will never answer now
  ctx.reset();
  watches.wake_all();  // a closed handle fires no watch: its waiters must hear of it
}

namespace {
/// How often the C client resolves its server list again while connected (see open_handle).
constexpr int resolution_delay_ms = 60'000;
}  // namespace

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
    handle.ctx = std::make_unique<handle_ctx>(this, g);
    refresh_client_log_level();
    errno = 0;
    handle.zh = zookeeper_init2(opts.connect.c_str(), &session_watcher, static_cast<int>(opts.session_timeout.count()),
                                nullptr, handle.ctx.get(), 0, &zk_log_line);
    if (!handle.zh) {
      const int e = errno;
      handle.ctx.reset();
      states.open_failed(first);
      old_loss.request_stop();
      throw std::system_error(e ? e : EINVAL, std::generic_category(),
                              "zklock::session: the ZooKeeper client refused \"" + opts.connect + "\"");
    }
    // By default the client resolves its server list each time its I/O loop checks the socket
    // (getaddrinfo: a netlink socket and /etc/hosts, about ten system calls, several times per
    // request: a third of the client's CPU at loopback). Once a minute still sees a DNS change, for
    // the next connection.
    zoo_set_servers_resolution_delay(handle.zh, resolution_delay_ms);
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
  if (opened == state_machine::opened::auth_failed) fail(errc::auth_failed, "zklock::session: authentication failed");
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
    int rc;
    {
      std::shared_lock hl{handle.mu};
      rc = zoo_add_auth(
          handle.zh, auth.scheme.c_str(), auth.credential.data(), static_cast<int>(auth.credential.size()),
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
    }
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
