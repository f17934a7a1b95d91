// SPDX-License-Identifier: Apache-2.0
// Deletes of our own nodes, and their retries. release_node deletes a released contender node on
// the caller's thread (waiting for the reply, or not with session_options::background_release or on
// a runner's thread outside a step: a completion dropping its hold); a
// delete whose outcome is unknown, or asked for while disconnected, goes to the session worker,
// which sends it once connected without waiting for the reply (send_pending); the replies arrive
// on the handle's I/O loop thread, which hands unknown outcomes back to the worker. What is
// queued, in flight or settling is kept by background_deletes.
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

namespace {

/// Returns: whether `rc`, a delete's answer, is the server refusing it (not done, gone already,
/// to be retried, or gone with the session).
bool refused_delete(int rc) noexcept {
  return !(rc == ZOK || rc == ZNONODE || unknown_outcome(rc) || rc == ZSESSIONEXPIRED || rc == ZINVALIDSTATE ||
           rc == ZCLOSING);
}

/// Effects: if the server refused to delete `path` (e.g. NOAUTH: the lock node's ACL lets us
/// create but not delete), says so through the log handler. Such a delete is not retried (the
/// answer would not change); the node stays until its session ends. Never throws.
void log_refused_delete(const std::string& path, int rc) noexcept {
  if (!refused_delete(rc)) return;  // gone, to be retried, or gone with the session
  try {
    const std::string needs =
        rc == ZNOAUTH ? " (needs DELETE permission on " + std::string{parent_of(path)} + ")" : std::string{};
    const std::string line = "zklock: the server refused to delete " + path + needs + ": " + zerror(rc) + " (" +
                             std::to_string(rc) + "); it stays until its session ends";
    zk_log_line(line.c_str());
  } catch (...) {  // allocation failure, or a throwing log handler: nothing more to do
  }
}

/// A delete sent without waiting for its reply (session_options::background_release).
struct background_delete {
  session_impl* s;
  pending_delete p;
  std::string settle;  // non-empty: the lock path whose next acquire waits for this reply
};

/// Ends a background request when a completion returns, whichever way it returns.
struct background_done {
  session_impl* s;
  ~background_done() { s->deletes.end(); }
};

/// Effects: sends one background request for `p`: `send(zh, box)` is a zoo_a* call whose
/// completion owns the box from then on and ends the request with a background_done.
/// Returns: false if it could not be sent (then nothing was done); true also if the handle is gone.
template <class Send>
bool send_in_background(session_impl& s, const pending_delete& p, Send send, std::string settle = {}) {
  const auto loop = s.handle.current();
  if (!loop) return true;
  auto box = std::make_unique<background_delete>(background_delete{&s, p, std::move(settle)});
  s.deletes.begin(box->settle);
  // A handle closing (zh null) is gone with its session, and its nodes with it: nothing to send.
  bool gone = false;
  int rc = ZOK;
  const bool now = loop->try_with_handle([&](zhandle_t* zh) {
    gone = !zh;
    if (!gone) rc = send(zh, box.get());
  });
  if (!now) {
    // The loop is running completions: it sends this at its next one, or before it polls again,
    // so that a release does not wait for all of them.
    loop->defer([&s, send, b = box.release()](zhandle_t* zh) {
      std::unique_ptr<background_delete> owned{b};
      if (zh && send(zh, owned.get()) == ZOK) {
        owned.release();  // owned by the completion now
        return;
      }
      s.deletes.end();
      if (!owned->settle.empty()) s.deletes.end_settle(owned->settle);
      try {
        if (zh) s.defer_delete(std::move(owned->p));  // not sent: the worker sends it once connected
      } catch (...) {  // allocation failure: the node goes with the session
      }
    });
    return true;
  }
  if (gone || rc != ZOK) {
    s.deletes.end();
    if (!box->settle.empty()) s.deletes.end_settle(box->settle);
    return gone;
  }
  box.release();  // owned by the completion now, which always comes (reply, loss or close)
  return true;
}

/// The listing of a lock node under which a node of ours (by its prefix) may stand: each one found
/// goes back to the worker as a plain delete. (On the handle's loop thread.)
extern "C" void on_prefixed_listing(int rc, const struct String_vector* kids, const void* data) noexcept {
  std::unique_ptr<background_delete> box{static_cast<background_delete*>(const_cast<void*>(data))};
  const background_done done{box->s};
  try {
    if (unknown_outcome(rc)) {
      box->s->defer_delete(std::move(box->p));
      return;
    }
    if (rc != ZOK || !kids) return;  // the lock node is gone, and our node with it
    for (int i = 0; i < kids->count; ++i)
      if (std::string_view{kids->data[i]}.starts_with(box->p.prefix))
        box->s->defer_delete({box->p.path + "/" + kids->data[i], {}, box->p.generation});
  } catch (...) {  // allocation failure: the node goes with the session
  }
}

extern "C" void on_background_delete(int rc, const void* data) noexcept {
  std::unique_ptr<background_delete> box{static_cast<background_delete*>(const_cast<void*>(data))};
  const background_done done{box->s};
  if (!box->settle.empty()) box->s->deletes.end_settle(box->settle);  // answered, or never will be: queue again
  log_refused_delete(box->p.path, rc);
  if (!unknown_outcome(rc)) return;
  try {
    box->s->defer_delete(std::move(box->p));  // the worker deletes it once connected again
  } catch (...) {  // allocation failure: the node goes with the session
  }
}

}  // namespace

