// SPDX-License-Identifier: Apache-2.0
// Test support: the server address, unique paths, and a raw ZooKeeper view that does not go through
// zklock (to check what is really on the server).
#pragma once
#include <chrono>
#include <cstdint>
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
/// close), retrying until `s` has seen the expiry. Returns: whether it worked within `limit`.
bool expire(zklock::session& s, std::chrono::milliseconds limit = std::chrono::seconds{30});

/// Returns: the answer of a four-letter word, e.g. "wchp".
std::string four_letter(std::string_view word);

/// Returns: session options for tests: ZKLOCK_TEST_ZK, short timeouts.
zklock::session_options options(std::chrono::milliseconds session_timeout = std::chrono::milliseconds{4000});

}  // namespace zkt
