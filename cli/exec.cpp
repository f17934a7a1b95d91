// SPDX-License-Identifier: Apache-2.0
// `zklock exec PATH CMD`: looks CMD up, warns about contenders the mode ignores, acquires the lock
// in the chosen mode (a signal ends the wait), records what the acquire cost for `zklock ls`, and
// hands CMD to supervise() with the hold's fencing token, its loss signal and its release.
#include <cstring>
#include "cli.hpp"

namespace zkcli {
namespace {

/// What the acquire of this process cost (one acquire per process), from the hooks below. Its
/// `path` views the lock object's, which outlives every use here.
std::optional<zklock::acquire_stats> g_acquire;

/// exec's hooks policy: keeps the figures of the acquire, which exec then records for `zklock ls`
/// (the main thread acquires, then reads them: no other thread involved).
struct record_hooks {
  static constexpr bool enabled = true;
  static void on_acquire(const zklock::acquire_stats& a) noexcept {
    if (a.acquired) g_acquire = a;
  }
  static void on_release(const zklock::release_stats&) noexcept {}
};
struct exec_policies : zklock::default_policies {
  using hooks = record_hooks;
};
using exec_mutex = zklock::basic_mutex<exec_policies>;
using exec_shared_mutex = zklock::basic_shared_mutex<exec_policies>;
using exec_semaphore = zklock::basic_counting_semaphore<exec_policies>;

const char* kind_name(bridge::node_kind k) {
  switch (k) {
    case bridge::node_kind::lock: return "lock";
    case bridge::node_kind::read: return "read";
    case bridge::node_kind::write: return "write";
    case bridge::node_kind::lease: return "lease";
  }
  return "?";
}

/// Returns: what takes contender nodes of kind `k`, for the warning about other kinds.
const char* taken_by(bridge::node_kind k) {
  switch (k) {
    case bridge::node_kind::lock: return "zklock exec --mutex, zklock::mutex, Curator's InterProcessMutex";
    case bridge::node_kind::read: return "zklock exec --shared, the read side of a read/write lock";
    case bridge::node_kind::write: return "zklock exec (default, --write), the write side of a read/write lock";
    case bridge::node_kind::lease: return "zklock exec --permits, zklock::counting_semaphore";
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
  std::optional<std::vector<bridge::node_kind>> others;
  try {
    others = bridge::ignored_kinds(s, o.path, o.mode, steady::now() + o.connect_timeout);
  } catch (const std::system_error& e) {
    if (e.code() != zklock::make_error_code(zklock::errc::session_expired)) throw;
  }
  if (!others) return;
  for (const auto k : *others)
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

/// The lock objects of every mode; exec uses one.
struct locks {
  std::optional<exec_mutex> mx;
  std::optional<exec_shared_mutex> rw;
  std::optional<exec_semaphore> sem;

  /// Effects: acquires `o.path` in `o.mode` within `o.timeout`. Returns: whether it is held.
  bool acquire(zklock::session& s, const options& o) {
    switch (o.mode) {
      case lock_mode::mutex:
        mx.emplace(s, o.path);
        return attempt(o.timeout, [&] { return mx->try_lock(); }, [&](ms t) { return mx->try_lock_for(t); },
                       [&] { mx->lock(); });
      case lock_mode::shared:
        rw.emplace(s, o.path);
        return attempt(o.timeout, [&] { return rw->try_lock_shared(); },
                       [&](ms t) { return rw->try_lock_shared_for(t); }, [&] { rw->lock_shared(); });
      case lock_mode::write:
        rw.emplace(s, o.path);
        return attempt(o.timeout, [&] { return rw->try_lock(); }, [&](ms t) { return rw->try_lock_for(t); },
                       [&] { rw->lock(); });
      case lock_mode::permits:
        sem.emplace(s, o.path, o.permits);
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
  std::unique_ptr<bridge::lease_loss> lease;
};

/// Returns: the hold of the lock `l` acquired, or nullopt if it was lost before CMD could start.
std::optional<hold> make_hold(zklock::session& s, const options& o, locks& l, std::uint64_t generation) {
  hold h;
  switch (o.mode) {
    case lock_mode::mutex:
      h.token = l.mx->fencing_token();
      h.lost = l.mx->lost_token();
      h.release = [&l] { l.mx->unlock(); };
      return h;
    case lock_mode::write:
      h.token = l.rw->fencing_token();
      h.lost = l.rw->lost_token();
      h.release = [&l] { l.rw->unlock(); };
      return h;
    case lock_mode::shared:
    case lock_mode::permits:
      break;
  }
  // These holds have no fencing_token() of their own: the token is our node's czxid.
  std::optional<bridge::own_node> mine;
  try {
    mine = bridge::find_own_node(s, o.path, o.mode);
  } catch (const std::system_error& e) {  // the session ended with the grant: the hold is lost
    if (e.code() != zklock::make_error_code(zklock::errc::session_expired)) throw;
  }
  if (!mine) return std::nullopt;
  h.token = mine->token;
  if (o.mode == lock_mode::shared) {
    h.lost = l.rw->lost_token();
    h.release = [&l] { l.rw->unlock_shared(); };
    return h;
  }
  h.lease = std::make_unique<bridge::lease_loss>(s, mine->path, generation, steady::now() + o.connect_timeout);
  h.lost = h.lease->token();
  h.release = [&l, lease = h.lease.get()] {
    lease->release();
    try {
      l.sem->release();
    } catch (const std::exception&) {  // nothing held: nothing to release
    }
  };
  return h;
}

/// Effects: records what the acquire cost for `zklock ls` (see record_prefix). Best effort: a
/// failure is only reported with --verbose (a lost lock is the loss signal's business).
/// Returns: the record's path, if created.
std::optional<std::string> record_acquire(zklock::session& s, const options& o, std::int64_t token) {
  if (!g_acquire) return std::nullopt;
  try {
    const auto now_ms = std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto waited = std::chrono::duration_cast<ms>(g_acquire->wait).count();
    const std::string data = "granted=" + std::to_string(now_ms) + " waited=" + std::to_string(waited) +
                             " ahead=" + std::to_string(g_acquire->queue_position) +
                             " wakeups=" + std::to_string(g_acquire->wakeups) +
                             " requests=" + std::to_string(g_acquire->requests);
    std::string path = o.path + "/" + std::string{record_prefix} + std::to_string(token);
    if (bridge::create_ephemeral(s, path, data)) return path;
  } catch (const std::exception& e) {
    if (g_verbose) say("could not record the acquire on %s: %s", o.path.c_str(), e.what());
  }
  return std::nullopt;
}

}  // namespace

int run_exec(const options& o) {
  const std::string file = resolve_command(o.argv.front());  // fail fast, before waiting for a lock

  fd_t sigfd = block_signals();  // before the session starts its threads
  auto s = open_session(o);
  warn_about_other_kinds(*s, o);

  locks l;
  const std::uint64_t generation = s->generation();
  bool acquired = false;
  {
    acquire_interrupter interrupter{*s, sigfd.get()};
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
    if (*o.timeout == ms::zero()) say("%s is taken (--timeout 0: no waiting)", o.path.c_str());
    else say("timed out after %lld ms waiting for %s", static_cast<long long>(o.timeout->count()), o.path.c_str());
    return exit_code::timeout;
  }

  auto h = make_hold(*s, o, l, generation);
  if (!h) {
    say("lost the lock on %s before %s could start", o.path.c_str(), o.argv.front().c_str());
    return exit_code::lost;
  }
  if (g_verbose) say("holding %s (token %lld)", o.path.c_str(), static_cast<long long>(h->token));
  if (auto record = record_acquire(*s, o, h->token)) {  // gone before the lock is released
    h->release = [&s, generation, path = std::move(*record), release = std::move(h->release)] {
      bridge::delete_node(*s, path, generation);
      release();
    };
  }
  const child_command cmd{file, o.argv,
                          {"ZKLOCK_FENCING_TOKEN=" + std::to_string(h->token), "ZKLOCK_PATH=" + o.path},
                          o.path, o.kill_signal, o.grace};
  return supervise(cmd, sigfd.get(), h->lost, h->release);
}

}  // namespace zkcli
