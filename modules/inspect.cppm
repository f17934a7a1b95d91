// SPDX-License-Identifier: Apache-2.0
// zklock:inspect — who holds a lock and who waits, read from the server: the queue of a lock node
// in order, each contender with its state, its fencing token and who it is. The `zklock ls`
// command prints exactly this; monitoring can call it too (it takes no lock and changes nothing).
module;
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>
export module zklock:inspect;
import :session;
import :timeout;

export namespace zklock {

/// Which kind of lock a contender node queues for (from its name).
enum class contender_side {
  mutex,  ///< a mutex (Curator's InterProcessMutex names it "-lock-")
  read,   ///< the read side of a read/write lock ("__READ__")
  write,  ///< the write side of a read/write lock ("__WRIT__")
  lease   ///< a lease of a counting semaphore
};

/// Returns: the side's name: "mutex", "read", "write" or "lease".
const char* to_string(contender_side s) noexcept;

/// Whether a contender holds, by the rules of its side, among the contenders listed.
enum class contender_state {
  holder,  ///< holds the lock (or a lease) now
  waiter,  ///< queued behind a holder
  unknown  ///< a semaphore lease whose lock node stores no lease count
};

/// Returns: the state's name: "holder", "waiter" or "unknown".
const char* to_string(contender_state s) noexcept;

/// Who a contender is, from the data zklock stores on its node ("host=... pid=... since=...").
/// Nodes of other libraries keep what they stored: Curator stores the client's IP address, which
/// lands in `host`.
struct contender_identity {
  std::string host;                                            ///< host name (control characters as '?')
  std::optional<long long> pid;                                ///< process id, if zklock's
  std::optional<std::chrono::system_clock::time_point> since;  ///< when it queued (a semaphore
                                                               ///< lease: when it was granted)
};

/// What a holder's acquire cost, stored beside its hold by record_hold() for contenders() (and
/// `zklock ls`) to report. `zklock exec` stores one for every hold it takes.
struct hold_record {
  std::chrono::system_clock::time_point granted{};  ///< when the hold was granted (ms precision)
  std::chrono::milliseconds waited{0};              ///< from the acquire call to the grant
  std::size_t ahead = 0;                            ///< contenders ahead at the first listing
  std::size_t wakeups = 0;                          ///< watch firings the acquire re-evaluated on
  std::size_t requests = 0;                         ///< ZooKeeper requests the acquire sent
};

/// One contender of a lock node, as contenders() reports it.
struct contender_info {
  std::size_t position = 0;                         ///< contenders ahead of it (0 = first)
  std::string node;                                 ///< its node's name under the lock node
  contender_side side = contender_side::mutex;      ///< what it queues for
  std::size_t permits = 1;                          ///< the permits a lease takes (n of acquire(n)); else 1
  contender_state state = contender_state::waiter;  ///< holder or waiter
  std::int64_t token = 0;                           ///< its fencing token (the node's czxid)
  std::int64_t session_id = 0;                      ///< the session that owns the node
  contender_identity who;                           ///< host, pid, since
  std::optional<hold_record> record;                ///< a holder's acquire record, if it stored one
  /// A revoker asked it to let go (revoke(), Curator's Revoker): its node holds the revocation
  /// marker, which replaced what it stored (so `who` is empty).
  bool revocation_requested = false;
};

/// A hold_record stored on the server by record_hold(): an ephemeral node beside the hold, deleted by
/// release() or the destructor (or with its session). Movable, not copyable.
class stored_hold_record {
 public:
  /// Effects: none (nothing stored).
  stored_hold_record() = default;
  /// Effects: takes over `o`'s node; `o` then holds none.
  stored_hold_record(stored_hold_record&& o) noexcept;
  /// Effects: release(), then takes over `o`'s node.
  stored_hold_record& operator=(stored_hold_record&& o) noexcept;
  /// Effects: release().
  ~stored_hold_record();
  /// Effects: deletes the node (in the background if the connection is down; not at all if its session
  /// already ended, which took it along). Idempotent; never throws.
  void release() noexcept;
  /// Returns: the node's full path (empty once released or if none).
  const std::string& path() const noexcept { return path_; }

