// SPDX-License-Identifier: Apache-2.0
// Before queuing under a lock node it did not create, zklock judges from the node's ACL whether it
// could delete its contender again (digest ids as ZooKeeper stores them: user:base64(sha1(user:pw))).
#include <gtest/gtest.h>
#include <stdexcept>
#include <string>
#include <vector>
import zklock.detail;

namespace {

namespace d = zklock::detail;

// Reference values printed by ZooKeeper 3.8's own DigestAuthenticationProvider (its main() takes
// "user:password" arguments) and, independently, by `printf %s user:pw | sha1sum | xxd -r -p | base64`.
TEST(DigestIdentity, MatchesZooKeepersDigestProvider) {
  EXPECT_EQ(d::digest_identity("alice:pw"), "alice:V55/p2T0OpjQ+low3NVAH4aLvm0=");
  EXPECT_EQ(d::digest_identity("super:secret with spaces"), "super:K7ASxeMPsj2dfbSJuUQ9oIJN144=");
  EXPECT_EQ(d::digest_identity("u:"), "u:IX23jg4I7W2/R//KoV8VL1UfuBM=");  // empty password
}

TEST(DigestIdentity, EveryPaddingCaseIsRight) {
  // "u:" + n times 'p': 55 and 56 bytes straddle the padding limit of one block, 64 fills it, 100
  // takes two. References from coreutils' sha1sum, as above.
  auto id = [](int n) { return d::digest_identity("u:" + std::string(static_cast<std::size_t>(n), 'p')); };
  EXPECT_EQ(id(53), "u:9haYA/nqM3XxNMGh/CO/vVlsjwY=");
  EXPECT_EQ(id(54), "u:eKm7CCgUeLQmQ+V5LVuT4xJjoMU=");
  EXPECT_EQ(id(62), "u:7K8oxjW+CY7mhPaEGBOkb+TVrXk=");
  EXPECT_EQ(id(98), "u:0XzmUUjKBinSbjFNyEm+bm1juf4=");
}

TEST(DigestIdentity, RefusesACredentialWithoutColon) {
  EXPECT_THROW((void)d::digest_identity("alice"), std::invalid_argument);
}

d::acl_entry entry(int perms, std::string scheme, std::string id) { return {perms, std::move(scheme), std::move(id)}; }

TEST(AclJudgement, WorldWithDeleteLetsEveryoneDelete) {
  EXPECT_TRUE(d::acl_may_delete({entry(31, "world", "anyone")}, ""));
  EXPECT_TRUE(d::acl_may_delete({entry(d::acl_delete, "world", "anyone")}, "bob:x"));
}

TEST(AclJudgement, WithoutDeleteNobodyMay) {
  EXPECT_FALSE(d::acl_may_delete({entry(1 | 4, "world", "anyone")}, ""));
  EXPECT_FALSE(d::acl_may_delete({entry(1 | 4, "world", "anyone"), entry(1 | 4, "digest", "bob:x")}, "bob:x"));
  EXPECT_FALSE(d::acl_may_delete({}, "bob:x"));
}

TEST(AclJudgement, ADigestEntryCountsOnlyForThatIdentity) {
  const std::vector<d::acl_entry> acl{entry(1 | 4, "world", "anyone"), entry(31, "digest", "alice:h=")};
  EXPECT_TRUE(d::acl_may_delete(acl, "alice:h="));
  EXPECT_FALSE(d::acl_may_delete(acl, "alice:other="));
  EXPECT_FALSE(d::acl_may_delete(acl, ""));
}

TEST(AclJudgement, SchemesZklockCannotJudgeAreGivenTheBenefitOfTheDoubt) {
  EXPECT_TRUE(d::acl_may_delete({entry(31, "ip", "127.0.0.1")}, ""));
  EXPECT_TRUE(d::acl_may_delete({entry(d::acl_delete, "sasl", "svc")}, ""));
  EXPECT_FALSE(d::acl_may_delete({entry(1, "ip", "127.0.0.1")}, "")) << "no DELETE bit at all";
}

}  // namespace
