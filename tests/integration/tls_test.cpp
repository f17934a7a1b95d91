// SPDX-License-Identifier: Apache-2.0
// TLS (issue 27): sessions over a server's TLS client port (`tools/zk start --tls`: Netty, a
// certificate made by keytool at test time, a client certificate demanded). The right CA and a
// trusted client certificate lock; a client that trusts another CA, or that the server does not
// trust, is refused at once with ssl_connection_error and OpenSSL's reason; bad TLS options are
// refused before anything is sent; a zklock built on a C client without TLS says how to get one.
// The lock suites' core cases run over TLS too (tests/CMakeLists.txt: lock_tests_tls).
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <mutex>
#include "cli_run.hpp"
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// Options for a session over the fixture's TLS port with the given CA and client keys.
zklock::session_options over_tls(std::string_view ca = "ca", std::string_view client = "client") {
  auto o = zkt::options();
  o.connect = zkt::tls_connect();
  o.tls = zkt::tls_keys(ca, client);
  o.connect_timeout = 10s;
  return o;
}

/// Skips the test where it cannot run, saying why.
#define ZKT_NEED_TLS()                                                                                        \
  do {                                                                                                        \
    if (!zklock::has_tls())                                                                                   \
      GTEST_SKIP() << "zklock was built on a ZooKeeper C client without TLS (Debian's): run "                 \
                      "tools/setup --with-tls-sasl and build again to run the TLS tests";                     \
    if (zkt::tls_connect().empty()) GTEST_SKIP() << "the fixture's server has no TLS port (tools/zk start --tls)"; \
  } while (false)

TEST(Tls, WithoutTheCapableClientTlsIsRefusedSayingHowToGetIt) {
  if (zklock::has_tls()) GTEST_SKIP() << "this zklock has TLS (the refusal is for builds without it)";
  auto o = zkt::options();
  o.tls = zklock::tls_options{"/etc/hostname", "/etc/hostname", "/etc/hostname", ""};
  try {
    zklock::session s{o};
    ADD_FAILURE() << "a session opened with TLS on a client without it";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::errc::not_supported);
    EXPECT_TRUE(e.code() == std::errc::not_supported);
    EXPECT_NE(std::string{e.what()}.find("tools/setup --with-tls-sasl"), std::string::npos) << e.what();
  }
}

TEST(Tls, BadOptionsAreRefusedBeforeConnecting) {
  if (!zklock::has_tls()) GTEST_SKIP() << "without TLS every tls option is refused as not_supported (above)";
  auto refused = [](zklock::tls_options t, std::string_view why) {
    auto o = zkt::options();
    o.connect = "127.0.0.1:1";  // never reached: refused first
    o.tls = std::move(t);
    EXPECT_THROW(zklock::session{o}, std::invalid_argument) << why;
  };
  const auto good = zkt::tls_keys();
  auto t = good;
  t.ca_file.clear();
  refused(t, "no CA file");
  t = good;
  t.cert_file.clear();
  refused(t, "no certificate: the 3.8 C client always presents one");
  t = good;
  t.key_file = "/nonexistent/zklock/key.pem";
  refused(t, "an unreadable key file");
  t = good;
  t.ca_file = "/tmp/a,b.pem";
  refused(t, "a comma: the C client takes the files as one comma-separated string");
  t = good;
  t.key_password = "pass,word";
  refused(t, "a comma in the key's passphrase");
}

TEST(Tls, TheRightCaAndATrustedClientLock) {
  ZKT_NEED_TLS();
  const auto path = zkt::unique_path("tls");
  zklock::session a{over_tls()};
  zklock::session b{over_tls()};
  EXPECT_EQ(a.state(), zklock::session_state::connected);
  zklock::mutex ma{a, path};
  zklock::mutex mb{b, path};
  {
    std::unique_lock held{ma};
    EXPECT_FALSE(mb.try_lock()) << "excluded over TLS as over TCP";
    // The node is the same one a plain session of the same server sees.
    EXPECT_EQ(zkt::children(path).size(), 1u);
  }
  std::unique_lock hb{mb};  // handed over
  EXPECT_TRUE(hb.owns_lock());
}

TEST(Tls, AnEncryptedKeyNeedsItsPassphrase) {
  ZKT_NEED_TLS();
  auto o = over_tls();
  o.tls->key_file.replace(o.tls->key_file.size() - 4, 4, "-encrypted.key");  // client.key -> client-encrypted.key
  o.tls->key_password = "zklock-test-key";  // tools/zk's make_tls_material
  {
    zklock::session s{o};
    zklock::mutex m{s, zkt::unique_path("tls-key")};
    EXPECT_TRUE(m.try_lock());
    m.unlock();
  }
  o.tls->key_password = "not-the-passphrase";
  zkt::expect_refused_at_once(o, zklock::errc::ssl_connection_error, "a wrong passphrase", "", "not-the-passphrase");
}

TEST(Tls, AClientThatTrustsAnotherCaIsRefusedAtOnce) {
  ZKT_NEED_TLS();
  zkt::expect_refused_at_once(over_tls("other-ca", "client"), zklock::errc::ssl_connection_error,
                              "a server whose certificate no trusted CA signed", "certificate verify failed");
  // Only the CA file counts, not OpenSSL's default store (tools/build-zookeeper-client's patch): with
  // the server's CA as that store, the client that trusts another CA is still refused. (No session
  // of this process is open here: the environment is not read by another thread meanwhile.)
  ::setenv("SSL_CERT_FILE", zkt::tls_keys().ca_file.c_str(), 1);
  zkt::expect_refused_at_once(over_tls("other-ca", "client"), zklock::errc::ssl_connection_error,
                              "the server's CA in OpenSSL's default store only", "certificate verify failed");
  ::unsetenv("SSL_CERT_FILE");
}

