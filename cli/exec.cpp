// SPDX-License-Identifier: Apache-2.0
// Acquiring a lock as `zklock exec` and `zklock lock` do: acquires the lock in the chosen mode (a signal, or the end of lock's stdin, ends the wait), and
// records what the acquire cost for `zklock ls`. `zklock exec PATH CMD` then looks CMD up and hands
// it to supervise() with the hold's fencing token, its loss signal and its release.
#include <poll.h>
#include <sys/signalfd.h>
#include <unistd.h>
#include <algorithm>
#include <cstring>
#include <memory>
#include "cli.hpp"

namespace zkcli {
namespace {

/// exec's hooks: keep the figures of the granted acquire in `*out`, which exec then records for
/// `zklock ls` (the main thread acquires, then reads them: no other thread involved). The stats'
/// `path` views the lock object's, which outlives every use here.
struct record_hooks {
  static constexpr bool enabled = true;
  std::optional<zklock::acquire_stats>* out = nullptr;
  void on_acquire(const zklock::acquire_stats& a) noexcept {
    if (a.acquired) *out = a;
  }
  void on_release(const zklock::release_stats&) noexcept {}
};
using exec_policies = zklock::policies_with<record_hooks>;
using exec_mutex = zklock::basic_mutex<exec_policies>;
using exec_shared_mutex = zklock::basic_shared_mutex<exec_policies>;
using exec_semaphore = zklock::basic_counting_semaphore<exec_policies>;

/// Effects: one attempt (timeout 0), a wait bounded by `timeout`, or a wait without end (none).
/// Returns: whether the lock is held.
template <class Once, class For, class Forever>
bool attempt(const std::optional<ms>& timeout, Once once, For for_, Forever forever) {
  if (!timeout) {
    forever();
    return true;
  }
  if (*timeout == ms::zero()) return once();
  return for_(*timeout);
}

/// The lock objects of every mode; exec uses one. Its granted acquire's figures land in `acquired`.
struct locks {
  std::optional<zklock::acquire_stats> acquired;
  std::optional<exec_mutex> mx;
  std::optional<exec_shared_mutex> rw;
  std::optional<exec_semaphore> sem;