/// Effects: sends what `p` asks for without waiting for the server: the worker must never block
/// on the network, since it also keeps the loss clock (a synchronous call can wait a whole
/// connection timeout, or several while the client reconnects into a partition). A completion
/// whose outcome is unknown hands the work back to the worker. Returns: false if it could not be
/// sent (keep it pending).
bool session_impl::send_pending(const pending_delete& p) {
  if (p.prefix.empty()) return delete_in_background(p);
  return send_in_background(*this, p, [](zhandle_t* h, background_delete* box) {
    return zoo_aget_children(h, box->p.path.c_str(), 0, &on_prefixed_listing, box);
  });
}

/// Effects: deletes the node p.path and waits for the reply (an unlock() on the caller's thread).
/// Returns: false if the outcome is unknown (hand it to the worker).
bool session_impl::delete_now(const pending_delete& p, int* result) {
  int rc = ZOK;
  std::uint64_t g = 0;
  std::shared_ptr<reply_state> sent;
  const auto loop = handle.current();
  if (!loop) return true;
  g = loop->ctx.generation;
  if (!loop->with_handle([&](zhandle_t* zh) {
        if (!zh) return false;
        sent = send_locked(
            *loop, zh, [&](zhandle_t* h, const void* d) { return zoo_adelete(h, p.path.c_str(), -1, &reply_to::on_void, d); },
            rc);
        return true;
      }))
    return true;
  if (sent) rc = await_reply(sent, g, nullptr);
  if (result) *result = rc;
  log_refused_delete(p.path, rc);
  return !unknown_outcome(rc);
}

/// Effects: sends the delete of p.path (no prefix) and returns; its completion retries it later
/// if the outcome is unknown. Returns: false if it could not be sent (then nothing was done).
bool session_impl::delete_in_background(const pending_delete& p, std::string settle) {
  return send_in_background(
      *this, p,
      [](zhandle_t* h, background_delete* box) {
        return zoo_adelete(h, box->p.path.c_str(), -1, &on_background_delete, box);
      },
      std::move(settle));
}

/// Effects: hands `p` to the worker, unless its session is gone (and the node with it).
void session_impl::defer_delete(pending_delete p) {
  if (!states.view().live(p.generation)) return;  // gone with its session
  deletes.queue(std::move(p));
  states.deletes_queued();
}

