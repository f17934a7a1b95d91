// SPDX-License-Identifier: Apache-2.0
// Lock paths are checked before anything reaches the server.
#include <stdexcept>
#include <string>
#include <gtest/gtest.h>
import zklock.detail;

using zklock::detail::validate_path;

TEST(PathValidation, AcceptsPlainAbsolutePaths) {
  EXPECT_NO_THROW(validate_path("/locks", "p"));
  EXPECT_NO_THROW(validate_path("/locks/orders-1/x_y.z", "p"));
  EXPECT_NO_THROW(validate_path("/zookeeperish", "p"));
  EXPECT_NO_THROW(validate_path(std::string(1024, 'a').replace(0, 1, "/"), "p"));
}

TEST(PathValidation, RejectsEveryBadShape) {
  const std::string nul{"/a\0b", 4};
  for (std::string bad : {std::string{}, std::string{"relative"}, std::string{"/"}, std::string{"/a/"},
                          std::string{"/a//b"}, std::string{"/a/./b"}, std::string{"/a/.."}, std::string{"/."},
                          nul, std::string{"/a\nb"}, std::string{"/a\x7f"}, std::string{"/zookeeper"},
                          std::string{"/zookeeper/quota"}, "/" + std::string(1024, 'a')}) {
    EXPECT_THROW(validate_path(bad, "p"), std::invalid_argument) << "accepted: " << bad;
  }
}

TEST(PathValidation, MessageNamesTheProblem) {
  try {
    validate_path("/a//b", "lock path");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string{e.what()}.find("lock path"), std::string::npos);
    EXPECT_NE(std::string{e.what()}.find("//"), std::string::npos);
  }
}
