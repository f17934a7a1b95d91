// SPDX-License-Identifier: Apache-2.0
// peer_runner: scenario h (the session expires while holding: how the holder learns it).
#include "common.hpp"

#include <cstring>
#include <stop_token>

namespace peer {

// ---- (h) session expiry while holding ---------------------------------------------------------------

template <class W>
void scen_expiry(raw_zk& raw) {
  const auto path = path_of<W>("h-expiry"), rpath = path_of<W>("h-expiry-recursive");
  auto ss = open_sessions(2);
  zklock::session& a = *ss[0];
  struct seen_states {
    std::mutex mu;
    std::vector<std::string> states;
    std::int64_t suspended_at = 0;  // the last `suspended` before `expired`
    std::int64_t expired_at = 0;
    std::int64_t lost_signal_at = 0;  // ma.lost_token() fired
  };
  auto seen = std::make_shared<seen_states>();
  const auto listener = a.add_state_listener([seen](zklock::session_state st) {
    std::lock_guard lk{seen->mu};
    seen->states.emplace_back(zklock::to_string(st));
    if (st == zklock::session_state::expired && seen->expired_at == 0) seen->expired_at = now_ns();
    if (st == zklock::session_state::suspended && seen->expired_at == 0) seen->suspended_at = now_ns();
  });
  mutex_t<W> ma{a, path}, mb{*ss[1], path};
  recursive_t<W> ra{a, rpath}, rb{*ss[1], rpath};
  ma.lock();
  ra.lock();
  const auto generation_before = a.generation();
  // zklock's loss signal of the hold (the peers have none): when does the lock object learn?
  const std::stop_callback on_lost{ma.lost_token(), [seen] {
                                     std::lock_guard lk{seen->mu};
                                     seen->lost_signal_at = now_ns();
                                   }};

  // Expire A's session: a second handle with its id and password, then close. A's own handle may
  // win the session back (it reconnects within milliseconds), so retry until B gets the lock.
  bool b_got = false;
  double b_ms = kNaN;
  std::int64_t tx = 0;
  int attempts = 0;
  while (!b_got && attempts < 10) {
    ++attempts;
    zklock::session_credentials cred;
    try {
      cred = a.credentials();
    } catch (const std::system_error&) {  // between two of A's sessions: try again
      continue;
    }
    clientid_t id{};
    id.client_id = cred.id;
    std::memcpy(id.passwd, cred.password.data(), std::min(cred.password.size(), sizeof id.passwd));
    raw_zk evil{cfg.zk, &id};
    tx = now_ns();
    evil.close();  // closeSession on the server: A's session ends, its nodes go
    const auto s0 = now_ns();
    b_got = mb.try_lock_for(attempts < 10 ? 2s : 10s);
    b_ms = static_cast<double>(now_ns() - s0) / 1e6;
  }
  // Wait for A's listener to see `expired`. Usually A learns it on its next reconnect (well under
  // a second); if A's handle had won the session back just before the close, it learns only from
  // the server's silence (2/3 of the session timeout) plus the loss tolerance: wait past that
  // (the peers wait 10 s).
  const auto w0 = clk::now();
  for (;;) {
    {
      std::lock_guard lk{seen->mu};
      if (seen->expired_at != 0) break;
    }
    if (clk::now() - w0 > kSessionTimeout + 15s) break;
    std::this_thread::sleep_for(5ms);
  }
  const bool still = ma.owns_lock();
  const bool still_owned = ma.still_owned();
  bool reacq = false;
  std::string reacq_result;
  try {
    reacq = ma.try_lock();
    reacq_result = reacq ? "true" : "false";
  } catch (const std::system_error& e) {
    reacq_result = std::string{"throws: "} + e.code().message();
  }
  const bool both = (still || reacq) && b_got && mb.owns_lock();
  ma.unlock();  // noexcept
  if (reacq) ma.unlock();
  const std::string rel = "ok (unlock() is noexcept)";

  // The re-entrant type (Curator's InterProcessMutex is re-entrant): does a re-lock after expiry
  // succeed locally while another client holds the lock?
  const bool r_still = ra.owns_lock();
  const bool r_still_owned = ra.still_owned();
  const bool rb_got = rb.try_lock_for(5s);
  bool r_reacq = false;
  std::string r_reacq_result;
  try {
    r_reacq = ra.try_lock();
    r_reacq_result = r_reacq ? "true" : "false";
  } catch (const std::system_error& e) {
    r_reacq_result = std::string{"throws: "} + e.code().message();
  }
  const bool r_both = (r_still || r_reacq) && rb_got && rb.owns_lock();
  if (r_reacq) ra.unlock();
  ra.unlock();
  if (rb_got) rb.unlock();
  if (b_got) mb.unlock();
  std::this_thread::sleep_for(300ms);
  a.remove_state_listener(listener);
  std::string states;
  double lost_ms = kNaN, suspended_ms = kNaN, lost_signal_ms = kNaN;
  {
    std::lock_guard lk{seen->mu};
    for (const auto& s : seen->states) states += (states.empty() ? "" : ">") + s;
    if (seen->expired_at) lost_ms = static_cast<double>(seen->expired_at - tx) / 1e6;
    if (seen->suspended_at) suspended_ms = static_cast<double>(seen->suspended_at - tx) / 1e6;
    if (seen->lost_signal_at) lost_signal_ms = static_cast<double>(seen->lost_signal_at - tx) / 1e6;
  }
  flush_all(ss);
  json(strategy<W>::lib, "h_session_expiry")
      .boolean("other_client_acquired", b_got)
      .num("other_acquire_ms", b_ms)
      .integer("expire_attempts", attempts)
      .num("lost_event_ms", lost_ms)
      .str("lost_event", "session listener: expired")
      .num("suspended_event_ms", suspended_ms)  // negative: before the close (the second handle's connect)
      .str("states", states)
      .num("lost_token_ms", lost_signal_ms)
      .boolean("lock_object_still_claims_held", still)
      .boolean("still_owned_after_expiry", still_owned)
      .boolean("reacquire_without_release_succeeds", reacq)
      .str("reacquire_result", "mutex::try_lock(): " + reacq_result)
      .boolean("both_believe_they_hold", both)
      .str("release_after_expiry", rel)
      .boolean("recursive_still_claims_held", r_still)
      .boolean("recursive_still_owned_after_expiry", r_still_owned)
      .boolean("recursive_other_client_acquired", rb_got)
      .boolean("recursive_reacquire_without_release_succeeds", r_reacq)
      .str("recursive_reacquire_result", "recursive_mutex::try_lock(): " + r_reacq_result)
      .boolean("recursive_both_believe_they_hold", r_both)
      .str("session_state_after", zklock::to_string(a.state()))
      .integer("session_generations", static_cast<long long>(a.generation() - generation_before + 1))
      .integer("leftover_nodes", raw.count(path) + raw.count(rpath))
      .emit();
}

PEER_SCENARIO(scen_expiry, raw_zk&);

}  // namespace peer
