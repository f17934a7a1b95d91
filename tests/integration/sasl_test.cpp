// SPDX-License-Identifier: Apache-2.0
// SASL (issue 27): sessions that authenticate with SASL DIGEST-MD5 against a server that takes it
// through JAAS (`tools/zk start --sasl`: users alice and bob). The right password locks, and the
// nodes zklock creates belong to the SASL identity (sasl:alice); a wrong password is refused at
// once with auth_failed; ACLs by SASL identity hold (bob cannot queue under alice's lock, another
// session of alice can); bad SASL options are refused before anything is sent; a zklock built on a
// C client without SASL says how to get one.
#include <chrono>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include "cli_run.hpp"
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// Whether the fixture's server takes SASL (tools/zk start --sasl).
bool server_takes_sasl() {
  const char* d = std::getenv("ZKLOCK_TEST_ZK_DIR");
  return d && std::filesystem::exists(std::filesystem::path{d} / "sasl" / "jaas.conf");
}

#define ZKT_NEED_SASL()                                                                                   \
  do {                                                                                                    \
    if (!zklock::has_sasl())                                                                              \
      GTEST_SKIP() << "zklock was built on a ZooKeeper C client without SASL (Debian's): run "            \
                      "tools/setup --with-tls-sasl and build again to run the SASL tests";                \
    if (!server_takes_sasl()) GTEST_SKIP() << "the fixture's server takes no SASL (tools/zk start --sasl)"; \
  } while (false)

/// Options for a plain-TCP session that authenticates as `user` with `password` (DIGEST-MD5).
zklock::session_options as(std::string user, std::string password) {
  auto o = zkt::options();
  o.tls.reset();
  o.connect = zkt::connect();  // the plain port: the 3.8 C client has no TLS with SASL
  zklock::sasl_options s;
  s.user = std::move(user);
  s.password = std::move(password);
  o.sasl = s;
  o.connect_timeout = 10s;
  return o;
}

TEST(Sasl, WithoutTheCapableClientSaslIsRefusedSayingHowToGetIt) {
  if (zklock::has_sasl()) GTEST_SKIP() << "this zklock has SASL (the refusal is for builds without it)";
  try {
    zklock::session s{as("alice", "alice-secret")};
    ADD_FAILURE() << "a session opened with SASL on a client without it";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::errc::not_supported);
    EXPECT_NE(std::string{e.what()}.find("tools/setup --with-tls-sasl"), std::string::npos) << e.what();
  }
}

TEST(Sasl, BadOptionsAreRefusedBeforeConnecting) {
  if (!zklock::has_sasl()) GTEST_SKIP() << "without SASL every sasl option is refused as not_supported (above)";
  auto refused = [](zklock::session_options o, std::string_view why) {
    o.connect = "127.0.0.1:1";  // never reached: refused first
    EXPECT_THROW(zklock::session{o}, std::invalid_argument) << why;
  };
  auto o = as("alice", "");
  refused(o, "DIGEST-MD5 without a password");
  o = as("", "pw");
  refused(o, "DIGEST-MD5 without a user");
  o = as("alice", "pw");
  o.sasl->mechanism.clear();
  refused(o, "no mechanism");
  o = as("alice", "pw");
  o.sasl->host.clear();
  refused(o, "no server name");
  o = as("alice", std::string{"p\0w", 3});
  refused(o, "a NUL character");
  if (zklock::has_tls()) {
    o = as("alice", "pw");
    o.tls = zklock::tls_options{"/etc/hostname", "/etc/hostname", "/etc/hostname", ""};  // readable: refused for SASL
    o.connect = "127.0.0.1:1";
    zkt::expect_error([&] { zklock::session s{o}; }, zklock::errc::not_supported,
                      "TLS and SASL in one session (the 3.8 C client cannot)");
  }
}

TEST(Sasl, TheRightPasswordLocksAndTheNodesAreTheSaslIdentitys) {
  ZKT_NEED_SASL();
  const auto path = zkt::unique_path("sasl");
  zklock::session s{as("alice", "alice-secret")};
  zklock::mutex m{s, path};
  std::unique_lock held{m};
  const auto acl = zkt::acl_of(path);  // the lock node zklock made: the default ACL with an identity
  ASSERT_TRUE(acl);
  bool alice_all = false, world_read = false;
  for (const auto& e : *acl) {
    if (e.scheme == "sasl" && e.id == "alice") alice_all = e.perms == zkt::perm::all;
    if (e.scheme == "world" && e.id == "anyone") world_read = e.perms == zkt::perm::read;
  }
  EXPECT_TRUE(alice_all) << "sasl:alice gets every permission";
  EXPECT_TRUE(world_read) << "everybody else reads";
}

