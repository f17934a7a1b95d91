// SPDX-License-Identifier: Apache-2.0
// The mode rules: who holds, and what each waiter watches.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <random>
#include <span>
#include <optional>
#include <string>
#include <string_view>
#include <vector>
#include <gtest/gtest.h>
import zklock;
import zklock.detail;

using namespace zklock::detail;

namespace {
std::vector<contender> queue(const std::string& kinds) {  // 'L' lock, 'R' read, 'W' write, 'S' lease; '2'..'9' a lease of that many permits
  static std::deque<std::string> names;  // what the contenders' names view (never moves)
  std::vector<contender> q;
  int seq = 0;
  for (char k : kinds) {
    contender c;
    c.name = names.emplace_back(std::string(1, k) + std::to_string(seq));
    c.seq = seq++;
    c.kind = k == 'R' ? contender_kind::read : k == 'W' ? contender_kind::write
           : k == 'S' || (k >= '2' && k <= '9') ? contender_kind::lease : contender_kind::lock;
    if (k >= '2' && k <= '9') c.weight = static_cast<std::uint32_t>(k - '0');
    q.push_back(c);
  }
  return q;
}
}  // namespace

/// Returns: the names of the contenders that q[self] watches by `r` with `budget` (the nearest
/// first), found by locate() and nearest_first() in the listing q reversed (any order will do).
template <class Rule>
std::vector<std::string> watched(const Rule& r, std::vector<contender> q, std::size_t self, std::size_t budget) {
  const std::string_view name = q[self].name;
  std::ranges::reverse(q);
  auto here = locate(r, std::span<contender>{q}, name);
  std::vector<std::string> out;
  if (!here) return out;
  const std::size_t n = nearest_first(here->ahead, budget);
  for (std::size_t i = 0; i < n; ++i) out.emplace_back(here->ahead[i].name);
  return out;
}

/// Returns: the names of the counted contenders ahead of q[self] by `r`.
template <class Rule>
std::vector<std::string> ahead(const Rule& r, const std::vector<contender>& q, std::size_t self) {
  std::vector<std::string> out;
  for (auto i : stand(r, q, self).ahead) out.emplace_back(q[i].name);
  return out;
}

TEST(ModeRules, ExclusiveHeldIffFirstEveryoneAheadCounts) {
  const auto q = queue("LLL");
  EXPECT_TRUE(stand(exclusive_rule{}, q, 0).held());
  EXPECT_FALSE(stand(exclusive_rule{}, q, 2).held());
  EXPECT_EQ(ahead(exclusive_rule{}, q, 2), (std::vector<std::string>{"L0", "L1"}));
}

TEST(ModeRules, ReadersOverlapUntilAWriter) {
  const auto q = queue("RRWRRWR");
  EXPECT_TRUE(stand(read_rule{}, q, 0).held());
  EXPECT_TRUE(stand(read_rule{}, q, 1).held());
  EXPECT_FALSE(stand(read_rule{}, q, 4).held());
  EXPECT_EQ(ahead(read_rule{}, q, 4), (std::vector<std::string>{"W2"}));  // readers ahead do not count
  EXPECT_EQ(ahead(read_rule{}, q, 6), (std::vector<std::string>{"W2", "W5"}));
}

TEST(ModeRules, WriterHeldIffFirstReadersAndWritersCount) {
  const auto q = queue("RWR");
  EXPECT_FALSE(stand(write_rule{}, q, 1).held());
  EXPECT_EQ(ahead(write_rule{}, q, 1), (std::vector<std::string>{"R0"}));
  EXPECT_TRUE(stand(write_rule{}, queue("WR"), 0).held());
}

TEST(ModeRules, SemaphoreHeldWhileFewerThanLeasesAhead) {
  const auto q = queue("SSSSSS");
  const semaphore_rule r{3};
  for (std::size_t i = 0; i < 3; ++i) EXPECT_TRUE(stand(r, q, i).held());
  EXPECT_FALSE(stand(r, q, 3).held());
  EXPECT_EQ(stand(r, q, 3).limit, 3u);
  EXPECT_EQ(stand(r, q, 5).ahead.size(), 5u);
}

TEST(ModeRules, OutOfOrderReleaseStillGrantsTheFirstWaiter) {
  // Leases 2: holders S0 S1, waiters S2 S3. S1 leaves first: S2 must now hold, S3 not yet.
  auto q = queue("SSSS");
  const semaphore_rule r{2};
  q.erase(q.begin() + 1);
  EXPECT_TRUE(stand(r, q, 1).held());   // former S2
  EXPECT_FALSE(stand(r, q, 2).held());  // former S3: S0 and S2 ahead
}

