// SPDX-License-Identifier: Apache-2.0
// Test support: the server address, unique paths, and a raw ZooKeeper view that does not go through
// zklock (to check what is really on the server).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>
#include <gtest/gtest.h>
#include "four_letter.hpp"
import zklock;

namespace zkt {

/// Returns: ZKLOCK_TEST_ZK (set by tools/zk around every integration test); fails the test if unset.
std::string connect();

/// Returns: a path unique to this process and call, under /zklock-test.
std::string unique_path(std::string_view stem);

/// Returns: the children of `path` as the server has them (empty if the node is missing).
std::vector<std::string> children(const std::string& path);

/// Returns: whether `path` exists.
bool exists(const std::string& path);

/// Effects: creates `path` (persistent, parents too) with an open ACL.
void create_path(const std::string& path);

/// Effects: ends `s`'s session on the server (second handle with the same id and password, then
/// close), retrying until `s` has seen the expiry (or was closed, e.g. by a listener on the expiry).
/// Returns: whether it worked within `limit`.
bool expire(zklock::session& s, std::chrono::milliseconds limit = std::chrono::seconds{30});

/// Returns: `s`'s current password (16 bytes, session::credentials()), or "" while it has no live
/// session (for logs that record it whatever the session's state).
std::string session_password(const zklock::session& s);

/// Returns: the answer of a four-letter word, e.g. "wchp", from the first server of connect().
std::string four_letter(std::string_view word);

/// Returns: ZKLOCK_FAULT_SCALE (default 1.0; a number in 0.25..100, else 1.0 with a warning): the
/// factor for every session timeout, fault duration and bound of the fault tests (slow machines).
double fault_scale();

/// Returns: `d` multiplied by fault_scale().
std::chrono::milliseconds scaled(std::chrono::milliseconds d);

/// Returns: the server's watch count (data and children watches of every session: "mntr"'s
/// zk_watch_count), or -1 if it cannot be read. Server-wide: use it on a private_server.
long long server_watch_count();

/// Returns: session options for tests: ZKLOCK_TEST_ZK, short timeouts, semaphore waiters that look
/// one handoff ahead (or, with ZKLOCK_TEST_LOOK_AHEAD=never, that never do).
zklock::session_options options(std::chrono::milliseconds session_timeout = std::chrono::milliseconds{4000});

/// Returns: `n` sessions made from options(), open.
std::vector<std::unique_ptr<zklock::session>> open_sessions(int n);

/// Returns: the TLS address of a `tools/zk start --tls` server (ZKLOCK_TEST_ZK_TLS), or "" if the
/// fixture has none.
std::string tls_connect();

/// Returns: TLS options with the throw-away files of that server (ZKLOCK_TEST_ZK_DIR/tls): CA file
/// `ca`.pem, client certificate and key `client`.pem / .key (see make_tls_material in tools/zk).
zklock::tls_options tls_keys(std::string_view ca = "ca", std::string_view client = "client");

/// Returns: a TCP port on 127.0.0.1 where nothing listens (bound once to port 0, then released).
int free_port();

/// Effects: puts the C client's global log level back to its default, INFO (the raw handles of
/// these helpers lower it to ERROR).
void default_client_log_level();

/// A raw C-client handle authenticated as digest `user:password`: sets up and inspects nodes that
/// the unauthenticated helpers above cannot read.
class digest_client {
 public:
  /// Effects: connects and sends the credentials. Throws: std::runtime_error on failure.
  digest_client(std::string_view user, std::string_view password);
  ~digest_client();
  digest_client(const digest_client&) = delete;
  digest_client& operator=(const digest_client&) = delete;

  /// Effects: creates the persistent node `path` with ZOO_CREATOR_ALL_ACL (only this user may do
  /// anything with it). Returns: the C client's return code (0 = ZOK).
  int create_private(const std::string& path);

  /// Returns: the children of `path`, or nullopt if the call failed (missing node, no permission).
  std::optional<std::vector<std::string>> children(const std::string& path);

  /// Effects: deletes `path` and everything under it (best effort).
  void remove_tree(const std::string& path);

 private:
  struct impl;
  std::unique_ptr<impl> p_;
};

}  // namespace zkt

namespace zkt {

/// A node as the server stores it (raw view, bypassing zklock).
struct node_stat {
  bool exists = false;
  std::string data;               ///< up to 4 KiB of the node's data
  std::int64_t czxid = 0;         ///< creation zxid
  std::int64_t ephemeral_owner = 0;
};

/// Returns: `path`'s data and stat (exists == false if the node is missing).
node_stat stat_node(const std::string& path);

}  // namespace zkt

