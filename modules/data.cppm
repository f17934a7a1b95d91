// SPDX-License-Identifier: Apache-2.0
// zklock:data — the values of a session's small data API (session::create, get, set, remove,
// children, commit) and of its guarded writes (session::commit_if_held with a lock's fence()): a
// node's stat, an operation of a transaction and its result, and the fence of one hold.
module;
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
export module zklock:data;

export namespace zklock {

/// A node's stat, as the server keeps it.
struct node_stat {
  std::int64_t czxid = 0;  ///< the zxid of its create (for a contender node: its fencing token)
  std::int64_t mzxid = 0;  ///< the zxid of its last data change
  std::int64_t pzxid = 0;  ///< the zxid of the last change of its children
  std::chrono::system_clock::time_point ctime{};  ///< when it was created (the server's clock, ms)
  std::chrono::system_clock::time_point mtime{};  ///< when its data last changed (the server's clock)
  std::int32_t version = 0;   ///< its data version: a set() or remove() given it succeeds only if unchanged
  std::int32_t cversion = 0;  ///< its children's version
  std::int32_t aversion = 0;  ///< its ACL's version
  std::int64_t ephemeral_owner = 0;  ///< the session owning it, if ephemeral; else 0
  std::int32_t data_length = 0;      ///< bytes of data
  std::int32_t num_children = 0;     ///< children
};

/// A version argument that matches every version (ZooKeeper's -1).
inline constexpr std::int32_t any_version = -1;

/// What a create makes.
enum class create_mode {
  persistent,             ///< stays until deleted
  ephemeral,              ///< goes with the session that created it (no children allowed)
  persistent_sequential,  ///< persistent, named with a 10-digit sequence number appended
  ephemeral_sequential,   ///< ephemeral, named with a sequence number
  container               ///< persistent; the server deletes it once its last child is gone
                          ///< (not inside a transaction: Debian's C client 3.8.0 misreads the reply)
};

/// A node's data and stat (session::get).
struct node_data {
  std::string data{};  ///< its data (empty for a node created with none)
  node_stat stat{};    ///< its stat
};

/// What a guarded write checks: the contender node of one hold, and its fencing token. A lock's
/// fence() gives the caller's (mutex, either side of a shared mutex, a semaphore's latest lease,
/// a lock_hold). While the node exists the hold stands: it goes when the hold is released, when its
/// session ends (expiry, close) or when someone deletes it. Its name is unique to one acquire.
struct fence {
  std::string node{};      ///< the full path of the hold's contender node
  std::int64_t token = 0;  ///< the hold's fencing token (the node's czxid), for stores outside ZooKeeper
  friend bool operator==(const fence&, const fence&) = default;
};

/// One operation of a transaction (session::commit): made by the factories below.
struct op {
  enum class kind { create, remove, set, check };
  kind type = kind::check;
  std::string path{};
  std::string data{};                            ///< create, set
  create_mode mode = create_mode::persistent;    ///< create (never container: see create_mode)
  std::int32_t version = any_version;            ///< remove, set, check

  /// Returns: an operation that creates `path` holding `data` (the session's ACL for new nodes).
  static op create(std::string path, std::string data = {}, create_mode mode = create_mode::persistent) {
    return op{kind::create, std::move(path), std::move(data), mode, any_version};
  }
  /// Returns: an operation that deletes `path` (only at `version`, unless any_version).
  static op remove(std::string path, std::int32_t version = any_version) {
    return op{kind::remove, std::move(path), {}, create_mode::persistent, version};
  }
  /// Returns: an operation that sets `path`'s data (only at `version`, unless any_version).
  static op set(std::string path, std::string data, std::int32_t version = any_version) {
    return op{kind::set, std::move(path), std::move(data), create_mode::persistent, version};
  }
  /// Returns: an operation that changes nothing and fails the transaction unless `path` exists (at
  /// `version`, unless any_version).
  static op check(std::string path, std::int32_t version = any_version) {
    return op{kind::check, std::move(path), {}, create_mode::persistent, version};
  }
};

/// The result of one operation of a committed transaction, in the order of the operations.
struct op_result {
  std::string path{};             ///< create: the node created (its sequence number included); else the op's path
  std::optional<node_stat> stat;  ///< set: the node's stat after it; else empty
};

}  // namespace zklock