 private:
  friend stored_hold_record record_hold(session&, std::string_view, std::int64_t, const hold_record&);
  session* s_ = nullptr;
  std::string path_;
  std::uint64_t generation_ = 0;
};

/// Effects: stores `r` under the lock node `path` as an ephemeral node "zkstats-<token>", beside the
/// hold whose fencing token is `token`, for contenders() to report with that holder. The node is no
/// contender to zklock or Curator (it has no contender marker). Store it while you hold.
/// Returns: the stored record (delete it when the hold ends, by release() or destruction).
/// Throws: std::invalid_argument for a bad path or a token < 1; std::system_error: session failures,
/// operation_timeout after connect_timeout without a connection, the server's refusal (no_node if
/// the lock node is gone, node_exists if another session stored a record for `token`; on this
/// session the record is stored once, and the first of the two stored_hold_records deletes it).
stored_hold_record record_hold(session& s, std::string_view path, std::int64_t token, const hold_record& r);

/// Returns: the contenders under the lock node `path` in queue order (an empty vector if the node
/// is missing or empty), each holder with its hold_record if it stored one, with states by the
/// library's rules: a mutex or a write contender holds iff first of the lock's contenders (mutex,
/// read and write alike); a reader iff no mutex or write contender is ahead; a lease iff fewer
/// than the stored lease count are ahead. Children that are not
/// contenders are skipped, and so are contenders that leave while being read.
/// Throws: std::invalid_argument for a bad path; std::system_error (session or server failures,
/// operation_timeout if the connection stays down for connect_timeout).
std::vector<contender_info> contenders(session& s, std::string_view path);

/// A lock node as inspect_lock() and locks_below() find it: its queue, and what else it stores.
struct lock_listing {
  std::string path;                        ///< the lock node's full path
  std::optional<std::size_t> leases;       ///< the lease count a semaphore node stores ("leases=N")
  std::vector<contender_info> contenders;  ///< its queue, as contenders() lists it
  std::size_t other_children = 0;          ///< children that are neither contenders nor hold
                                           ///< records (nodes below it, such as other locks)
};

/// Returns: the lock node `path` with its queue (as contenders()) and its stored lease count, or
/// nullopt if the node does not exist (unlike contenders(), which cannot tell a missing node from
/// a free one).
/// Throws: as contenders().
std::optional<lock_listing> inspect_lock(session& s, std::string_view path);

/// Returns: every lock at or below the node `prefix` — each node with contenders, and each
/// semaphore node (it stores a lease count; a free one stays until the server reaps it) — in depth-first order, children
/// by name; nullopt if `prefix` does not exist. A free lock that is not a semaphore leaves at
/// most an empty node behind (a container, which the server deletes), which cannot be told from
/// any other empty node: it is not listed. Nodes that go while being read are skipped.
/// Throws: as contenders().
std::optional<std::vector<lock_listing>> locks_below(session& s, std::string_view prefix);

/// Effects: calls `on_change(queue)` on this thread with the contenders of the lock node `path` (as
/// contenders() lists them), then again each time its children change, using a children watch,
/// never polling, until `on_change` returns false or the node is found missing (a missing node has
/// no children to watch). When the session ends under it, it lists again on the next session (as
/// wait_until_free). Leaves no watch behind.
/// Returns: true once `on_change` returned false; false if the node is missing (or gone), or if
/// `wc`'s deadline passed first or its stop was requested.
/// Throws: as wait_until_free (what `on_change` throws included); also operation_timeout if the
/// connection stays down for connect_timeout while it lists (as contenders()).
bool watch_contenders(session& s, std::string_view path, const wait_context& wc,
                      const std::function<bool(const std::vector<contender_info>&)>& on_change);

/// Effects: blocks until the lock node `path` has no contenders of any kind (nobody holds it and
/// nobody waits; a missing node counts as free), using a children watch, never polling; calls
/// `on_busy(n)` (if given, on this thread) each time it finds n > 0 contenders and waits. When the
/// session ends under the wait (an expiry, or a give-up after a long disconnection) it looks again
/// on the next session, as a waiting acquire queues again. Another contender may queue right after
/// it returns: to act under the lock, take the lock. Leaves no watch behind.
/// Returns: true once free; false if `wc`'s deadline passed first or its stop was requested.
/// Throws: std::invalid_argument for a bad path; std::system_error: session_closed, session_expired
/// (no next session before the deadline, or re-establishment is off), or the server's refusal;
/// what `on_busy` throws.
bool wait_until_free(session& s, std::string_view path, const wait_context& wc = {},
                     const std::function<void(std::size_t)>& on_busy = {});

/// Effects: removes the lock or semaphore node `path` if no one holds it or waits on it (no
/// contender of any kind under it), with hold records left beside it. A contender that queues
/// meanwhile makes the delete fail, and the call reports the node in use: nothing is removed from
/// under a holder or a waiter. A semaphore object still open somewhere makes the node again, with
/// its lease count, on its next acquire; a lock's node is made again by its next acquire anyway.
/// Returns: the node as last seen (`leases` says whether it was a semaphore), or nullopt if it did
/// not exist.
/// Throws: std::invalid_argument for a bad path; std::system_error: errc::not_empty if it is in use
/// (naming its holders and how many wait); errc::path_kind_mismatch if it is no lock or semaphore
/// node (other nodes below it, named; or data that is no lease count); no_auth if its ACL forbids
/// the delete; session or server failures.
std::optional<lock_listing> remove_lock(session& s, std::string_view path);

/// Effects: checks `path` as every lock's constructor does (absolute, no empty, "." or ".."
/// segment, no trailing slash, no control characters, not "/zookeeper").
/// Throws: std::invalid_argument naming the problem.
void validate_lock_path(std::string_view path);

}  // namespace zklock