// ---- leases of many permits (acquire(n)) ----------------------------------------------------------

/// Returns: which of q's leases hold under N leases ('H' or '.' per contender).
std::string lease_holders(const std::vector<contender>& q, std::size_t n) {
  std::string out;
  for (std::size_t i = 0; i < q.size(); ++i) out += stand(semaphore_rule{n}, q, i).held() ? 'H' : '.';
  return out;
}

TEST(ModeRules, ALeaseOfManyPermitsHoldsWhenAllOfThemFitBesideThoseAhead) {
  EXPECT_EQ(lease_holders(queue("2S"), 3), "HH");
  EXPECT_EQ(lease_holders(queue("23S"), 4), "H..");  // 3 do not fit beside 2; the 1 behind waits its turn
  EXPECT_EQ(lease_holders(queue("S3S"), 4), "HH.");
  EXPECT_EQ(lease_holders(queue("4SS"), 4), "H..");
  EXPECT_EQ(stand(semaphore_rule{4}, queue("23"), 1).limit, 2u);  // 4 - 3 + 1: held with fewer than 2 ahead
  EXPECT_EQ(stand(semaphore_rule{4}, queue("23"), 1).weight, 2u);
  EXPECT_EQ(lease_holders(queue("5"), 4), ".");  // more than N: never (acquire(n) refuses it first)
}

TEST(ModeRules, LeaseHoldersAreAlwaysAPrefixThatFitsAndNoWaiterIsPassed) {
  // Every queue of up to 7 leases of 1..4 permits, N = 4: the holders are the head of the queue,
  // their permits never exceed N, and the first waiter's permits do not fit beside them (it is
  // never passed by a later, smaller one, and it is granted as soon as enough of those ahead go).
  const std::string weights = "S234";
  for (std::size_t len = 1; len <= 7; ++len) {
    std::size_t combos = 1;
    for (std::size_t i = 0; i < len; ++i) combos *= weights.size();
    for (std::size_t code = 0; code < combos; ++code) {
      std::string kinds;
      for (std::size_t c = code, i = 0; i < len; ++i, c /= weights.size()) kinds += weights[c % weights.size()];
      const auto q = queue(kinds);
      const auto held = lease_holders(q, 4);
      const auto prefix = held.find('.');
      ASSERT_EQ(held.find('H', prefix == std::string::npos ? held.size() : prefix), std::string::npos) << kinds;
      std::size_t permits = 0;
      for (std::size_t i = 0; i < held.size() && held[i] == 'H'; ++i) permits += q[i].weight;
      EXPECT_LE(permits, 4u) << kinds;
      if (prefix != std::string::npos) EXPECT_GT(permits + q[prefix].weight, 4u) << kinds;
    }
  }
}

TEST(ModeRules, AWaiterForManyPermitsWatchesEnoughOfThoseAheadToSeeItsTurnComing) {
  // N = 4, a lease of 3 behind [S 2 S S]: held with fewer than 2 permits ahead. The nearest
  // contenders whose permits reach a budget of 2 are the last two (1 + 1), of 4 (2 + 1 + 1 = 4: all).
  const auto q = queue("S2SS3");
  const auto st = stand(semaphore_rule{4}, q, 4);
  EXPECT_EQ(st.weight, 5u);
  EXPECT_EQ(st.limit, 2u);
  EXPECT_EQ(watched(semaphore_rule{4}, q, 4, 2), (std::vector<std::string>{"S3", "S2"}));
  EXPECT_EQ(watched(semaphore_rule{4}, q, 4, 4), (std::vector<std::string>{"S3", "S2", "21"}));
  EXPECT_EQ(watched(semaphore_rule{4}, q, 4, 100), (std::vector<std::string>{"S3", "S2", "21", "S0"}));
  // With the watched ones' permits at least the limit, the unwatched ones' going can never prove a
  // grant alone: 5 ahead, watching 2 (of 2 permits): 3 unwatched gone still leaves 2, not < 2.
  tally t{st.weight, st.limit, 2, 0};
  t.gone = 1;  // one watched lease of 1 permit went
  EXPECT_FALSE(t.proves_held());
  EXPECT_TRUE(t.must_relist());  // others may have gone unseen: list again
  // Unit weights: the budget is a number of contenders, as before.
  const auto ones = queue("SSSSS");
  EXPECT_EQ(watched(semaphore_rule{2}, ones, 4, 4).size(), 4u);
}

