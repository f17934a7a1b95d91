// SPDX-License-Identifier: Apache-2.0
// The mode rules: who holds, and what each waiter watches.
#include <string>
#include <vector>
#include <gtest/gtest.h>
import zklock;

using namespace zklock::detail;

namespace {
std::vector<contender> queue(const std::string& kinds) {  // 'L' lock, 'R' read, 'W' write, 'S' lease
  std::vector<contender> q;
  int seq = 0;
  for (char k : kinds) {
    contender c;
    c.name = std::string(1, k) + std::to_string(seq);
    c.seq = seq++;
    c.kind = k == 'R' ? contender_kind::read : k == 'W' ? contender_kind::write
           : k == 'S' ? contender_kind::lease : contender_kind::lock;
    q.push_back(c);
  }
  return q;
}
}  // namespace

TEST(ModeRules, ExclusiveHeldIffFirstElseWatchPredecessor) {
  const auto q = queue("LLL");
  EXPECT_TRUE(exclusive_rule{}(q, 0).held);
  const auto v = exclusive_rule{}(q, 2);
  EXPECT_FALSE(v.held);
  EXPECT_EQ(v.what, verdict::watch::node);
  EXPECT_EQ(v.index, 1u);
}

TEST(ModeRules, ReadersOverlapUntilAWriter) {
  const auto q = queue("RRWRR");
  EXPECT_TRUE(read_rule{}(q, 0).held);
  EXPECT_TRUE(read_rule{}(q, 1).held);
  const auto v = read_rule{}(q, 4);
  EXPECT_FALSE(v.held);
  EXPECT_EQ(v.index, 2u);  // the nearest writer ahead, not the reader just ahead
}

TEST(ModeRules, WriterHeldIffFirst) {
  const auto q = queue("RWR");
  EXPECT_FALSE(write_rule{}(q, 1).held);
  EXPECT_EQ(write_rule{}(q, 1).index, 0u);
  EXPECT_TRUE(write_rule{}(queue("WR"), 0).held);
}

TEST(ModeRules, SemaphoreFirstWaiterWatchesAnyChangeOthersTheOneAhead) {
  const auto q = queue("SSSSSS");
  const semaphore_rule r{3};
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(r(q, i).held);
  EXPECT_TRUE(r(q, 2).poke_successor);           // someone waits behind: wake it when granted
  EXPECT_FALSE(r(queue("SS"), 1).poke_successor);  // nobody behind
  EXPECT_EQ(r(q, 3).what, verdict::watch::any_change);  // any of the 3 releases is its turn
  EXPECT_EQ(r(q, 4).what, verdict::watch::node);
  EXPECT_EQ(r(q, 4).index, 3u);
}

TEST(ModeRules, OutOfOrderReleaseStillGrantsTheFirstWaiter) {
  // Leases 2: holders S0 S1, waiters S2 S3. S1 leaves first: S2 must now hold.
  auto q = queue("SSSS");
  const semaphore_rule r{2};
  q.erase(q.begin() + 1);
  EXPECT_TRUE(r(q, 1).held);  // former S2
  EXPECT_EQ(r(q, 2).what, verdict::watch::any_change);  // S3 moved up to first waiter
}
