// SPDX-License-Identifier: Apache-2.0
// The `zklock` command's credentials and ACLs, against a path whose parent carries a digest ACL
// (alice may do everything, others only read): without credentials, or with someone else's, exec
// exits 77 and names the node and the permission it lacked; with alice's, given by --auth,
// $ZKLOCK_AUTH (several, one per line) or a private --auth-file, it runs CMD; an --auth-file that
// group or others may read is refused (125) before anything is sent; --acl sets the ACL the server
// stores on the nodes exec creates; malformed credentials and ACLs are usage errors that do not
// repeat the secret.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>
#include "cli_run.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zkcli_test::run;
using zkcli_test::scratch_dir;
using zkcli_test::zklock_run;

constexpr int no_permission = 77;
constexpr int usage = 125;

/// Effects: deletes `path` and below as digest `user` with password "pw" (best effort).
void remove_as(std::string_view user, const std::string& path) {
  zkt::raw_client c{user, "pw"};
  for (const auto& kid : zkt::children(path)) remove_as(user, path + "/" + kid);
  c.remove(path);
}

/// A node of alice's (digest alice:pw has every permission, everybody else READ), removed with
/// what is under it at the end. Locks go below it: their lock nodes need CREATE on it.
class CliAuth : public ::testing::Test {
 protected:
  void SetUp() override {
    zkt::create_path("/zklock-test");
    ASSERT_EQ(alice_.create_with_world(base_, zkt::perm::read), 0);
  }
  void TearDown() override { remove_as("alice", base_); }

  /// Returns: `zklock exec --connect ... EXTRA... PATH -- sh -c 'echo token=$ZKLOCK_FENCING_TOKEN'`.
  std::vector<std::string> exec(const std::vector<std::string>& extra) const {
    std::vector<std::string> a{"exec", "--connect", zkt::connect()};
    a.insert(a.end(), extra.begin(), extra.end());
    a.insert(a.end(), {job_, "--", "sh", "-c", "echo token=$ZKLOCK_FENCING_TOKEN"});
    return a;
  }

  /// Expects `r` to have run CMD under the lock (exit 0, a token), leaving no contender behind.
  void expect_ran(zklock_run& r) const {
    EXPECT_EQ(run(r), 0) << r.err();
    EXPECT_TRUE(r.out().starts_with("token=")) << "CMD did not run";
    EXPECT_TRUE(zkt::children(job_).empty());
  }

  zkt::raw_client alice_{"alice", "pw"};
  const std::string base_ = zkt::unique_path("cli-auth");
  const std::string job_ = base_ + "/job";
};

TEST_F(CliAuth, WithoutTheRightCredentialsExecExits77NamingTheNodeAndThePermission) {
  for (const auto& who : std::vector<std::vector<std::string>>{{}, {"--auth", "digest:bob:pw"}}) {
    SCOPED_TRACE(who.empty() ? "no credentials" : "bob");
    zklock_run r{exec(who)};
    EXPECT_EQ(run(r), no_permission) << r.err();
    EXPECT_EQ(r.out(), "") << "CMD ran without the lock";
    const std::string want = "zklock: not authorised: creating " + job_ + " (needs CREATE permission on " + base_ + ")";
    EXPECT_NE(r.err().find(want), std::string::npos) << r.err();
    EXPECT_FALSE(zkt::exists(job_));
  }
}

TEST_F(CliAuth, CredentialsFromTheOptionTheEnvironmentOrAFile) {
  {
    SCOPED_TRACE("--auth, --verbose");
    zklock_run r{exec({"--verbose", "--auth", "digest:alice:pw"})};
    expect_ran(r);
    EXPECT_NE(r.err().find("zklock: authenticated as digest user alice\n"), std::string::npos) << r.err();
    EXPECT_EQ(r.err().find("alice:pw"), std::string::npos) << "--verbose repeats the secret";
  }
  {
    SCOPED_TRACE("--auth, twice");
    zklock_run r{exec({"--auth", "digest:bob:pw", "--auth=digest:alice:pw"})};
    expect_ran(r);
  }
  {
    SCOPED_TRACE("ZKLOCK_AUTH, one per line");
    zklock_run r{exec({}), {{"ZKLOCK_AUTH", "digest:bob:pw\ndigest:alice:pw\n"}}};
    expect_ran(r);
  }
  {
    SCOPED_TRACE("--auth replaces ZKLOCK_AUTH");
    // (mallory: the sessions above with bob's credentials too may have created the lock node,
    // whose ACL then names bob as a creator)
    zklock_run r{exec({"--auth", "digest:mallory:pw"}), {{"ZKLOCK_AUTH", "digest:alice:pw"}}};
    EXPECT_EQ(run(r), no_permission) << r.err();
    EXPECT_EQ(r.out(), "");
  }
  scratch_dir dir;
  const auto file = dir.path / "credentials";
  std::ofstream{file} << "# alice, for the CLI tests\n\ndigest:alice:pw\n";
  namespace fs = std::filesystem;
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write, fs::perm_options::replace);
  {
    SCOPED_TRACE("--auth-file, mode 0600");
    zklock_run r{exec({"--auth-file", file.string()})};
    expect_ran(r);
  }
  for (const auto mode : {fs::perms::group_read, fs::perms::others_read, fs::perms::others_write}) {
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | mode, fs::perm_options::replace);
    const auto shown = static_cast<unsigned>(fs::status(file).permissions() & fs::perms::mask);
    char octal[8];
    std::snprintf(octal, sizeof octal, "%04o", shown);
    SCOPED_TRACE(std::string{"--auth-file, mode "} + octal);
    zklock_run r{exec({"--auth-file", file.string()})};
    EXPECT_EQ(run(r), usage) << r.err();
    EXPECT_EQ(r.out(), "") << "CMD ran";
    EXPECT_NE(r.err().find("--auth-file \"" + file.string() + "\" holds secrets but group or others may access it "
                           "(mode " + octal + "): make it private with chmod 600"),
              std::string::npos)
        << r.err();
    EXPECT_EQ(r.err().find("alice:pw"), std::string::npos) << "the message repeats the secret";
  }
}