// locate() and nearest_first() answer from a listing in any order what stand() answers from the
// sorted queue: a property test over random listings of every kind and weight, with sequence
// numbers across the 32-bit wrap, for every rule and budget.
TEST(ModeRules, LocatingInAnUnsortedListingAgreesWithTheSortedQueue) {
  std::mt19937 gen{20261207};
  const std::string lock_side = "LRW", lease_side = "S23";
  for (int round = 0; round < 2000; ++round) {
    const bool leases = round % 2 == 1;
    const std::string& kinds = leases ? lease_side : lock_side;
    const std::size_t len = 1 + gen() % 12;
    std::string code;
    for (std::size_t i = 0; i < len; ++i) code += kinds[gen() % kinds.size()];
    auto q = queue(code);  // in queue order; sequence numbers from just below the wrap
    const std::int32_t base = round % 3 == 0 ? std::numeric_limits<std::int32_t>::max() - 5 : 7;
    for (std::size_t i = 0; i < q.size(); ++i)
      q[i].seq = static_cast<std::int32_t>(static_cast<std::uint32_t>(base) + static_cast<std::uint32_t>(i));
    const std::size_t self = gen() % q.size();
    const std::size_t budget = 1 + gen() % 6;
    auto check = [&](const auto& rule) {
      SCOPED_TRACE(code + " self " + std::to_string(self) + " budget " + std::to_string(budget));
      const standing st = stand(rule, std::span<const contender>{q}, self);
      auto listed = q;
      std::ranges::shuffle(listed, gen);
      auto here = locate(rule, std::span<contender>{listed}, q[self].name);
      ASSERT_TRUE(here.has_value());
      EXPECT_EQ(here->position, self);
      EXPECT_EQ(here->held(), st.held());
      EXPECT_EQ(here->weight, st.weight);
      EXPECT_EQ(here->limit, st.limit);
      EXPECT_EQ(here->ahead.size(), st.ahead.size());
      // The sorted queue's answer: the nearest counted ones ahead whose permits reach the budget.
      std::vector<std::string> expected;
      for (std::size_t i = st.ahead.size(), w = 0; i > 0 && w < budget; --i) {
        expected.emplace_back(q[st.ahead[i - 1]].name);
        w += q[st.ahead[i - 1]].weight;
      }
      const std::size_t n = nearest_first(here->ahead, budget);
      std::vector<std::string> got;
      for (std::size_t i = 0; i < n; ++i) got.emplace_back(here->ahead[i].name);
      EXPECT_EQ(got, expected);
      EXPECT_FALSE(locate(rule, std::span<contender>{listed}, "absent").has_value());
    };
    if (leases) {
      const std::uint32_t n_leases = 1 + static_cast<std::uint32_t>(gen() % 5);
      check(semaphore_rule{n_leases, q[self].weight});
    } else {
      check(exclusive_rule{});
      check(read_rule{});
      check(write_rule{});
    }
  }
}

// ---- one path, one meaning: mutex, read and write contenders in one queue ------------------------

/// Returns: the contenders of `q` that hold by their own kind's rule.
std::string holders(const std::vector<contender>& q) {
  std::string out;
  for (std::size_t i = 0; i < q.size(); ++i) {
    const bool held = q[i].kind == contender_kind::read    ? stand(read_rule{}, q, i).held()
                      : q[i].kind == contender_kind::write ? stand(write_rule{}, q, i).held()
                                                           : stand(exclusive_rule{}, q, i).held();
    if (held) (out += q[i].name) += " ";
  }
  return out;
}

TEST(ModeRules, EveryLockRuleQueuesAmongMutexReadAndWriteContenders) {
  for (unsigned k : {exclusive_rule::kinds, read_rule::kinds, write_rule::kinds}) {
    EXPECT_EQ(k, lock_kinds);
    EXPECT_EQ(k & lease_kinds, 0u);
  }
  EXPECT_EQ(exclusive_rule::foreign, lease_kinds);
  EXPECT_EQ(read_rule::foreign, lease_kinds);
  EXPECT_EQ(write_rule::foreign, lease_kinds);
  EXPECT_EQ(semaphore_rule::kinds, lease_kinds);
  EXPECT_EQ(semaphore_rule::foreign, lock_kinds);
}

