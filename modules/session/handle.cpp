// SPDX-License-Identifier: Apache-2.0
// The C client's handle of a session: opening it (connect, auth, chroot check), closing it, and
// its session watcher. open_handle runs on the caller's thread (the session's constructor,
// reestablish()) or on the session worker (re-establishment after expiry); close_handle on
// whichever thread closes or gives up the session; session_watcher on the C client's completion
// thread.
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
#include <system_error>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>
#include <zookeeper/zookeeper.h>
module zklock;
import :session_impl;

namespace zklock::detail {

void session_impl::session_watcher(zhandle_t* zh, int type, int state, const char*, void* vctx) {
  if (type != ZOO_SESSION_EVENT || !vctx) return;
  auto* c = static_cast<handle_ctx*>(vctx);
  session_impl& s = *c->impl;
  std::lock_guard lk{s.mu};
  // A replaced handle, or one given up: `expired` ends a generation for good. (A handle given up
  // after a long disconnection may still reconnect, its session alive on the server, before the
  // worker closes it: that must not bring the generation back to `connected`.)
  if (c->generation != s.gen || s.closed || s.st == session_state::expired) return;
  if (state == ZOO_CONNECTED_STATE) {
    s.connected_once = true;
    if (const clientid_t* id = zoo_client_id(zh)) s.sid = id->client_id;
    s.negotiated = std::chrono::milliseconds{zoo_recv_timeout(zh)};
    s.post(session_state::connected);
  } else if (state == ZOO_CONNECTING_STATE || state == ZOO_ASSOCIATING_STATE) {
    s.post(s.connected_once ? session_state::suspended : session_state::connecting);
  } else if (state == ZOO_EXPIRED_SESSION_STATE) {
    s.post(session_state::expired);
  } else if (state == ZOO_AUTH_FAILED_STATE) {
    s.auth_failed = true;
    s.cv.notify_all();
  }
}

void session_impl::close_handle() {
  std::unique_lock hl{handle_mu};
  if (zh) {
    zookeeper_close(zh);  // joins the client's threads: no callback of it runs after this
    zh = nullptr;
  }
  ctx.reset();
  wake_all_groups(this);  // a closed handle fires no watch: its waiters must hear of it
}


void session_impl::open_handle(bool first) {
  std::lock_guard rl{reopen_mu};
  if (!first) {  // the worker and reestablish() may both get here: the second has nothing to do
    std::lock_guard lk{mu};
    if (!closed && st != session_state::expired) return;
  }
  close_handle();
  const auto deadline = clock::now() + opts.connect_timeout;
  std::stop_source old_loss;
  {
    // One step for callers: the new generation and its handle appear together (a call that saw
    // the new generation with no handle yet would hand the C client a null handle).
    std::unique_lock hl{handle_mu};
    {
      std::lock_guard lk{mu};
      if (closed) throw_error(errc::session_closed, "zklock::session");
      old_loss = std::exchange(loss, std::stop_source{});
      ++gen;
      reopen_refused = false;
      connected_once = false;
      auth_failed = false;
      sid = 0;
      post(session_state::connecting);
      ctx = std::make_unique<handle_ctx>(handle_ctx{this, gen});
    }
    refresh_client_log_level();
    errno = 0;
    zh = zookeeper_init2(opts.connect.c_str(), &session_watcher, static_cast<int>(opts.session_timeout.count()),
                         nullptr, ctx.get(), 0, &zk_log_line);
    if (!zh) {
      const int e = errno;
      ctx.reset();
      {
        std::lock_guard lk{mu};
        post(first ? session_state::closed : session_state::expired);
      }
      old_loss.request_stop();
      throw std::system_error(e ? e : EINVAL, std::generic_category(),
                              "zklock::session: the ZooKeeper client refused \"" + opts.connect + "\"");
    }
  }
  old_loss.request_stop();  // holds of the replaced handle are gone, if they were not already
  auto fail = [&](errc e, const std::string& what) {
    close_handle();
    std::lock_guard lk{mu};
    post(first ? session_state::closed : session_state::expired);
    throw_error(e, what);
  };
  {
    std::unique_lock lk{mu};
    if (!cv.wait_until(lk, deadline, [&] { return st == session_state::connected || auth_failed || closed; })) {
      lk.unlock();
      fail(errc::connect_timeout, "zklock::session: no session with \"" + opts.connect + "\" within " +
                                      std::to_string(opts.connect_timeout.count()) + " ms");
    }
    if (auth_failed) {
      lk.unlock();
      fail(errc::auth_failed, "zklock::session: authentication failed");
    }
  }
  if (opts.auth) {
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
      std::shared_lock hl{handle_mu};
      rc = zoo_add_auth(
          zh, opts.auth->scheme.c_str(), opts.auth->credential.data(), static_cast<int>(opts.auth->credential.size()),
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
      fail(static_cast<errc>(rc), "zklock::session: addauth");
    }
    std::unique_lock l{w->m};
    if (!w->c.wait_until(l, deadline, [&] { return w->done; })) {
      l.unlock();
      fail(errc::connect_timeout, "zklock::session: no answer to addauth within connect_timeout");
    }
    if (w->rc != ZOK) {
      const int r = w->rc;
      l.unlock();
      fail(static_cast<errc>(r), "zklock::session: authentication (" + opts.auth->scheme + ") refused");
    }
  }
  if (!chroot.empty()) {
    struct Stat stat;
    int rc;
    {
      std::shared_lock hl{handle_mu};
      rc = zoo_exists(zh, "/", 0, &stat);
    }
    if (rc == ZNONODE) fail(errc::chroot_missing, "zklock::session: chroot " + chroot + " does not exist");
    if (rc != ZOK) fail(static_cast<errc>(rc), "zklock::session: checking chroot " + chroot);
  }
}

}  // namespace zklock::detail