TEST(Sasl, AWrongPasswordIsRefusedAtOnce) {
  ZKT_NEED_SASL();
  zkt::expect_refused_at_once(as("alice", "not-alice-secret"), zklock::errc::auth_failed, "a wrong password", "SASL",
                              "not-alice-secret");
  // (Not with alice's password: Debian's ZooKeeper 3.8.0 server then takes mallory, see
  // docs/security.md, "What zklock cannot protect against".)
  zkt::expect_error([] { zklock::session s{as("mallory", "mallory-secret")}; }, zklock::errc::auth_failed,
                    "a user the server does not know");
}

TEST(Sasl, AclsBySaslIdentityHold) {
  ZKT_NEED_SASL();
  const auto path = zkt::unique_path("sasl-acl");
  zklock::session alice{as("alice", "alice-secret")};
  zklock::session alice2{as("alice", "alice-secret")};
  zklock::session bob{as("bob", "bob-secret")};
  zklock::mutex ma{alice, path};
  std::unique_lock held{ma};
  zklock::mutex ma2{alice2, path};
  EXPECT_FALSE(ma2.try_lock()) << "the same identity may queue, and is excluded";
  zklock::mutex mb{bob, path};
  zkt::expect_error([&] { (void)mb.try_lock(); }, zklock::errc::no_auth, "bob under alice's lock node");
  EXPECT_EQ(zkt::children(path).size(), 1u) << "nothing of bob's or of alice2's try is left";
}

TEST(Sasl, AServerThatRequiresSaslTakesSaslSessionsAndRefusesOthersClearly) {
  if (!zklock::has_sasl()) GTEST_SKIP() << "zklock was built on a ZooKeeper C client without SASL: tools/setup --with-tls-sasl";
  zkt::private_server srv{1, 100, "--sasl-required"};  // enforce.auth.schemes=sasl; sets ZKLOCK_TEST_ZK
  const auto path = zkt::unique_path("sasl-required");
  {
    zklock::session s{as("alice", "alice-secret")};
    zklock::mutex m{s, path};
    EXPECT_TRUE(m.try_lock());
    m.unlock();
  }
  auto o = zkt::options();
  o.reestablish_after_expiry = false;
  zklock::session plain{o};  // the server takes the connection; it refuses the first request
  zklock::mutex m{plain, path};
  try {
    (void)m.try_lock();
    ADD_FAILURE() << "a session without SASL queued on a server that requires it";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::errc::session_closed_requires_sasl_auth) << e.what();
  }
}

TEST(SaslCli, ExecAuthenticatesWithThePasswordFromTheEnvironmentAndAWrongOneExits77) {
  ZKT_NEED_SASL();
  const auto path = zkt::unique_path("sasl-cli");
  zkcli_test::zklock_run r{{"exec", path, "--connect", zkt::connect(), "--sasl-user", "alice", "-v", "--", "true"},
                           {{"ZKLOCK_SASL_PASSWORD", "alice-secret"}}};
  EXPECT_EQ(zkcli_test::run(r), 0) << r.err();
  EXPECT_NE(r.err().find("authenticated with SASL DIGEST-MD5 as alice"), std::string::npos) << r.err();
  zkcli_test::zklock_run bad{{"exec", path, "--connect", zkt::connect(), "--sasl-user", "alice", "--", "true"},
                             {{"ZKLOCK_SASL_PASSWORD", "wrong-pw-7c1"}}};
  EXPECT_EQ(zkcli_test::run(bad), 77) << bad.err();  // EX_NOPERM, as for refused credentials
  EXPECT_EQ(bad.err().find("wrong-pw-7c1"), std::string::npos) << "never the password";
  zkcli_test::zklock_run none{{"exec", path, "--connect", zkt::connect(), "--sasl-user", "alice", "--", "true"},
                              {{"ZKLOCK_SASL_PASSWORD", std::nullopt}}};
  EXPECT_EQ(zkcli_test::run(none), 125) << none.err();
  EXPECT_NE(none.err().find("needs --sasl-user and a password"), std::string::npos) << none.err();
}

}  // namespace
