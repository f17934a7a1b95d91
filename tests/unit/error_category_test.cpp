// SPDX-License-Identifier: Apache-2.0
// The "zklock" error category names every ZooKeeper return code and zklock's own errors; what each
// return code means to the call that got it (zklock.detail's meaning_of, the session layer's one
// mapping).
#include <initializer_list>
#include <string>
#include <system_error>
#include <zookeeper/zookeeper.h>
#include <gtest/gtest.h>
import zklock;
import zklock.detail;

TEST(ErrorCategory, IsNamedZklock) { EXPECT_STREQ(zklock::error_category().name(), "zklock"); }

TEST(ErrorCategory, MapsEveryZooKeeperCode) {
  for (int rc : {ZSYSTEMERROR, ZRUNTIMEINCONSISTENCY, ZDATAINCONSISTENCY, ZCONNECTIONLOSS, ZMARSHALLINGERROR,
                 ZUNIMPLEMENTED, ZOPERATIONTIMEOUT, ZBADARGUMENTS, ZINVALIDSTATE, ZNEWCONFIGNOQUORUM,
                 ZRECONFIGINPROGRESS, ZSSLCONNECTIONERROR, ZAPIERROR, ZNONODE, ZNOAUTH, ZBADVERSION,
                 ZNOCHILDRENFOREPHEMERALS, ZNODEEXISTS, ZNOTEMPTY, ZSESSIONEXPIRED, ZINVALIDCALLBACK, ZINVALIDACL,
                 ZAUTHFAILED, ZCLOSING, ZNOTHING, ZSESSIONMOVED, ZNOTREADONLY, ZEPHEMERALONLOCALSESSION, ZNOWATCHER,
                 ZRECONFIGDISABLED, ZSESSIONCLOSEDREQUIRESASLAUTH, ZTHROTTLEDOP}) {
    const std::error_code ec = static_cast<zklock::errc>(rc);
    EXPECT_EQ(&ec.category(), &zklock::error_category());
    EXPECT_EQ(ec.message().find("unknown"), std::string::npos) << rc << ": " << ec.message();
  }
}

TEST(ErrorCategory, OwnErrorsHaveMessagesAndConditions) {
  for (auto e : {zklock::errc::connect_timeout, zklock::errc::chroot_missing, zklock::errc::session_closed,
                 zklock::errc::lock_timeout, zklock::errc::lock_lost, zklock::errc::contender_deleted, zklock::errc::not_held,
                 zklock::errc::lease_count_mismatch, zklock::errc::cancelled, zklock::errc::path_kind_mismatch,
                 zklock::errc::not_supported}) {
    EXPECT_EQ(std::error_code{e}.message().find("unknown"), std::string::npos);
    for (auto other : {zklock::errc::connect_timeout, zklock::errc::chroot_missing, zklock::errc::session_closed,
                       zklock::errc::lock_timeout, zklock::errc::lock_lost, zklock::errc::contender_deleted,
                       zklock::errc::not_held, zklock::errc::lease_count_mismatch, zklock::errc::cancelled,
                       zklock::errc::path_kind_mismatch, zklock::errc::not_supported})
      if (other != e) EXPECT_NE(std::error_code{e}.message(), std::error_code{other}.message()) << "one message, two codes";
  }
  EXPECT_TRUE(std::error_code{zklock::errc::cancelled} == std::errc::operation_canceled);
  EXPECT_TRUE(std::error_code{zklock::errc::not_supported} == std::errc::not_supported);
  EXPECT_FALSE(std::error_code{zklock::errc::lock_timeout} == std::errc::operation_canceled);
  EXPECT_TRUE(std::error_code{zklock::errc::lock_timeout} == std::errc::timed_out);
  EXPECT_TRUE(std::error_code{zklock::errc::connection_loss} == std::errc::not_connected);
  EXPECT_FALSE(std::error_code{zklock::errc::no_node} == std::errc::timed_out);
}

TEST(ReturnCodeMeaning, SessionEndsUnknownOutcomesAndAnswers) {
  using zklock::detail::meaning_of;
  using zklock::detail::rc_meaning;
  EXPECT_EQ(meaning_of(ZSESSIONEXPIRED), rc_meaning::session_expired);
  EXPECT_EQ(meaning_of(ZINVALIDSTATE), rc_meaning::session_expired) << "every call after an expiry";
  EXPECT_EQ(meaning_of(-12), rc_meaning::session_expired) << "UNKNOWNSESSION: a transaction of an ending session";
  EXPECT_EQ(meaning_of(ZCLOSING), rc_meaning::session_closed);
  EXPECT_EQ(meaning_of(ZCONNECTIONLOSS), rc_meaning::unknown_outcome);
  EXPECT_EQ(meaning_of(ZOPERATIONTIMEOUT), rc_meaning::unknown_outcome) << "a stalled server";
  for (int rc : std::initializer_list<int>{ZOK, ZNONODE, ZNODEEXISTS, ZNOAUTH, ZBADARGUMENTS, ZNOTEMPTY, ZSYSTEMERROR,
                                          ZAUTHFAILED, ZSESSIONMOVED, ZTHROTTLEDOP, 12345})
    EXPECT_EQ(meaning_of(rc), rc_meaning::answered) << rc << ": the caller judges it";
}
