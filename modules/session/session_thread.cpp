// SPDX-License-Identifier: Apache-2.0
// The session's own threads. The worker (one per session, for its whole life) delivers state
// changes to the listeners, keeps the loss clock (gives a session up after a suspension longer than
// the loss tolerance), re-establishes an expired session, requests the stop sources handed to it
// and sends the pending deletes. The reaper (started on the first give-up) closes given-up sessions
// on the server once one answers. What the worker does next is the state machine's decision
// (next_work); run_on_session_thread runs on the caller's (or a completion) thread and hands work
// to the worker.
module;
#include <pthread.h>
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

namespace zklock::detail {

// ---- the state machine's side of the worker --------------------------------------------------------

clock::duration state_machine::loss_tolerance() const {
  if (opts_.loss_tolerance > std::chrono::milliseconds::zero()) return opts_.loss_tolerance;
  const auto t = negotiated_ > std::chrono::milliseconds::zero() ? negotiated_ : opts_.session_timeout;
  // The client notices silence 2/3 of t after it last heard from the server; the server may
  // expire the session t after it last heard from us, which is a little earlier (and we hear of
  // the silence a little late). Give up before that, with a margin of t/12, so that a waiter is
  // never granted our lock while we still believe we hold it (2/3 + 1/3 had no margin at all).
  return t / 4;
}

state_machine::work state_machine::next_work() {
  using kind = work::kind;
  std::unique_lock lk{mu_};
  for (;;) {
    if (stop_worker_) return {};
    switch (stage_) {
      case stage::wait: {
        auto wake_now = [&] {
          return stop_worker_ || !events_.empty() || reopen_due_ || !stops_.empty() ||
                 (deletes_due_ && st_ == session_state::connected);
        };
        if (st_ == session_state::suspended && !loss_.stop_requested()) {
          // The client does not report expiry while it cannot reach a server: keep our own clock.
          const auto deadline = suspended_at_ + loss_tolerance();
          cv_.wait_until(lk, deadline, wake_now);
          if (!stop_worker_ && st_ == session_state::suspended && clock::now() >= deadline) {
            // The server may have expired us by now. Give the session up: its holds are lost, and
            // a closed handle cannot bring a stale node back when the network returns.
            work w{kind::give_up};
            w.lost = loss_;
            post(session_state::expired);
            reopen_due_ = opts_.reestablish_after_expiry;
            return w;  // then wait again (the expiry is queued: at once)
          }
        } else if (deletes_due_ && st_ == session_state::connected) {
          // Deletes that could not be sent: again in a while.
          cv_.wait_for(lk, std::chrono::milliseconds{200},
                       [&] { return stop_worker_ || !events_.empty() || !stops_.empty(); });
        } else {
          cv_.wait(lk, wake_now);
        }
        stage_ = stage::events;
        continue;
      }
      case stage::events:
        if (!events_.empty()) {
          work w{kind::deliver};
          w.state = events_.front();
          events_.pop_front();
          if (w.state == session_state::expired) {
            w.lost = loss_;  // requested on the worker, never on ZooKeeper's thread
            reopen_due_ = reopen_due_ || opts_.reestablish_after_expiry;
          }
          return w;
        }
        stage_ = stage::stops;
        continue;
      case stage::stops:
        stage_ = stage::reopen;
        if (!stops_.empty()) {
          work w{kind::request_stops};
          w.stops.swap(stops_);
          return w;
        }
        continue;
      case stage::reopen:
        stage_ = stage::deletes;
        if (reopen_due_ && !closed_) {
          reopen_due_ = false;
          return work{kind::reopen};
        }
        continue;
      case stage::deletes:
        stage_ = stage::wait;
        if (deletes_due_ && st_ == session_state::connected) {
          deletes_due_ = false;
          work w{kind::send_deletes};
          w.generation = gen_;
          return w;
        }
        continue;
    }
  }
}

void state_machine::reopen_failed(bool for_good) {
  std::lock_guard lk{mu_};
  reopen_refused_ = for_good;
  reopen_due_ = opts_.reestablish_after_expiry && !closed_ && !for_good;
  cv_.notify_all();
  next_waiters_.wake_all();
}

void state_machine::reopen_again() noexcept {
  std::lock_guard lk{mu_};
  reopen_due_ = opts_.reestablish_after_expiry && !closed_;
}

bool state_machine::queue_stop(const std::stop_source& stop) noexcept {
  std::lock_guard lk{mu_};
  if (closed_) return false;
  try {
    stops_.push_back(stop);
  } catch (...) {  // allocation failure: the stop is lost
    return true;
  }
  cv_.notify_all();
  return true;
}

void state_machine::deletes_queued() noexcept {
  std::lock_guard lk{mu_};
  deletes_due_ = true;
  cv_.notify_all();
}

// ---- the worker ------------------------------------------------------------------------------------

void session_impl::run_worker() {
  ::pthread_setname_np(::pthread_self(), "zklock-worker");  // for ps, top, perf and gdb
  using kind = state_machine::work::kind;
  for (;;) {
    state_machine::work w = states.next_work();
    switch (w.what) {
      case kind::stop:
        return;
      case kind::deliver:
        w.lost.request_stop();  // an expiry: its holds are lost
        listeners.notify(w.state, states);
        break;
      case kind::request_stops:
        for (auto& stop : w.stops) stop.request_stop();  // users' stop callbacks run here
        break;
      case kind::give_up: {
        w.lost.request_stop();
        std::optional<clientid_t> given_up;
        if (const auto loop = handle.current())
          loop->with_handle([&](zhandle_t* zh) {
            if (const clientid_t* id = zh ? zoo_client_id(zh) : nullptr; id && id->client_id) given_up = *id;
          });
        close_handle();
        if (given_up) reaper.add(*this, *given_up);
        break;
      }
      case kind::reopen:
        try {
          open_handle();
        } catch (const std::system_error& e) {
          // Still expired. Refused credentials or a missing chroot stay so: give up (reestablish()
          // may try again); anything else (no server yet) is tried again, each attempt waiting
          // connect_timeout.
          states.reopen_failed(e.code() == make_error_code(errc::auth_failed) ||
                               e.code() == make_error_code(errc::no_auth) ||
                               e.code() == make_error_code(errc::chroot_missing));
        } catch (...) {  // allocation failure: try again
          states.reopen_again();
        }
        break;
      case kind::send_deletes: {
        std::vector<pending_delete> again;
        for (auto& p : deletes.take())
          if (p.generation == w.generation && !send_pending(p)) again.push_back(std::move(p));
        if (again.empty()) break;
        for (auto& p : again) deletes.queue(std::move(p));
        states.deletes_queued();
        break;
      }
    }
  }
}

void run_on_session_thread(session& sess, std::stop_source stop) noexcept {
  // Closed: no worker any more; every hold is lost anyway.
  if (!impl_of(sess).states.queue_stop(stop)) stop.request_stop();
}

// ---- the reaper: close given-up sessions on the server ---------------------------------------------

void session_reaper::add(session_impl& s, const clientid_t& id) {
  std::lock_guard lk{mu_};
  stale_.push_back(id);
  if (!thread_.joinable()) thread_ = std::thread([this, &s] { run(s); });
  cv_.notify_all();
}

void session_reaper::request_stop() noexcept {
  {
    std::lock_guard lk{mu_};
    stop_ = true;
  }
  cv_.notify_all();
}

void session_reaper::join() noexcept {
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void session_reaper::run(session_impl& s) {
  ::pthread_setname_np(::pthread_self(), "zklock-reaper");  // for ps, top, perf and gdb
  std::unique_lock lk{mu_};
  while (!stop_) {
    if (stale_.empty()) {
      cv_.wait(lk, [&] { return stop_ || !stale_.empty(); });
      continue;
    }
    const auto todo = stale_;
    lk.unlock();
    std::vector<std::int64_t> done;
    for (const auto& id : todo)
      if (s.close_on_server(id)) done.push_back(id.client_id);
    lk.lock();
    std::erase_if(stale_, [&](const clientid_t& id) {
      return std::find(done.begin(), done.end(), id.client_id) != done.end();
    });
    if (!stale_.empty()) cv_.wait_for(lk, std::chrono::milliseconds{250}, [&] { return stop_; });
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
  io_loop loop{this, 0};
  if (!loop.open(opts.connect, &reap_watcher, static_cast<int>(opts.session_timeout.count()), &id, &box)) return false;
  int state;
  {
    std::unique_lock l{box.m};
    box.c.wait_for(l, opts.session_timeout / 3, [&] { return box.state != 0; });
    state = box.state;
  }
  loop.close();  // connected: sends closeSession; its loop ends either way
  return state != 0;
}

}  // namespace zklock::detail