TEST(ModeRules, AMutexContenderIsAWriterToEverySide) {
  // Each pair of kinds, the first ahead: only a reader behind a reader shares the lock.
  const std::string kinds = "LRW";
  for (char first : kinds)
    for (char second : kinds) {
      const auto q = queue(std::string{first, second});
      const bool shared = first == 'R' && second == 'R';
      EXPECT_EQ(holders(q), shared ? "R0 R1 " : std::string{first} + "0 ") << first << second;
    }
  // A mutex contender ahead keeps a reader and a writer waiting, and counts for both.
  EXPECT_EQ(ahead(read_rule{}, queue("LRR"), 2), (std::vector<std::string>{"L0"}));
  EXPECT_EQ(ahead(write_rule{}, queue("LRW"), 2), (std::vector<std::string>{"L0", "R1"}));
  EXPECT_EQ(ahead(exclusive_rule{}, queue("RWL"), 2), (std::vector<std::string>{"R0", "W1"}));
  EXPECT_EQ(holders(queue("RRLRW")), "R0 R1 ");
}

TEST(ModeRules, TheListingTellsWhichKindsAreUnderAPath) {
  const name_list kids{"_c_1-lock-0000000003", "_c_2-__READ__0000000001", "lease-0000000002",
                                      "zklock-hold-7", "_c_3-__WRIT__0000000004"};
  unsigned present = 0;
  const auto q = sorted_contenders(kids, lock_kinds, &present);
  EXPECT_EQ(q.size(), 3u);
  EXPECT_EQ(present, lock_kinds | lease_kinds);  // the lease too, though not wanted
  EXPECT_EQ(q.front().kind, contender_kind::read);
  (void)sorted_contenders({"_c_1-lock-0000000003"}, lease_kinds, &present);
  EXPECT_EQ(present, kind_bit(contender_kind::lock));
}

TEST(ModeRules, ALeaseCountIsRecognisedByItsTextAndItsLength) {
  EXPECT_TRUE(stores_lease_count("leases=1"));
  EXPECT_TRUE(stores_lease_count("leases=1000000"));
  EXPECT_FALSE(stores_lease_count(""));
  EXPECT_FALSE(stores_lease_count("leases="));
  EXPECT_FALSE(stores_lease_count("leases=2x"));
  EXPECT_FALSE(stores_lease_count("10.0.0.7"));  // a node that stores an address
  EXPECT_TRUE(may_store_lease_count(std::string_view{"leases=1"}.size()));
  EXPECT_TRUE(may_store_lease_count(std::string_view{"leases=1000000"}.size()));
  EXPECT_FALSE(may_store_lease_count(0));  // a lock node zklock or Curator created
  EXPECT_FALSE(may_store_lease_count(7));
  EXPECT_FALSE(may_store_lease_count(15));
}

// ---- what deletions prove (the tally) ----------------------------------------------------------

TEST(Tally, AMutexWaiterIsGrantedOnlyWhenEveryoneAheadIsSeenGone) {
  tally t{2, 1, 2, 0};  // two ahead, both watched
  EXPECT_FALSE(t.proves_held());
  t.gone = 1;  // one of them left (the holder released, or the waiter between us timed out)
  EXPECT_FALSE(t.proves_held());
  EXPECT_FALSE(t.must_relist());  // both are watched: the other one's deletion will tell
  t.gone = 2;
  EXPECT_TRUE(t.proves_held());
}

TEST(Tally, ADeletionWithUnwatchedContendersAheadMeansListAgain) {
  tally t{5, 1, 2, 0};  // five ahead, the nearest two watched
  EXPECT_FALSE(t.must_relist());
  t.gone = 1;
  EXPECT_FALSE(t.proves_held());
  EXPECT_TRUE(t.must_relist());
  t.gone = 2;  // both watched ones gone: three unwatched may remain
  EXPECT_FALSE(t.proves_held());
  EXPECT_TRUE(t.must_relist());
}

TEST(Tally, ASemaphoreWaiterCountsReleasesInAnyOrder) {
  tally t{4, 3, 4, 0};  // leases 3: four ahead, all watched; two must go
  t.gone = 1;
  EXPECT_FALSE(t.proves_held());
  EXPECT_FALSE(t.must_relist());
  t.gone = 2;
  EXPECT_TRUE(t.proves_held());
}

TEST(Tally, WatchingTwiceTheLimitListsWhileTheNextHolderStillHolds) {
  // A mutex waiter with three ahead watches the nearest two (window = 2 * limit): the holder's
  // deletion is unseen; the next one's (the contender two ahead, now the holder) makes it list, at
  // which point only the contender just ahead is left, watched already.
  constexpr std::size_t w = zklock::watch_predecessor::window(3, 1, true);
  static_assert(w == 2);
  tally t{3, 1, w, 1};
  EXPECT_TRUE(t.must_relist());
  const tally after{1, 1, zklock::watch_predecessor::window(1, 1, true), 0};
  EXPECT_EQ(after.watched, 1u);
  EXPECT_FALSE(after.proves_held());
  EXPECT_TRUE((tally{1, 1, 1, 1}.proves_held()));
}

