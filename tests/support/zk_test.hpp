// SPDX-License-Identifier: Apache-2.0
// Test support: the server address, unique paths, and a raw ZooKeeper view that does not go through
// zklock (to check what is really on the server).
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <gtest/gtest.h>
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

/// Returns: the answer of a four-letter word, e.g. "wchp".
std::string four_letter(std::string_view word);

/// Returns: session options for tests: ZKLOCK_TEST_ZK, short timeouts.
zklock::session_options options(std::chrono::milliseconds session_timeout = std::chrono::milliseconds{4000});

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
  explicit private_server(int nodes = 1, int tick_ms = 100);
  ~private_server();
  private_server(const private_server&) = delete;
  private_server& operator=(const private_server&) = delete;
  const std::string& connect() const noexcept { return connect_; }
  void pause(int node = 1);   ///< SIGSTOP
  void resume(int node = 1);  ///< SIGCONT
  void kill(int node = 1);    ///< SIGKILL
  void restart(int node = 1);
  int kill_leader();          ///< Returns: the index of the killed leader
 private:
  std::string tool(const std::string& args) const;
  std::string dir_, connect_, saved_;
};

/// Effects: deletes `path` (no version check). Returns: whether it was deleted.
bool remove(const std::string& path);

}  // namespace zkt
