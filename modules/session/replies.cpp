// SPDX-License-Identifier: Apache-2.0
// Requests and their replies: every request zklock sends goes out with the C client's asynchronous
// call and is waited for on the caller's thread, holding no lock (session_impl::request). The
// completions here fill in the reply; a handle closed first answers what it never will
// (answer_unanswered), and a waiter whose generation ended stops waiting.
module;
// The headers of zklock:session_impl too: what its members use must be reachable here.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <coroutine>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <span>
#include <stop_token>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>
#include "zklock_zk_client.h"  // the C client, zklock's private copy (cmake/zklockPrivateClient.cmake)
module zklock;
import :session_impl;

namespace zklock::detail {

void session_impl::unlist(reply_state& p) noexcept {
  handle_ctx* owner = p.owner;
  if (!owner) return;
  std::lock_guard l{owner->requests_mu};
  if (p.prev) p.prev->next = p.next;
  else owner->requests = p.next;
  if (p.next) p.next->prev = p.prev;
  p.prev = p.next = nullptr;
  p.owner = nullptr;
}

namespace {

/// Effects: answers `p` with `rc` and what `fill` puts in its reply (an allocation failure there
/// makes it ZSYSTEMERROR: the caller cannot tell what happened, as after a lost connection).
/// A step parked for the reply resumes on this thread if `here` (the handle's I/O loop thread),
/// else on a step thread.
template <class Fill>
void answer(const void* data, int rc, Fill&& fill, bool here = true) noexcept {
  auto* p = static_cast<reply_state*>(const_cast<void*>(data));
  if (here && p->owner && p->owner->loop) p->owner->loop->flush_deferred();  // others' sends first
  session_impl::unlist(*p);
  std::shared_ptr<reply_state> keep;
  fiber* parked = nullptr;
  std::uint64_t ticket = 0;
  bool notify = false;
  {
    std::lock_guard l{p->m};
    p->rc = rc;
    if (rc == ZOK) {
      try {
        fill(p->r);
      } catch (...) {
        p->rc = ZSYSTEMERROR;
      }
    }
    p->done = true;
    keep = std::move(p->self);  // released below, after the waiter is told
    if (p->parked) {
      parked = p->parked;
      ticket = p->ticket;
    } else {
      notify = true;
    }
  }
  // After p->m is let go (`keep` keeps p): a thread woken while we held it would only wait for it
  // again (a second wake-up), and the step takes it when it resumes. A step that woke meanwhile
  // (its timer) has moved to another ticket; the fiber outlives it (it is its runner's).
  if (notify) p->cv.notify_all();
  if (parked) fiber_wake(*parked, ticket, here);
}

/// Effects: copies a listing's names into `r` (one buffer for them all).
void fill_names(reply& r, const struct String_vector& names) {
  const std::span<char* const> each{names.data, static_cast<std::size_t>(std::max(names.count, 0))};
  std::size_t bytes = 0;
  for (const char* n : each) bytes += std::strlen(n);
  r.names.reserve(each.size(), bytes);
  for (const char* n : each) r.names.push_back(n);
}

}  // namespace

namespace reply_to {

void on_void(int rc, const void* data) {
  answer(data, rc, [](reply&) {});
}

void on_string(int rc, const char* value, const void* data) {
  answer(data, rc, [&](reply& r) { r.value = value ? value : ""; });
}

void on_string_stat(int rc, const char* value, const struct Stat* st, const void* data) {
  answer(data, rc, [&](reply& r) {
    r.value = value ? value : "";
    if (st) r.stat = *st;
  });
}

void on_stat(int rc, const struct Stat* st, const void* data) {
  answer(data, rc, [&](reply& r) {
    if (st) r.stat = *st;
  });
}

void on_data(int rc, const char* value, int len, const struct Stat* st, const void* data) {
  answer(data, rc, [&](reply& r) {
    r.no_data = !value || len < 0;
    if (!r.no_data) r.value.assign(value, static_cast<std::size_t>(len));
    if (st) r.stat = *st;
  });
}

void on_names(int rc, const struct String_vector* names, const void* data) {
  answer(data, rc, [&](reply& r) {
    if (names) fill_names(r, *names);
  });
}

void on_names_stat(int rc, const struct String_vector* names, const struct Stat* st, const void* data) {
  answer(data, rc, [&](reply& r) {
    if (st) r.stat = *st;
    if (names) fill_names(r, *names);
  });
}

void on_acl(int rc, struct ACL_vector* acl, struct Stat* st, const void* data) {
  answer(data, rc, [&](reply& r) {
    if (st) r.stat = *st;
    if (!acl) return;
    for (int i = 0; i < acl->count; ++i)
      r.acl.push_back({acl->data[i].perms, acl->data[i].id.scheme ? acl->data[i].id.scheme : "",
                       acl->data[i].id.id ? acl->data[i].id.id : ""});
  });
}

}  // namespace reply_to

void answer_unanswered(handle_ctx& ctx, int rc) noexcept {
  for (;;) {
    reply_state* p;
    {
      std::lock_guard l{ctx.requests_mu};
      p = ctx.requests;
    }
    if (!p) return;
    answer(p, rc, [](reply&) {}, false);  // unlists it; steps resume on their step threads
  }
}

int session_impl::await_reply(const std::shared_ptr<reply_state>& p, std::uint64_t g, reply* out) {
  // The client answers every request it sent, and close_handle every one it never will; only a
  // request that reached the client after its loop ended waits for that close, which an
  // expired session without re-establishment never has. So a waiter looks at its generation when
  // its reply is late, not on every request (this costs nothing while replies come).
  constexpr auto late = std::chrono::milliseconds{100};
  std::unique_lock lk{p->m};
  if (fiber* f = this_fiber()) {
    // A step of an asynchronous acquire: its fiber parks, and its step thread takes other steps.
    while (!p->done) {
      p->parked = f;
      p->ticket = fiber_ticket(*f);
      lk.unlock();
      fiber_park(*f, p->ticket, std::chrono::steady_clock::now() + late);  // the reply wakes it, or the timer when late
      lk.lock();
      p->parked = nullptr;
      if (p->done) break;
      lk.unlock();
      const bool live = states.view().live(g);
      lk.lock();
      if (!live && !p->done) return ZINVALIDSTATE;
    }
    if (out) *out = std::move(p->r);
    return p->rc;
  }
  while (!p->cv.wait_for(lk, late, [&] { return p->done; })) {
    lk.unlock();
    const bool live = states.view().live(g);
    lk.lock();
    if (!live && !p->done) return ZINVALIDSTATE;  // the generation is over: its reply no longer matters
  }
  if (out) *out = std::move(p->r);
  return p->rc;
}

}  // namespace zklock::detail
