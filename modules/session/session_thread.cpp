// SPDX-License-Identifier: Apache-2.0
// The session's own threads. The worker (one per session, for its whole life) delivers state
// changes to the listeners, keeps the loss clock (gives a session up after a suspension longer than
// the loss tolerance), re-establishes an expired session, requests the stop sources handed to it
// and sends the pending deletes. The reaper (started on the first give-up) closes given-up sessions
// on the server once one answers. run_on_session_thread runs on the caller's (or a completion)
// thread and hands work to the worker.
module;
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

// ---- the worker ------------------------------------------------------------------------------------

clock::duration session_impl::loss_tolerance() const {
  if (opts.loss_tolerance > std::chrono::milliseconds::zero()) return opts.loss_tolerance;
  const auto t = negotiated > std::chrono::milliseconds::zero() ? negotiated : opts.session_timeout;
  // The client notices silence 2/3 of t after it last heard from the server; the server may
  // expire the session t after it last heard from us, which is a little earlier (and we hear of
  // the silence a little late). Give up before that, with a margin of t/12, so that a waiter is
  // never granted our lock while we still believe we hold it (2/3 + 1/3 had no margin at all).
  return t / 4;
}

void session_impl::run_worker() {
  std::unique_lock lk{mu};
  for (;;) {
    auto wake_now = [&] {
      return stop_worker || !events.empty() || reopen_due || !stops.empty() ||
             (!pending.empty() && st == session_state::connected);
    };
    if (st == session_state::suspended && !loss.stop_requested()) {
      // The client does not report expiry while it cannot reach a server: keep our own clock.
      const auto deadline = suspended_at + loss_tolerance();
      cv.wait_until(lk, deadline, wake_now);
      if (!stop_worker && st == session_state::suspended && clock::now() >= deadline) {
        // The server may have expired us by now. Give the session up: its holds are lost, and a
        // closed handle cannot bring a stale node back when the network returns.
        auto lost = loss;
        post(session_state::expired);
        lk.unlock();
        lost.request_stop();
        std::optional<clientid_t> given_up;
        {
          std::shared_lock hl{handle_mu};
          if (zh)
            if (const clientid_t* id = zoo_client_id(zh); id && id->client_id) given_up = *id;
        }
        close_handle();
        lk.lock();
        if (given_up) {
          stale.push_back(*given_up);
          if (!reaper.joinable()) reaper = std::thread([this] { run_reaper(); });
          cv.notify_all();
        }
        reopen_due = opts.reestablish_after_expiry;
        continue;
      }
    } else if (!pending.empty() && st == session_state::connected) {
      cv.wait_for(lk, std::chrono::milliseconds{200}, [&] { return stop_worker || !events.empty() || !stops.empty(); });
    } else {
      cv.wait(lk, wake_now);
    }
    if (stop_worker) return;
    while (!events.empty()) {
      const session_state s = events.front();
      events.pop_front();
      if (s == session_state::expired) {
        auto lost = loss;
        lk.unlock();
        lost.request_stop();  // on this thread, never ZooKeeper's
        lk.lock();
        reopen_due = reopen_due || opts.reestablish_after_expiry;
      }
      lk.unlock();
      notify_listeners(s);
      lk.lock();
      if (stop_worker) return;
    }
    if (!stops.empty()) {
      auto todo = std::move(stops);
      stops.clear();
      lk.unlock();
      for (auto& st0 : todo) st0.request_stop();  // users' stop callbacks run here
      lk.lock();
      if (stop_worker) return;
    }
    if (reopen_due && !closed) {
      reopen_due = false;
      lk.unlock();
      try {
        open_handle();
      } catch (const std::system_error& e) {
        // Still expired. Refused credentials or a missing chroot stay so: give up (reestablish()
        // may try again); anything else (no server yet) is tried again, each attempt waiting
        // connect_timeout.
        const bool for_good = e.code() == make_error_code(errc::auth_failed) ||
                              e.code() == make_error_code(errc::no_auth) ||
                              e.code() == make_error_code(errc::chroot_missing);
        std::lock_guard l2{mu};
        reopen_refused = for_good;
        reopen_due = opts.reestablish_after_expiry && !closed && !for_good;
        cv.notify_all();
        wake_state_waiters();
      } catch (...) {  // allocation failure: try again
        std::lock_guard l2{mu};
        reopen_due = opts.reestablish_after_expiry && !closed;
      }
      lk.lock();
      if (stop_worker) return;
    }
    if (!pending.empty() && st == session_state::connected) {
      auto work = std::move(pending);
      pending.clear();
      const auto g = gen;
      lk.unlock();
      std::vector<pending_delete> again;
      for (auto& p : work)
        if (p.generation == g && !send_pending(p)) again.push_back(std::move(p));
      lk.lock();
      for (auto& p : again) pending.push_back(std::move(p));
    }
  }
}

void run_on_session_thread(session& sess, std::stop_source stop) noexcept {
  session_impl& s = sess.impl();
  std::unique_lock lk{s.mu};
  if (s.closed) {  // no worker any more: the session is closed, every hold is lost anyway
    lk.unlock();
    stop.request_stop();
    return;
  }
  try {
    s.stops.push_back(std::move(stop));
  } catch (...) {
    return;
  }
  s.cv.notify_all();
}

// ---- the reaper: close given-up sessions on the server ---------------------------------------------

void session_impl::run_reaper() {
  std::unique_lock lk{mu};
  while (!stop_worker) {
    if (stale.empty()) {
      cv.wait(lk, [&] { return stop_worker || !stale.empty(); });
      continue;
    }
    const auto todo = stale;
    lk.unlock();
    std::vector<std::int64_t> done;
    for (const auto& id : todo)
      if (close_on_server(id)) done.push_back(id.client_id);
    lk.lock();
    std::erase_if(stale, [&](const clientid_t& id) {
      return std::find(done.begin(), done.end(), id.client_id) != done.end();
    });
    if (!stale.empty()) cv.wait_for(lk, std::chrono::milliseconds{250}, [&] { return stop_worker; });
  }
}

namespace {

struct reap_box {
  std::mutex m;
  std::condition_variable c;
  int state = 0;  // ZOO_CONNECTED_STATE or ZOO_EXPIRED_SESSION_STATE once known
};

extern "C" void reap_watcher(zhandle_t*, int type, int state, const char*, void* ctx) {
  if (type != ZOO_SESSION_EVENT || !ctx) return;
  if (state != ZOO_CONNECTED_STATE && state != ZOO_EXPIRED_SESSION_STATE) return;
  auto* b = static_cast<reap_box*>(ctx);
  {
    std::lock_guard lk{b->m};
    b->state = state;
  }
  b->c.notify_all();
}

}  // namespace

bool session_impl::close_on_server(const clientid_t& id) {
  reap_box box;
  zhandle_t* h = zookeeper_init2(opts.connect.c_str(), &reap_watcher, static_cast<int>(opts.session_timeout.count()),
                                 &id, &box, 0, &zk_log_line);
  if (!h) return false;
  int state;
  {
    std::unique_lock l{box.m};
    box.c.wait_for(l, opts.session_timeout / 3, [&] { return box.state != 0; });
    state = box.state;
  }
  zookeeper_close(h);  // connected: sends closeSession; joins the client's threads either way
  return state != 0;
}

}  // namespace zklock::detail
