// SPDX-License-Identifier: Apache-2.0
// Who a contender is, read back from its node's data: zklock's own "host= pid= since=", another
// library's plain text (Curator stores the client's IP address), and damaged data.
#include <chrono>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
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

namespace {

/// Returns: what contender_data() says this process is, read back (host, pid, since in ms).
zklock::detail::identity_fields own_identity() { return zklock::detail::parse_identity(zklock::detail::contender_data()); }

std::string host_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return host;
}

}  // namespace

TEST(ContenderIdentity, OwnDataNamesThisHostAndProcessAndTheTimeOfEachCall) {
  const auto before = std::chrono::system_clock::now();
  const auto first = own_identity();
  const auto second = own_identity();  // (read from what the first call kept)
  const auto after = std::chrono::system_clock::now();
  for (const auto& w : {first, second}) {
    EXPECT_EQ(w.host, host_name());
    ASSERT_TRUE(w.pid.has_value());
    EXPECT_EQ(*w.pid, ::getpid());
    ASSERT_TRUE(w.since.has_value());
    EXPECT_GE(*w.since, std::chrono::time_point_cast<std::chrono::milliseconds>(before));
    EXPECT_LE(*w.since, after);
  }
}

TEST(ContenderIdentity, AForkedChildNamesItsOwnProcess) {
  ASSERT_EQ(own_identity().pid, ::getpid());  // the parent's is kept from here on
  int out[2];
  ASSERT_EQ(::pipe(out), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // report the pid the child's contender data names, and its own
    const auto w = own_identity();
    const long seen[2] = {w.pid ? static_cast<long>(*w.pid) : -1L, static_cast<long>(::getpid())};
    const bool ok = ::write(out[1], seen, sizeof seen) == static_cast<ssize_t>(sizeof seen);
    ::_exit(ok ? 0 : 1);
  }
  ::close(out[1]);
  long seen[2] = {0, 0};
  const auto got = ::read(out[0], seen, sizeof seen);
  ::close(out[0]);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_EQ(got, static_cast<ssize_t>(sizeof seen));
  EXPECT_EQ(seen[1], static_cast<long>(child));
  EXPECT_EQ(seen[0], static_cast<long>(child)) << "the child's contender data names its parent";
  EXPECT_EQ(own_identity().pid, ::getpid());
}
