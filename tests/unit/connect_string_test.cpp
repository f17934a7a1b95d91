// SPDX-License-Identifier: Apache-2.0
// Connect strings are checked before the C client sees them: which are accepted (and their chroot),
// which are refused, and that the refusal names the string.
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>
#include <gtest/gtest.h>
import zklock.detail;

using zklock::detail::validate_connect;

TEST(ConnectString, AcceptsHostListsAndReturnsTheChroot) {
  const std::vector<std::pair<std::string, std::string>> good = {
      {"127.0.0.1:2181", ""},
      {"localhost:1", ""},
      {"zk-1.example_net:65535", ""},
      {"zk1:2181,zk2:2182,10.0.0.3:2183", ""},
      {"zk1:02181", ""},  // five digits, leading zeros included
      {"[::1]:2181", ""},
      {"[fe80::1]:2181,10.0.0.1:2181", ""},
      {"::1:2181", ""},  // unbracketed IPv6: the port is after the last ':'
      {"zk1:2181/app", "/app"},
      {"zk1:2181,zk2:2181/app/locks", "/app/locks"},
      {"[::1]:2181/a", "/a"},
  };
  for (const auto& [connect, chroot] : good) {
    SCOPED_TRACE(connect);
    std::string got;
    EXPECT_NO_THROW(got = validate_connect(connect));
    EXPECT_EQ(got, chroot);
  }
}

TEST(ConnectString, RefusesEveryBadShape) {
  const std::vector<std::string> bad = {
      "",                  // empty
      "zk1",               // no port
      "zk1:",              // empty port
      "zk1:abc",           // not a number
      "zk1:0",             // below 1
      "zk1:65536",         // above 65535
      "zk1:123456",        // six digits
      "zk1:-1",            // a sign
      ":2181",             // empty host
      "/app",              // a chroot and no host
      ",zk1:2181",         // empty first host
      "zk1:2181,",         // trailing ','
      "zk1:2181,,zk2:2182",  // empty host in the list
      "zk 1:2181",         // space in a host
      "zk1:2181 ",         // space in a port
      "zk1!:2181",         // bad character
      "[::1]2181",         // IPv6 without ':' before the port
      "[::1]",             // IPv6 without a port
      "[::1:2181",         // no closing bracket
      "[]:2181",           // empty IPv6 host
      std::string{"zk1:2181\0", 9},  // embedded NUL
      "zk1:2181/",         // the root as chroot
      "zk1:2181//x",       // empty chroot component
      "zk1:2181/a/../b",   // '..' in the chroot
      "zk1:2181/a/./b",    // '.' in the chroot
      "zk1:2181/a/",       // trailing '/'
      "zk1:2181/a\nb",     // control character
      "zk1:2181/zookeeper",  // the server's own subtree
  };
  for (const auto& connect : bad) {
    SCOPED_TRACE(connect);
    EXPECT_THROW(validate_connect(connect), std::invalid_argument);
  }
}

TEST(ConnectString, MessageNamesTheStringAndTheProblem) {
  try {
    validate_connect("zk1:70000");
    FAIL() << "accepted port 70000";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("bad connect string \"zk1:70000\""), std::string::npos) << what;
    EXPECT_NE(what.find("1..65535"), std::string::npos) << what;
  }
  try {
    validate_connect("zk1:2181/a//b");
    FAIL() << "accepted chroot /a//b";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string{e.what()}.find("chroot"), std::string::npos) << e.what();
  }
}