namespace zkt {

/// A ZooKeeper server (or 3-node ensemble) of this test alone, via tools/zk, for faults that must
/// not disturb other tests. While it lives, ZKLOCK_TEST_ZK names it (so the helpers above use it).
class private_server {
 public:
  /// `start_options`: more options of `tools/zk start`, e.g. "--sasl-required".
  explicit private_server(int nodes = 1, int tick_ms = 100, const std::string& start_options = "");
  ~private_server();
  private_server(const private_server&) = delete;
  private_server& operator=(const private_server&) = delete;
  const std::string& connect() const noexcept { return connect_; }
  void pause(int node = 1);   ///< SIGSTOP
  void resume(int node = 1);  ///< SIGCONT
  void kill(int node = 1);    ///< SIGKILL
  void restart(int node = 1);
  int kill_leader();          ///< Returns: the index of the killed leader
  int leader();               ///< Returns: the index of the leader (waits for one; standalone: 1)
  int port(int node) const;   ///< Returns: the client port of member `node` (1-based)
  /// Returns: the client connections member `node` serves ("srvr"), or -1 if it does not answer.
  long long connections(int node) const;
  /// Returns: the server's state directory (tools/zk's DIR: e.g. DIR/tls, DIR/tls_connect).
  std::string dir() const;
 private:
  std::string tool(const std::string& args) const;
  std::string dir_, connect_, saved_;
};

/// Effects: deletes `path` (no version check). Returns: whether it was deleted.
bool remove(const std::string& path);

/// Effects: asks the server of the C-client handle `zh` (a zhandle_t*) to catch up with the leader
/// (a ZooKeeper "sync") and waits for the answer (at most 10 s), so that what the handle reads
/// next includes every write that any session saw acknowledged before. Without it, on an
/// ensemble, a follower may answer from a state a few writes old. Returns: whether it succeeded.
bool sync_handle(void* zh);

}  // namespace zkt

namespace zkt {

/// Whether zklock's C client arms a waiter's first watches (its own node's and those of the
/// contenders ahead) by one request (tools/zookeeper-client/set_data_watches.c: the C client that
/// tools/setup --with-tls-sasl builds), not one request each. The server takes that request without
/// checking READ on the nodes.
inline constexpr bool watches_in_one_request = ZKLOCK_TEST_WATCHES_IN_ONE;
/// Whether zklock's C client creates a missing lock node and our contender in one transaction (its
/// zoo_amulti reads a container's create result), where Debian's sends the lock node's create and
/// the ACL probe's transaction.
inline constexpr bool fresh_lock_in_one_request = ZKLOCK_TEST_FRESH_LOCK_IN_ONE;

/// ZooKeeper's permission bits, for ACL tests.
namespace perm {
inline constexpr int read = 1, write = 2, create = 4, remove = 8, admin = 16, all = 31;
}

/// One entry of a node's ACL, as the server stores it (a digest id reads "user:base64(sha1)").
struct acl_entry {
  int perms = 0;
  std::string scheme;
  std::string id;
};

/// Returns: the ACL of `path` (read without credentials: the server shows digest ids as "user:x"
/// to a reader without ADMIN on the node), or nullopt if the call failed.
std::optional<std::vector<acl_entry>> acl_of(const std::string& path);

/// A raw C-client handle, authenticated as digest `user:password` or, with an empty user, not at
/// all: a stranger that bypasses zklock (e.g. to delete someone else's contender node).
class raw_client {
 public:
  /// Effects: connects (and sends the credentials). Throws: std::runtime_error on failure.
  explicit raw_client(std::string_view user = {}, std::string_view password = {});
  ~raw_client();
  raw_client(const raw_client&) = delete;
  raw_client& operator=(const raw_client&) = delete;

  /// Effects: deletes `path` (any version). Returns: the C client's return code (0 = ZOK; -102 =
  /// ZNOAUTH, the same number as zklock::errc::no_auth).
  int remove(const std::string& path);

  /// Effects: creates the persistent node `path` whose ACL gives this client's identity every
  /// permission and everybody else `world_perms` (perm:: bits). Returns: the C client's return code.
  int create_with_world(const std::string& path, int world_perms);

