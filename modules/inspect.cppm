// SPDX-License-Identifier: Apache-2.0
// zklock:inspect — who holds a lock and who waits, read from the server: the queue of a lock node
// in order, each contender with its state, its fencing token and who it is. The `zklock ls`
// command prints exactly this; monitoring can call it too (it takes no lock and changes nothing).
module;
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
export module zklock:inspect;
import :session;

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

/// One contender of a lock node, as contenders() reports it.
struct contender_info {
  std::size_t position = 0;                         ///< contenders ahead of it (0 = first)
  std::string node;                                 ///< its node's name under the lock node
  contender_side side = contender_side::mutex;      ///< what it queues for
  contender_state state = contender_state::waiter;  ///< holder or waiter
  std::int64_t token = 0;                           ///< its fencing token (the node's czxid)
  std::int64_t session_id = 0;                      ///< the session that owns the node
  contender_identity who;                           ///< host, pid, since
};

/// Returns: the contenders under the lock node `path` in queue order (an empty vector if the node
/// is missing or empty), with states by the library's rules: a mutex contender holds iff first of
/// the mutex contenders; a reader holds iff no writer is ahead; a writer iff first of the readers
/// and writers; a lease iff fewer than the stored lease count are ahead. Children that are not
/// contenders are skipped, and so are contenders that leave while being read.
/// Throws: std::invalid_argument for a bad path; std::system_error (session or server failures,
/// operation_timeout if the connection stays down for connect_timeout).
std::vector<contender_info> contenders(session& s, std::string_view path);

/// Returns: the identity in a contender node's `data` (see contender_identity). Never throws
/// anything but std::bad_alloc.
contender_identity parse_identity(std::string_view data);

}  // namespace zklock