  /// Effects: acquires `o.path` in `o.mode` within `o.timeout`, bounded by o.max_hold and
  /// o.hold_at_least. Returns: whether it is held.
  bool acquire(zklock::session& s, const options& o) {
    const zklock::hold_bounds bounds{o.max_hold, o.hold_at_least};
    const auto revoke = o.revoke_ignore ? zklock::on_revoke::ignore : zklock::on_revoke::notify;
    switch (o.mode) {
      case lock_mode::mutex:
        mx.emplace(s, o.path, record_hooks{&acquired});
        mx->set_hold_bounds(bounds);
        mx->set_on_revoke(revoke);
        return attempt(o.timeout, [&] { return mx->try_lock(); }, [&](ms t) { return mx->try_lock_for(t); },
                       [&] { mx->lock(); });
      case lock_mode::shared:
        rw.emplace(s, o.path, record_hooks{&acquired});
        rw->set_hold_bounds(bounds);
        rw->set_on_revoke(revoke);
        return attempt(o.timeout, [&] { return rw->try_lock_shared(); },
                       [&](ms t) { return rw->try_lock_shared_for(t); }, [&] { rw->lock_shared(); });
      case lock_mode::write:
        rw.emplace(s, o.path, record_hooks{&acquired});
        rw->set_hold_bounds(bounds);
        rw->set_on_revoke(revoke);
        return attempt(o.timeout, [&] { return rw->try_lock(); }, [&](ms t) { return rw->try_lock_for(t); },
                       [&] { rw->lock(); });
      case lock_mode::permits:
        sem.emplace(s, o.path, o.permits, record_hooks{&acquired});
        sem->set_hold_bounds(bounds);
        sem->set_on_revoke(revoke);
        return attempt(o.timeout, [&] { return sem->try_acquire(o.take); },
                       [&](ms t) { return sem->try_acquire_for(o.take, t); }, [&] { sem->acquire(o.take); });
    }
    return false;
  }
};

/// Returns: the hold of the lock `l` acquired (its loss signal may have fired already).
held_lock make_hold(const options& o, locks& l) {
  held_lock h;
  switch (o.mode) {
    case lock_mode::mutex:
      h.token = l.mx->fencing_token();
      h.lost = l.mx->lost_token();
      h.revoked = l.mx->revocation_token();
      h.release = [&l] { l.mx->unlock(); };
      break;
    case lock_mode::write:
      h.token = l.rw->fencing_token();
      h.lost = l.rw->lost_token();
      h.revoked = l.rw->revocation_token();
      h.release = [&l] { l.rw->unlock(); };
      break;
    case lock_mode::shared:
      h.token = l.rw->fencing_token_shared();
      h.lost = l.rw->lost_token();
      h.revoked = l.rw->revocation_token();
      h.release = [&l] { l.rw->unlock_shared(); };
      break;
    case lock_mode::permits:
      h.token = l.sem->fencing_token();
      h.lost = l.sem->lost_token();
      h.revoked = l.sem->revocation_token();
      h.release = [&l] { l.sem->release(); };
      break;
  }
  return h;
}

/// Effects: records what the acquire cost for `zklock ls` (zklock::record_hold). Best effort: a
/// failure is only reported with --verbose (a lost lock is the loss signal's business).
/// Returns: the stored record, if stored.
std::shared_ptr<zklock::stored_hold_record> record_acquire(zklock::session& s, const options& o, const locks& l,
                                                           std::int64_t token) {
  const auto& acquired = l.acquired;
  if (!acquired) return nullptr;
  try {
    zklock::hold_record r;
    r.granted = std::chrono::system_clock::now();
    r.waited = std::chrono::duration_cast<ms>(acquired->wait);
    r.ahead = acquired->queue_position;
    r.wakeups = acquired->wakeups;
    r.requests = acquired->requests;
    return std::make_shared<zklock::stored_hold_record>(zklock::record_hold(s, o.path, token, r));
  } catch (const std::exception& e) {
    if (g_verbose) say("could not record the acquire on %s: %s", o.path.c_str(), tidy(e).c_str());
  }
  return nullptr;
}

/// What a hold keeps: the session, then the lock objects that use it (destroyed first).
struct lock_state {
  std::unique_ptr<zklock::session> session;
  locks l;
};

}  // namespace

acquire_result acquire_lock(const options& o, int sigfd, int input) {
  auto st = std::make_shared<lock_state>();
  st->session = open_session(o);
  zklock::session& s = *st->session;

  bool acquired = false;
  const auto asked = steady::now();
  {
    acquire_interrupter interrupter{s, sigfd, input};
    std::optional<queue_reporter> reporter;  // --verbose: where it queues, and behind whom
    if (g_verbose && o.timeout != ms::zero()) reporter.emplace(s, o);
    // Returns: the exit code if a signal or the end of input ended the acquire (the session is closed).
    auto interrupted = [&]() -> std::optional<int> {
      if (const int sig = interrupter.stop()) {
        if (g_verbose) say("%s while waiting for %s: gave up", signal_name(sig).c_str(), o.path.c_str());
        return exit_code::signal_base + sig;
      }
      if (interrupter.input_ended()) {
        say("standard input ended while waiting for %s: gave up", o.path.c_str());
        return o.conflict_code;
      }
      return std::nullopt;
    };
    try {
      acquired = st->l.acquire(s, o);
    } catch (...) {
      if (const auto code = interrupted()) return {std::nullopt, *code};
      throw;
    }
    if (const auto code = interrupted()) return {std::nullopt, *code};  // came just as the lock was granted
  }
  if (!acquired) {
    const std::string who = holders_of(s, o);  // the conflict names the holders
    const std::string tail = who.empty() ? "" : ": " + who;
    if (*o.timeout == ms::zero())
      say("%s is taken (%s: no waiting)%s", o.path.c_str(),
          o.timeout_by == "--nonblock" ? "--nonblock" : (o.timeout_by + " 0").c_str(), tail.c_str());
    else
      say("timed out after %lld ms waiting for %s%s", static_cast<long long>(o.timeout->count()), o.path.c_str(),
          tail.c_str());
    return {std::nullopt, o.conflict_code};
  }
  const long long waited = std::chrono::duration_cast<ms>(steady::now() - asked).count();

  held_lock h = make_hold(o, st->l);
  // The grant, as the acquire's hooks measured it from before the call: never after the library's
  // own grant time, from which hold_bounds count.
  h.granted = st->l.acquired ? asked + st->l.acquired->wait : steady::now();
  if (g_verbose)
    say("holding %s (token %lld) after waiting %s", o.path.c_str(), static_cast<long long>(h.token), span(waited).c_str());
  if (auto record = record_acquire(s, o, st->l, h.token)) {  // gone before the lock is released
    h.release = [record = std::move(record), release = std::move(h.release)] {
      record->release();
      release();
    };
  }
  h.keep = std::move(st);
  return {std::move(h), exit_code::ok};
}

namespace {

/// Effects: waits until `until` (exec --hold-at-least: the lock stays held, its node deleted by the
/// library at the floor, while this process and its session live), or until a forwarded signal
/// arrives on `sigfd` (SIGCHLD and SIGCONT, which it also reads, are skipped). Returns: 128 + the
/// signal, or `code` at the floor.
int wait_out_floor(int sigfd, steady::time_point until, int code, const std::string& path) {
  if (steady::now() < until && g_verbose)
    say("keeping %s until --hold-at-least passes (%s more)", path.c_str(),
        span(std::chrono::duration_cast<ms>(until - steady::now()).count()).c_str());
  for (;;) {
    const auto left = std::chrono::ceil<ms>(until - steady::now());
    if (left <= ms::zero()) return code;
    pollfd p{sigfd, POLLIN, 0};
    const int n = ::poll(&p, 1, static_cast<int>(std::min<ms::rep>(left.count(), 60'000)));
    if (n > 0) {
      signalfd_siginfo si{};
      if (::read(sigfd, &si, sizeof si) == static_cast<ssize_t>(sizeof si)) {
        const int sig = static_cast<int>(si.ssi_signo);
        // CMD's own SIGCHLD (it was reaped already) or a SIGCONT may still be queued: not a request.
        if (sig == SIGCHLD || sig == SIGCONT) continue;
        if (g_verbose) say("%s while keeping %s until --hold-at-least: gave up", signal_name(sig).c_str(), path.c_str());
        return exit_code::signal_base + sig;
      }
    }
  }
}

}  // namespace

int run_exec(const options& o) {
  const std::string file = resolve_command(o.argv.front());  // fail fast, before waiting for a lock

  fd_t sigfd = block_signals();  // before the session starts its threads
  auto r = acquire_lock(o, sigfd.get(), -1);
  if (!r.held) return r.exit;
  const auto granted = steady::now();  // just after the grant: a floor counted from here is no shorter
  held_lock& h = *r.held;
  if (h.lost.stop_requested()) {  // e.g. the session ended with the grant
    say("lost the lock on %s before %s could start", o.path.c_str(), o.argv.front().c_str());
    h.release();
    return exit_code::lost;
  }
  // CMD is stopped when the lock is lost, or when a revoker asks it to let go (unless --on-revoke
  // ignore, which sets on_revoke::ignore: then only a forced release, a loss, stops it).
  const auto revoked = std::make_shared<std::atomic<bool>>(false);
  std::stop_source stop_cmd;
  const std::stop_callback on_lost{h.lost, [&stop_cmd] { stop_cmd.request_stop(); }};
  const std::stop_callback on_revoked{h.revoked, [&stop_cmd, revoked] {
                                        revoked->store(true);
                                        stop_cmd.request_stop();
                                      }};
  const child_command cmd{file, o.argv,
                          {"ZKLOCK_FENCING_TOKEN=" + std::to_string(h.token), "ZKLOCK_PATH=" + o.path},
                          o.path, o.kill_signal, o.grace, revoked};
  const int code = supervise(cmd, sigfd.get(), stop_cmd.get_token(), h.release);
  if (code == exit_code::lost && o.max_hold > ms::zero() && steady::now() - h.granted >= o.max_hold)
    say("(the hold reached --max-hold %s)", span(o.max_hold.count()).c_str());
  if (o.hold_at_least == ms::zero() || stop_cmd.stop_requested()) return code;
  return wait_out_floor(sigfd.get(), granted + o.hold_at_least, code, o.path);
}

}  // namespace zkcli