/// Returns: `acl` in a canonical order, as text ("scheme:id:perms" per line).
std::string text_of(std::vector<zkt::acl_entry> acl) {
  std::sort(acl.begin(), acl.end(), [](const auto& a, const auto& b) {
    return std::tie(a.scheme, a.id, a.perms) < std::tie(b.scheme, b.id, b.perms);
  });
  std::string out;
  for (const auto& e : acl) out += e.scheme + ":" + e.id + ":" + std::to_string(e.perms) + "\n";
  return out;
}

TEST_F(CliAuth, AclSetsTheStoredAclOfTheNodesExecCreates) {
  const std::string carol = zklock::digest_id("carol", "pw");
  zklock_run holder{{"exec", "--connect", zkt::connect(), "--auth", "digest:alice:pw", "--acl",
                     "auth::cdrwa,world:anyone:r", "--acl=digest:" + carol + ":ra", job_, "--", "sh", "-c",
                     "echo held; read x; exit 0"}};
  ASSERT_EQ(holder.read_line(), "held") << holder.err();
  std::vector<std::string> contenders = zkt::children(job_);
  std::erase_if(contenders, [](const std::string& k) { return k.starts_with("zkstats-"); });
  ASSERT_EQ(contenders.size(), 1u);
  const std::string want = text_of({{zkt::perm::all, "digest", zklock::digest_id("alice", "pw")},
                                    {zkt::perm::read, "world", "anyone"},
                                    {zkt::perm::read | zkt::perm::admin, "digest", carol}});
  for (const std::string& node : {job_, job_ + "/" + contenders[0]}) {
    const auto acl = alice_.acl(node);  // alice has ADMIN: the server shows her digest ids in full
    ASSERT_TRUE(acl) << "cannot read the ACL of " << node;
    EXPECT_EQ(text_of(*acl), want) << node;
  }
  holder.close_stdin();
  EXPECT_EQ(run(holder), 0) << holder.err();
  EXPECT_TRUE(zkt::children(job_).empty());
}

TEST_F(CliAuth, MalformedCredentialsAndAclsAreUsageErrors) {
  struct bad {
    std::vector<std::string> args;
    std::string message;  // a part of the message
  };
  const std::vector<bad> cases = {
      {{"--auth", "alicepw"}, "bad --auth: expected SCHEME:CREDENTIALS"},
      {{"--auth", "digest:alicepw"}, "bad --auth: digest credentials are digest:user:password"},
      {{"--auth-file", "/nonexistent/zklock-credentials"}, "cannot read --auth-file \"/nonexistent/zklock-credentials\""},
      {{"--acl", "world:anyone"}, "bad --acl entry \"world:anyone\": expected SCHEME:ID:PERMS"},
      {{"--acl", "world:anyone:rx"}, "bad --acl entry \"world:anyone:rx\": unknown permission 'x'"},
      {{"--acl", "world:anyone:"}, "bad --acl entry \"world:anyone:\": no permissions"},
      {{"--acl", "world:anyone:r"}, "the acl does not give this session CREATE, DELETE"},
      {{"--acl", "world:someone:cdrwa"}, "the world scheme has one id"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.args[0] + " " + c.args[1]);
    zklock_run r{exec(c.args)};
    EXPECT_EQ(run(r), usage) << r.err();
    EXPECT_EQ(r.out(), "") << "CMD ran";
    EXPECT_NE(r.err().find(c.message), std::string::npos) << r.err();
    EXPECT_EQ(r.err().find("alicepw"), std::string::npos) << "the message repeats the secret";
  }
  zklock_run ls{{"ls", "--connect", zkt::connect(), "--acl", "world:anyone:cdrwa", job_}};
  EXPECT_EQ(run(ls), usage) << ls.err();
  EXPECT_NE(ls.err().find("option --acl does not apply to ls"), std::string::npos) << ls.err();
}

TEST(CliAuthHelp, HelpShowsTheOptionsAndTheEnvironment) {
  zklock_run all{{"--help"}};
  ASSERT_EQ(run(all), 0);
  const auto text = all.out();
  for (const char* want : {"--auth", "--auth-file", "--acl", "ZKLOCK_AUTH", "77"})
    EXPECT_NE(text.find(want), std::string::npos) << "help lacks " << want;
}

}  // namespace
