// SPDX-License-Identifier: Apache-2.0
// floor_requests.hpp — what the asynchronous floors (async_floor on the multi-threaded C client,
// async_floor_st on the single-threaded one) send alike: zklock's contender names, and the ACL
// probe's transaction that zklock sends for a path's first acquire in a session. Header only, no
// lock library, and nothing of the C client's that only one of its two builds has.
#pragma once

#include <cstdint>
#include <cstdio>
#include <random>
#include <string>

#include <zookeeper/zookeeper.h>

namespace bare {

/// Returns: a fresh contender prefix as zklock makes one, "_c_<uuid v4>-lock-".
inline std::string contender_prefix(std::mt19937_64& rng) {
  const std::uint64_t hi = rng(), lo = rng();
  char buf[64];
  std::snprintf(buf, sizeof buf, "_c_%08llx-%04llx-%04llx-%04llx-%012llx-lock-",
                static_cast<unsigned long long>(hi >> 32), static_cast<unsigned long long>((hi >> 16) & 0xffff),
                static_cast<unsigned long long>((hi & 0x0fff) | 0x4000),
                static_cast<unsigned long long>(((lo >> 48) & 0x3fff) | 0x8000),
                static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return buf;
}

/// Effects: fills `ops` with zklock's ACL probe transaction on `prefix` (every operation's path):
/// create our contender (ephemeral-sequential; its name into `name`), create a probe of that name
/// (ephemeral), stamp it (its stat into `stamp`: the transaction's zxid) and delete it again.
inline void acl_probe_ops(zoo_op_t (&ops)[4], const char* prefix, char* name, int name_len, struct Stat* stamp) {
  zoo_create_op_init(&ops[0], prefix, nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, name, name_len);
  zoo_create_op_init(&ops[1], prefix, nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL, nullptr, 0);
  zoo_set_op_init(&ops[2], prefix, nullptr, -1, -1, stamp);
  zoo_delete_op_init(&ops[3], prefix, -1);
}

}  // namespace bare
