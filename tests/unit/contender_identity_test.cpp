// SPDX-License-Identifier: Apache-2.0
// Who a contender is, read back from its node's data: zklock's own "host= pid= since=", another
// library's plain text (Curator stores the client's IP address), and damaged data.
#include <chrono>
#include <string>
#include <gtest/gtest.h>
import zklock;
import zklock.detail;

TEST(ContenderIdentity, ReadsZklocksOwnData) {
  const auto w = zklock::detail::parse_identity("host=db-1 pid=41027 since=1738288800114");
  EXPECT_EQ(w.host, "db-1");
  ASSERT_TRUE(w.pid.has_value());
  EXPECT_EQ(*w.pid, 41027);
  ASSERT_TRUE(w.since.has_value());
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(w.since->time_since_epoch()).count(), 1738288800114);
}

TEST(ContenderIdentity, KeepsAnotherLibrarysTextAsTheHost) {
  const auto w = zklock::detail::parse_identity(std::string{"10.0.0.7\n\0", 10});
  EXPECT_EQ(w.host, "10.0.0.7");
  EXPECT_FALSE(w.pid.has_value());
  EXPECT_FALSE(w.since.has_value());
}

TEST(ContenderIdentity, DamagedFieldsAreLeftOutAndControlCharactersShownAsQuestionMarks) {
  const auto w = zklock::detail::parse_identity("host=a\x01z pid=12x since= extra=1");
  EXPECT_EQ(w.host, "a?z");
  EXPECT_FALSE(w.pid.has_value());
  EXPECT_FALSE(w.since.has_value());
  EXPECT_EQ(zklock::detail::parse_identity("").host, "");
}

TEST(ContenderIdentity, NamesOfSidesAndStates) {
  EXPECT_STREQ(zklock::to_string(zklock::contender_side::mutex), "mutex");
  EXPECT_STREQ(zklock::to_string(zklock::contender_side::write), "write");
  EXPECT_STREQ(zklock::to_string(zklock::contender_state::holder), "holder");
  EXPECT_STREQ(zklock::to_string(zklock::contender_state::unknown), "unknown");
}

// A revocation request is exactly Curator's marker (LockInternals.REVOKE_MESSAGE): nothing else a
// node may store (zklock's identity, Curator's IP address, an empty node) counts.
TEST(RevocationMarker, IsCuratorsMarkerExactly) {
  EXPECT_EQ(zklock::detail::revocation_marker, "__REVOKE__");
  EXPECT_TRUE(zklock::detail::is_revocation_request("__REVOKE__"));
  for (const char* other : {"", "__REVOKE", "__REVOKE__ ", "__revoke__", "host=a pid=1 since=2", "10.0.0.1"})
    EXPECT_FALSE(zklock::detail::is_revocation_request(other)) << other;
}
