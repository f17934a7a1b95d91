// SPDX-License-Identifier: Apache-2.0
// `zklock exec PATH CMD`: looks CMD up, warns about contenders the mode ignores, acquires the lock
// in the chosen mode (a signal ends the wait), records what the acquire cost for `zklock ls`, and
// hands CMD to supervise() with the hold's fencing token, its loss signal and its release.
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

using zklock::contender_side;

/// Returns: the name of contender nodes of side `k`, as their names say ("lock" for a mutex).
const char* kind_name(contender_side k) { return k == contender_side::mutex ? "lock" : zklock::to_string(k); }

/// Returns: what takes contender nodes of kind `k`, for the warning about other kinds.
const char* taken_by(contender_side k) {
  switch (k) {
    case contender_side::mutex: return "zklock exec --mutex, zklock::mutex, Curator's InterProcessMutex";
    case contender_side::read: return "zklock exec --shared, the read side of a read/write lock";
    case contender_side::write: return "zklock exec (default, --write), the write side of a read/write lock";
    case contender_side::lease: return "zklock exec --permits, zklock::counting_semaphore";
  }
  return "?";
}

const char* mode_name(lock_mode m) {
  switch (m) {
    case lock_mode::write: return "exclusive (write) lock";
    case lock_mode::shared: return "shared (read) lock";
    case lock_mode::mutex: return "--mutex lock";
    case lock_mode::permits: return "--permits lease";
  }
  return "lock";
}

/// Effects: warns when the path is in use by contenders of kinds this mode ignores. (A warning
/// only: a session that ends under it is the acquire's to ride through.)
void warn_about_other_kinds(zklock::session& s, const options& o) {
  std::vector<zklock::contender_info> queue;
  try {
    queue = zklock::contenders(s, o.path);
  } catch (const std::system_error& e) {
    if (e.code() != zklock::make_error_code(zklock::errc::session_expired) &&
        e.code() != zklock::make_error_code(zklock::errc::operation_timeout))
      throw;
  }
  std::vector<contender_side> others;  // each side once, in queue order
  for (const auto& c : queue)
    if (!counts(o.mode, c.side) && std::find(others.begin(), others.end(), c.side) == others.end())
      others.push_back(c.side);
  for (const auto k : others)
    say("warning: %s has %s contenders (%s): this %s neither waits for them nor keeps them out", o.path.c_str(),
        kind_name(k), taken_by(k), mode_name(o.mode));
}

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

  /// Effects: acquires `o.path` in `o.mode` within `o.timeout`. Returns: whether it is held.
  bool acquire(zklock::session& s, const options& o) {
    switch (o.mode) {
      case lock_mode::mutex:
        mx.emplace(s, o.path, record_hooks{&acquired});
        return attempt(o.timeout, [&] { return mx->try_lock(); }, [&](ms t) { return mx->try_lock_for(t); },
                       [&] { mx->lock(); });
      case lock_mode::shared:
        rw.emplace(s, o.path, record_hooks{&acquired});
        return attempt(o.timeout, [&] { return rw->try_lock_shared(); },
                       [&](ms t) { return rw->try_lock_shared_for(t); }, [&] { rw->lock_shared(); });
      case lock_mode::write:
        rw.emplace(s, o.path, record_hooks{&acquired});
        return attempt(o.timeout, [&] { return rw->try_lock(); }, [&](ms t) { return rw->try_lock_for(t); },
                       [&] { rw->lock(); });
      case lock_mode::permits:
        sem.emplace(s, o.path, o.permits, record_hooks{&acquired});
        return attempt(o.timeout, [&] { return sem->try_acquire(); }, [&](ms t) { return sem->try_acquire_for(t); },
                       [&] { sem->acquire(); });
    }
    return false;
  }
};

/// A held lock of any mode, as exec needs it.
struct hold {
  std::int64_t token = 0;
  std::stop_token lost;
  std::function<void()> release;
};

/// Returns: the hold of the lock `l` acquired, or nullopt if it was lost before CMD could start.
std::optional<hold> make_hold(const options& o, locks& l) {
  hold h;
  switch (o.mode) {
    case lock_mode::mutex:
      h.token = l.mx->fencing_token();
      h.lost = l.mx->lost_token();
      h.release = [&l] { l.mx->unlock(); };
      break;
    case lock_mode::write:
      h.token = l.rw->fencing_token();
      h.lost = l.rw->lost_token();
      h.release = [&l] { l.rw->unlock(); };
      break;
    case lock_mode::shared:
      h.token = l.rw->fencing_token_shared();
      h.lost = l.rw->lost_token();
      h.release = [&l] { l.rw->unlock_shared(); };
      break;
    case lock_mode::permits:
      h.token = l.sem->fencing_token();
      h.lost = l.sem->lost_token();
      h.release = [&l] { l.sem->release(); };
      break;
  }
  if (h.lost.stop_requested()) return std::nullopt;  // e.g. the session ended with the grant
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
    if (g_verbose) say("could not record the acquire on %s: %s", o.path.c_str(), e.what());
  }
  return nullptr;
}

}  // namespace

int run_exec(const options& o) {
  const std::string file = resolve_command(o.argv.front());  // fail fast, before waiting for a lock

  fd_t sigfd = block_signals();  // before the session starts its threads
  auto s = open_session(o);
  warn_about_other_kinds(*s, o);

  locks l;
  bool acquired = false;
  const auto asked = steady::now();
  {
    acquire_interrupter interrupter{*s, sigfd.get()};
    std::optional<queue_reporter> reporter;  // --verbose: where exec queues, and behind whom
    if (g_verbose && o.timeout != ms::zero()) reporter.emplace(*s, o);
    try {
      acquired = l.acquire(*s, o);
    } catch (...) {
      if (const int sig = interrupter.stop()) {
        if (g_verbose) say("%s while waiting for %s: gave up", signal_name(sig).c_str(), o.path.c_str());
        return exit_code::signal_base + sig;
      }
      throw;
    }
    if (const int sig = interrupter.stop()) {  // came just as the lock was granted: the session is closed
      if (g_verbose) say("%s while acquiring %s: gave up", signal_name(sig).c_str(), o.path.c_str());
      return exit_code::signal_base + sig;
    }
  }
  if (!acquired) {
    const std::string who = holders_of(*s, o);  // the conflict names the holders
    const std::string tail = who.empty() ? "" : ": " + who;
    if (*o.timeout == ms::zero()) say("%s is taken (--timeout 0: no waiting)%s", o.path.c_str(), tail.c_str());
    else say("timed out after %lld ms waiting for %s%s", static_cast<long long>(o.timeout->count()), o.path.c_str(),
             tail.c_str());
    return exit_code::timeout;
  }
  const long long waited = std::chrono::duration_cast<ms>(steady::now() - asked).count();

  auto h = make_hold(o, l);
  if (!h) {
    say("lost the lock on %s before %s could start", o.path.c_str(), o.argv.front().c_str());
    return exit_code::lost;
  }
  if (g_verbose) say("holding %s (token %lld) after waiting %s", o.path.c_str(), static_cast<long long>(h->token),
                     span(waited).c_str());
  if (auto record = record_acquire(*s, o, l, h->token)) {  // gone before the lock is released
    h->release = [record = std::move(record), release = std::move(h->release)] {
      record->release();
      release();
    };
  }
  const child_command cmd{file, o.argv,
                          {"ZKLOCK_FENCING_TOKEN=" + std::to_string(h->token), "ZKLOCK_PATH=" + o.path},
                          o.path, o.kill_signal, o.grace};
  return supervise(cmd, sigfd.get(), h->lost, h->release);
}

}  // namespace zkcli