// ---- background_deletes ----------------------------------------------------------------------------

void background_deletes::queue(pending_delete p) {
  std::lock_guard lk{mu_};
  pending_.push_back(std::move(p));
}

std::vector<pending_delete> background_deletes::take() noexcept {
  std::lock_guard lk{mu_};
  return std::exchange(pending_, {});
}

void background_deletes::begin(const std::string& settle) {
  std::lock_guard lk{mu_};
  if (!settle.empty()) {
    settling_.push_back(settle);
    settling_count_.store(settling_.size(), std::memory_order_release);
  }
  ++inflight_;
}

void background_deletes::end() noexcept {
  bool last_awaited;
  {
    std::lock_guard lk{mu_};
    last_awaited = --inflight_ == 0 && idle_awaited_;
  }
  if (last_awaited) idle_cv_.notify_all();
}

void background_deletes::await_idle(clock::duration timeout) noexcept {
  std::unique_lock lk{mu_};
  idle_awaited_ = true;
  idle_cv_.wait_for(lk, timeout, [&] { return inflight_ == 0; });
}

void background_deletes::end_settle(const std::string& lock_path) noexcept {
  waiters woken;
  {
    std::lock_guard lk{mu_};
    const auto it = std::find(settling_.begin(), settling_.end(), lock_path);
    if (it != settling_.end()) settling_.erase(it);
    settling_count_.store(settling_.size(), std::memory_order_release);
    woken = settle_waiters_.take();
  }
  woken.wake_all();
}

bool background_deletes::settled(const std::string& lock_path, const std::shared_ptr<wake_target>& w) {
  if (settling_count_.load(std::memory_order_acquire) == 0) return true;
  std::lock_guard lk{mu_};
  if (std::find(settling_.begin(), settling_.end(), lock_path) == settling_.end()) return true;
  if (w) settle_waiters_.add(w);
  return false;
}

// ---- for the lock algorithm ------------------------------------------------------------------------

bool release_settled(session& sess, const std::string& lock_path, const std::shared_ptr<wake_target>& w) {
  return impl_of(sess).deletes.settled(lock_path, w);
}

std::error_code release_node(session& sess, const held_node& n) noexcept {
  session_impl& s = impl_of(sess);
  try {
    pending_delete p{n.path, {}, n.generation};
    const state_view v = s.states.view();
    if (!v.live(n.generation)) return {};  // gone with its session
    if (v.state != session_state::connected) {
      s.deletes.queue(std::move(p));
      s.states.deletes_queued();
      return {};
    }
    // On a runner's thread (a completion dropping its hold) the reply is not waited for either:
    // every other completion of that runner would wait behind it.
    if (s.opts.background_release || on_a_runner_thread()) {
      std::string settle;  // this session's next acquire of the lock queues behind the reply?
      if (settle_before_requeue(n.waited, clock::now() - n.granted_at, s.round_trips.estimate(),
                                s.opts.look_ahead_round_trip))
        settle = n.path.substr(0, n.path.rfind('/'));
      if (s.delete_in_background(p, std::move(settle))) return {};
    }
    int rc = ZOK;
    if (!s.delete_now(p, &rc)) s.defer_delete(std::move(p));
    if (refused_delete(rc)) return make_error_code(static_cast<errc>(rc));
  } catch (...) {  // allocation failure: nothing sensible left to do
  }
  return {};
}

void release_node_in_background(session& sess, const held_node& n) noexcept {
  session_impl& s = impl_of(sess);
  try {
    pending_delete p{n.path, {}, n.generation};
    const state_view v = s.states.view();
    if (!v.live(n.generation)) return;  // gone with its session
    if (v.state != session_state::connected || !s.delete_in_background(p)) s.defer_delete(std::move(p));
  } catch (...) {  // allocation failure: nothing sensible left to do
  }
}

}  // namespace zklock::detail