TEST(Tls, AClientTheServerDoesNotTrustIsRefused) {
  ZKT_NEED_TLS();
  // The server demands a client certificate it trusts.
  zkt::expect_refused_at_once(over_tls("ca", "stranger"), zklock::errc::ssl_connection_error,
                              "a client certificate the server does not trust", "alert");
}

TEST(Tls, AServerSilentInTheHandshakeNeitherHangsTheSessionNorItsClose) {
  if (!zklock::has_tls()) GTEST_SKIP() << "zklock was built on a ZooKeeper C client without TLS: tools/setup --with-tls-sasl";
  zkt::private_server srv{1, 100, "--tls"};
  std::string tls_connect;
  std::ifstream{srv.dir() + "/tls_connect"} >> tls_connect;
  auto o = zkt::options(std::chrono::milliseconds{3000});
  o.connect = tls_connect;
  o.tls = zklock::tls_options{srv.dir() + "/tls/ca.pem", srv.dir() + "/tls/client.pem", srv.dir() + "/tls/client.key", ""};
  o.connect_timeout = 2s;
  srv.pause();  // the kernel still accepts the connection; nobody answers the ClientHello
  auto opening = std::async(std::launch::async, [o] {
    try {
      zklock::session s{o};
      return std::error_code{};
    } catch (const std::system_error& e) {
      return e.code();
    }
  });
  const bool ended = opening.wait_for(20s) == std::future_status::ready;
  srv.resume();  // (if it hangs in the handshake, this lets it end, so that the test can)
  ASSERT_TRUE(ended) << "the constructor (or the close of its handle) hangs in the TLS handshake";
  const auto code = opening.get();
  EXPECT_TRUE(code == zklock::errc::connect_timeout || code == zklock::errc::ssl_connection_error) << code.message();
}

TEST(Tls, APlainClientOnTheTlsPortGetsNoSession) {
  ZKT_NEED_TLS();
  auto o = zkt::options();
  o.connect = zkt::tls_connect();  // no tls options: plain TCP to the TLS port
  o.connect_timeout = 2s;
  zkt::expect_error([&] { zklock::session s{o}; }, zklock::errc::connect_timeout, "plain TCP to the TLS port");
}

// ---- the command line: --tls-ca, --tls-cert, --tls-key, the key's passphrase never on argv ----

/// The `zklock` arguments for the fixture's TLS port with the given CA and client keys.
std::vector<std::string> tls_args(std::string_view ca = "ca", std::string_view client = "client") {
  const auto t = zkt::tls_keys(ca, client);
  return {"--connect", zkt::tls_connect(), "--tls-ca", t.ca_file, "--tls-cert", t.cert_file, "--tls-key", t.key_file};
}

std::vector<std::string> with(std::vector<std::string> head, const std::vector<std::string>& tail) {
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

TEST(TlsCli, ExecHoldsTheLockOverTls) {
  ZKT_NEED_TLS();
  const auto path = zkt::unique_path("tls-cli");
  zkcli_test::zklock_run r{with({"exec", path}, with(tls_args(), {"--", "sh", "-c", "echo held"}))};
  EXPECT_EQ(zkcli_test::run(r), 0) << r.err();
  EXPECT_NE(r.out().find("held"), std::string::npos);
  EXPECT_TRUE(zkcli_test::contender_nodes(path).empty()) << "released";
}

TEST(TlsCli, ARefusedHandshakeExitsWithConfigAndSaysWhy) {
  ZKT_NEED_TLS();
  zkcli_test::zklock_run r{with({"exec", zkt::unique_path("tls-cli")}, with(tls_args("other-ca"), {"--", "true"}))};
  EXPECT_EQ(zkcli_test::run(r), 78) << r.err();  // EX_CONFIG
  EXPECT_NE(r.err().find("certificate verify failed"), std::string::npos) << r.err();
}

TEST(TlsCli, TheThreeFilesGoTogether) {
  ZKT_NEED_TLS();
  zkcli_test::zklock_run r{{"exec", "/x", "--connect", zkt::tls_connect(), "--tls-ca", zkt::tls_keys().ca_file, "--", "true"}};
  EXPECT_EQ(zkcli_test::run(r), 125) << r.err();
  EXPECT_NE(r.err().find("go together"), std::string::npos) << r.err();
}

TEST(TlsCli, AKeyPassphraseComesFromAPrivateFileOrTheEnvironment) {
  ZKT_NEED_TLS();
  zkcli_test::scratch_dir d;
  const auto open_file = d.path / "open";
  { std::ofstream{open_file} << "pw-5e3f9\n"; }
  std::filesystem::permissions(open_file, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write |
                                              std::filesystem::perms::others_read);
  zkcli_test::zklock_run r{with({"exec", "/x"}, with(tls_args(), {"--tls-key-password-file", open_file.string(), "--", "true"}))};
  EXPECT_EQ(zkcli_test::run(r), 125) << r.err();
  EXPECT_NE(r.err().find("chmod 600"), std::string::npos) << r.err();
  EXPECT_EQ(r.err().find("pw-5e3f9"), std::string::npos) << "the passphrase is never repeated";
  // An unencrypted key ignores a passphrase: from the environment, the run goes through.
  const auto path = zkt::unique_path("tls-cli");
  zkcli_test::zklock_run ok{with({"exec", path}, with(tls_args(), {"--", "true"})), {{"ZKLOCK_TLS_KEY_PASSWORD", "unused"}}};
  EXPECT_EQ(zkcli_test::run(ok), 0) << ok.err();
}

}  // namespace