TEST(Tally, WatchStrategiesChooseTheirWindow) {
  // Dear round trips: look one handoff ahead.
  static_assert(zklock::watch_predecessor::window(10, 1, true) == 2);
  static_assert(zklock::watch_predecessor::window(10, 4, true) == 8);   // semaphore of 4 leases
  static_assert(zklock::watch_predecessor::window(3, 4, true) == 3);    // all of them
  static_assert(zklock::watch_predecessor::window(100, 16, true) == 32);
  static_assert(zklock::watch_predecessor::window(100, 17, true) == 0);  // too many leases: children
  // Cheap round trips: only those that may remain (the predecessor, for a mutex).
  static_assert(zklock::watch_predecessor::window(10, 1, false) == 2);  // a mutex looks ahead anyway
  static_assert(zklock::watch_predecessor::window(10, 4, false) == 4);  // a semaphore: the L nearest
  static_assert(zklock::watch_predecessor::window(3, 4, false) == 3);
  static_assert(zklock::watch_predecessor::window(100, 17, false) == 0);
  static_assert(zklock::watch_children::window(10, 1, true) == 0);
  static_assert(zklock::watch_children::window(10, 1, false) == 0);
  SUCCEED();
}

TEST(Tally, ASemaphoreWaiterWatchingTheLNearestListsAtTheFirstDeletionWhenMoreWereAhead) {
  // 2 leases, 5 ahead, round trips cheap: it watches the 2 nearest. The first of them to go proves
  // too little (3 beyond may stand), so it lists; with 2 ahead, both deletions prove it held.
  constexpr std::size_t w = zklock::watch_predecessor::window(5, 2, false);
  static_assert(w == 2);
  EXPECT_TRUE((tally{5, 2, w, 1}.must_relist()));
  EXPECT_FALSE((tally{5, 2, w, 1}.proves_held()));
  EXPECT_FALSE((tally{2, 2, w, 0}.proves_held()));
  EXPECT_TRUE((tally{2, 2, w, 1}.proves_held()));
}

TEST(RoundTripMeter, TheRecentMinimumOfTwoRunsOfSixteen) {
  using std::chrono::microseconds;
  zklock::detail::round_trip_meter m;
  EXPECT_FALSE(m.estimate().has_value());
  m.note(microseconds{900});
  EXPECT_EQ(m.estimate(), microseconds{900});
  m.note(microseconds{200});  // a quick read lowers it at once
  for (int i = 0; i < 14; ++i) m.note(microseconds{5000});  // a busy server's slow ones do not
  EXPECT_EQ(m.estimate(), microseconds{200});
  for (int i = 0; i < 15; ++i) m.note(microseconds{3000});  // within the next run: remembered
  EXPECT_EQ(m.estimate(), microseconds{200});
  m.note(microseconds{3000});  // a whole run slower: the network got slower
  EXPECT_EQ(m.estimate(), microseconds{3000});
  for (int i = 0; i < 16; ++i) m.note(microseconds{150});
  EXPECT_EQ(m.estimate(), microseconds{150});
}

TEST(SettleBeforeRequeue, OnlyALongContendedHoldWithAFarRoundTripWaitsForItsRelease) {
  using std::chrono::microseconds;
  using zklock::detail::settle_before_requeue;
  constexpr microseconds far{1000};
  constexpr microseconds rtt{2700};
  EXPECT_TRUE(settle_before_requeue(true, microseconds{5000}, rtt, far));
  EXPECT_TRUE(settle_before_requeue(true, rtt, rtt, far));  // a hold of exactly one round trip
  EXPECT_FALSE(settle_before_requeue(false, microseconds{5000}, rtt, far));  // nobody was ahead of it
  EXPECT_FALSE(settle_before_requeue(true, microseconds{2699}, rtt, far));   // shorter than a round trip
  EXPECT_FALSE(settle_before_requeue(true, microseconds{5000}, microseconds{1000}, far));  // not beyond `far`
  EXPECT_FALSE(settle_before_requeue(true, microseconds{5000}, std::nullopt, far));       // nothing measured
  EXPECT_TRUE(settle_before_requeue(true, microseconds{5000}, microseconds{200}, microseconds::zero()));
  EXPECT_FALSE(settle_before_requeue(true, microseconds{5000}, rtt, microseconds::max()));  // never
}