  /// Effects: creates the persistent node `path` with the ACL `acl`. Returns: the C client's return code.
  int create_with_acl(const std::string& path, const std::vector<acl_entry>& acl);

  /// Effects: replaces the ACL of `path` with one entry: everybody gets `world_perms` (perm:: bits).
  /// Needs ADMIN on the node. Returns: the C client's return code.
  int set_world_acl(const std::string& path, int world_perms);

  /// Returns: the ACL of `path` as this client reads it (digest ids in full if it has ADMIN on
  /// the node), or nullopt if the call failed.
  std::optional<std::vector<acl_entry>> acl(const std::string& path);

  /// Effects: creates an ephemeral sequential node named `prefix` plus a sequence number, open to
  /// everyone, owned by this client's session. Returns: its full path, or nullopt on failure.
  std::optional<std::string> create_ephemeral_sequential(const std::string& prefix);

  /// Returns: this client's session id.
  std::int64_t id() const;

 private:
  void* zh_;  // zhandle_t*
};

}  // namespace zkt

namespace zkt {

/// The lock types of one watch strategy x wake-up combination, for typed tests over all four.
template <class W, class K>
struct combo {
  /// The combination's bundle: the watch and wake-up under test, the other axes by default.
  struct policies : zklock::default_policies {
    using watch = W;
    using wakeup = K;
  };
  struct recursive_policies : policies {
    using reentrancy = zklock::reentrancy_per_thread;
  };
  struct owner_policies : policies {
    using reentrancy = zklock::reentrancy_counted_owner;
  };
  struct timed_policies : policies {
    using timeout = zklock::timeout_throw_after<300>;
  };
  using mutex = zklock::basic_mutex<policies>;
  using plain = mutex;
  using recursive = zklock::basic_mutex<recursive_policies>;
  using owner = zklock::basic_mutex<owner_policies>;
  using shared_mutex = zklock::basic_shared_mutex<policies>;
  using semaphore = zklock::basic_counting_semaphore<policies>;
  using timed_mutex = zklock::basic_mutex<timed_policies>;
  using timed_shared_mutex = zklock::basic_shared_mutex<timed_policies>;
  using timed_semaphore = zklock::basic_counting_semaphore<timed_policies>;
  /// The bound of the timed_ types' blocking calls.
  static constexpr std::chrono::milliseconds timed_bound{300};
  /// Whether waiters set data watches, which the server's "wchp" lists (it omits children watches).
  static constexpr bool watches_nodes = std::is_same_v<W, zklock::watch_predecessor>;
};
/// The combinations the typed suites run over: each watch strategy and each wake-up once. The two
/// axes are separate code (the strategy picks what to watch, the wake-up how the thread waits for
/// it), so the product would run the same lines twice; the other two pairings run in
/// GrantOnDeletion (predecessor + latch) and WakeupCount (children + condition variable), so that
/// every pair is run somewhere. The asynchronous calls use neither wake-up: over these two, they
/// run with each watch strategy.
using combos = ::testing::Types<combo<zklock::watch_predecessor, zklock::wake_condition_variable>,
                                combo<zklock::watch_children, zklock::wake_latch>>;

/// Polls (yielding) until `path` has `n` children. Returns: whether it happened within `limit`.
bool await_children(const std::string& path, std::size_t n,
                    std::chrono::milliseconds limit = std::chrono::seconds{30});

/// Returns: the paths at or below `path` that session `s` watches, per the server's "wchp".
std::set<std::string> watches_below(const std::string& path, const zklock::session& s);

/// Returns: the paths at or below `path` that the session with id `session_id` watches (another
/// process's session, say), per the server's "wchp".
std::set<std::string> watches_below(const std::string& path, std::uint64_t session_id);

/// Polls until session `s` watches something at or below `path`. Returns: whether within 30 s.
bool await_watch(const std::string& path, const zklock::session& s);

}  // namespace zkt

namespace zkt {

/// Effects: ends the session `id` (with its 16-byte `password`, see zklock::session::credentials)
/// on the server from outside the process that owns it: attaches a second handle with the same
/// credentials and closes it, until a handle attaching with them is told the session expired.
/// Stop (SIGSTOP) the owner meanwhile, or its client may win the session back.
/// Returns: whether the server confirmed the expiry within `limit`.
bool expire_session(std::int64_t id, std::string_view password,
                    std::chrono::milliseconds limit = std::chrono::seconds{30});

}  // namespace zkt
