// SPDX-License-Identifier: Apache-2.0
// Contender names (Curator's spellings), and queue order by sequence number across the 32-bit wrap;
// the waiters of contenders, woken once (waiter_list); a watched node's path, shared (shared_path).
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>
#include <gtest/gtest.h>
import zklock.detail;

using namespace zklock::detail;

TEST(ContenderOrder, ParsesCuratorNames) {
  auto c = parse_contender("_c_0f8e7b9a-1111-4222-8333-444455556666-lock-0000000042");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->seq, 42);
  EXPECT_EQ(c->kind, contender_kind::lock);
  EXPECT_EQ(parse_contender("_c_x-__READ__0000000007")->kind, contender_kind::read);
  EXPECT_EQ(parse_contender("__WRIT__0000000008")->kind, contender_kind::write);
  EXPECT_EQ(parse_contender("lease-0000000001")->kind, contender_kind::lease);
  EXPECT_EQ(parse_contender("lock--000000001")->seq, -1);
}

TEST(ContenderOrder, IgnoresNonContenders) {
  for (const char* n : {"leases", "lock-", "lock-12", "lock-00000000x1", "config", "lock-+000000001", "x-0000000001"})
    EXPECT_FALSE(parse_contender(n)) << n;
}

TEST(ContenderOrder, SerialArithmeticAcrossTheWrap) {
  constexpr auto max = std::numeric_limits<std::int32_t>::max();
  constexpr auto min = std::numeric_limits<std::int32_t>::min();
  static_assert(seq_before(1, 2) && !seq_before(2, 1) && !seq_before(5, 5));
  static_assert(seq_before(max, min));          // 2147483647 then -2147483648
  static_assert(seq_before(max - 3, min + 3));
  static_assert(!seq_before(min, max));
  EXPECT_TRUE(seq_before(-1, 0));
}

TEST(ContenderOrder, SortsByQueueOrderAndFiltersKinds) {
  const name_list kids{"_c_b-lock--2147483647", "other", "_c_a-lock-2147483646",
                                      "_c_c-lock--2147483648", "_c_d-lock-2147483647",
                                      "_c_e-__READ__2147483645", "leases"};
  const auto q = sorted_contenders(kids, 1u << static_cast<unsigned>(contender_kind::lock));
  std::vector<std::string> names;
  for (auto& c : q) names.emplace_back(c.name.substr(0, 4));
  EXPECT_EQ(names, (std::vector<std::string>{"_c_a", "_c_d", "_c_c", "_c_b"}));
  const auto rw = sorted_contenders(kids, (1u << 1) | (1u << 2));
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].kind, contender_kind::read);
}

TEST(ContenderOrder, ANameListKeepsItsNamesInOrderAndItsViewsThroughAMove) {
  name_list none;
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(none.begin(), none.end());
  name_list l;
  l.reserve(3, 12);
  for (const std::string_view n : {"_c_a-lock-0000000002", "", "x"}) l.push_back(n);
  ASSERT_EQ(l.size(), 3u);
  EXPECT_EQ(l[0], "_c_a-lock-0000000002");
  EXPECT_EQ(l[1], "");
  EXPECT_EQ(l[2], "x");
  EXPECT_EQ(l.strings(), (std::vector<std::string>{"_c_a-lock-0000000002", "", "x"}));
  const auto q = sorted_contenders(l, 1u << static_cast<unsigned>(contender_kind::lock));
  ASSERT_EQ(q.size(), 1u);
  const name_list moved = std::move(l);  // the contenders view the names' buffer, which stays put
  EXPECT_EQ(q[0].name, "_c_a-lock-0000000002");
  EXPECT_EQ(q[0].name.data(), moved[0].data());
  std::vector<std::string_view> seen(moved.begin(), moved.end());
  EXPECT_EQ(seen, (std::vector<std::string_view>{"_c_a-lock-0000000002", "", "x"}));
}

TEST(SharedPath, CopiesShareOneTextThatOutlivesTheFirstHolder) {
  const std::string text = "/locks/a/_c_0f8e7b9a-1111-4222-8333-444455556666-lock-0000000042";
  std::optional<shared_path> first{std::in_place, text};
  shared_path copy = *first;
  EXPECT_TRUE(copy.shares(*first));
  EXPECT_EQ(copy, std::string_view{text});
  EXPECT_EQ(std::string_view{copy.c_str()}, text);  // NUL-terminated, for the C client
  const shared_path other{text};
  EXPECT_EQ(other, copy);  // the same text...
  EXPECT_FALSE(other.shares(copy));  // ...in another allocation
  first.reset();  // the first holder goes: the copy keeps the text
  EXPECT_EQ(copy.view(), text);
  shared_path moved = std::move(copy);
  EXPECT_EQ(moved.view(), text);
  EXPECT_TRUE(copy.view().empty());  // (moved from: empty, as a moved-from std::string may be)
  EXPECT_TRUE(shared_path{}.view().empty());
  EXPECT_STREQ(shared_path{}.c_str(), "");
  EXPECT_NE(shared_path{"/a"}, shared_path{"/b"});
}

TEST(SharedPath, CopiesMadeAndDroppedOnManyThreadsFreeItOnce) {
  // (ASan reports a double free or a leak if the count goes wrong)
  const shared_path p{"/locks/b/_c_x-lock-0000000001"};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&p] {
      for (int i = 0; i < 10000; ++i) {
        shared_path c = p;
        shared_path d = c;
        ASSERT_EQ(d, p);
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(p.view(), "/locks/b/_c_x-lock-0000000001");
}

TEST(ContenderOrder, PrefixesAreUniquePerAttempt) {
  std::set<std::string> seen;
  for (int i = 0; i < 1000; ++i) {
    const auto p = contender_prefix(contender_kind::lock);
    EXPECT_TRUE(p.starts_with("_c_")) << p;
    EXPECT_TRUE(p.ends_with("-lock-")) << p;
    EXPECT_EQ(p.size(), 3u + 36u + 1u + 5u) << p;
    seen.insert(p);
  }
  EXPECT_EQ(seen.size(), 1000u);
  EXPECT_TRUE(contender_prefix(contender_kind::read).ends_with("-__READ__"));
  EXPECT_TRUE(contender_prefix(contender_kind::write).ends_with("-__WRIT__"));
}

// The waiters of a contender (of a watch, a settling release, the next session) are woken once and
// forgotten (zklock.detail's waiter_list); a waiter that gave up is not kept alive, nor woken.
namespace {
struct counted_waiter {
  int woken = 0;
  void wake() noexcept { ++woken; }
};
}  // namespace

TEST(WaiterList, WakesTheLiveOnesOnceAndForgetsAll) {
  waiter_list<counted_waiter> list;
  auto a = std::make_shared<counted_waiter>();
  auto b = std::make_shared<counted_waiter>();
  auto gone = std::make_shared<counted_waiter>();
  list.add(a);
  list.add(gone);
  list.add(b);
  std::weak_ptr<counted_waiter> watch_gone = gone;
  gone.reset();
  EXPECT_TRUE(watch_gone.expired()) << "the list keeps no waiter alive";
  list.wake_all();
  EXPECT_EQ(a->woken, 1);
  EXPECT_EQ(b->woken, 1);
  EXPECT_TRUE(list.empty());
  list.wake_all();
  EXPECT_EQ(a->woken, 1) << "woken once: the list forgot it";
}

TEST(WaiterList, RemoveDropsOneAndTheGoneTakeEmptiesTheList) {
  waiter_list<counted_waiter> list;
  auto a = std::make_shared<counted_waiter>();
  auto b = std::make_shared<counted_waiter>();
  list.add(a);
  list.add(b);
  list.add(std::make_shared<counted_waiter>());  // gone at once
  EXPECT_FALSE(list.remove(a.get())) << "b is left";
  auto taken = list.take();
  EXPECT_TRUE(list.empty());
  std::vector<counted_waiter*> order;
  taken.wake_all([&](counted_waiter& w) noexcept { order.push_back(&w); });
  EXPECT_EQ(order, std::vector<counted_waiter*>{b.get()}) << "a removed, the gone one skipped";
  EXPECT_EQ(b->woken, 0) << "a custom wake replaces wake()";
  list.add(b);
  EXPECT_TRUE(list.remove(b.get()));
}

TEST(ContenderNames, ALeaseOfManyPermitsCarriesItsWeightInItsName) {
  const auto p3 = contender_prefix(contender_kind::lease, 3);
  EXPECT_TRUE(p3.ends_with("-p3-lease-")) << p3;
  const auto c = parse_contender(p3 + "0000000042");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->kind, contender_kind::lease);
  EXPECT_EQ(c->seq, 42);
  EXPECT_EQ(c->weight, 3u);
  EXPECT_EQ(weight_of("/jobs/pool/" + p3 + "0000000042"), 3u);
  // One permit keeps the plain name (what every earlier zklock wrote).
  EXPECT_EQ(contender_prefix(contender_kind::lease, 1).find("-p1-"), std::string::npos);
  EXPECT_EQ(parse_contender(contender_prefix(contender_kind::lease, 1) + "0000000001")->weight, 1u);
  EXPECT_EQ(parse_contender(contender_prefix(contender_kind::lease) + "0000000001")->weight, 1u);
  EXPECT_EQ(parse_contender(contender_prefix(contender_kind::lease, 1'000'000) + "0000000001")->weight, 1'000'000u);
  // Only a lease weighs more than 1, and only a well-formed "p<n>" does.
  EXPECT_EQ(contender_prefix(contender_kind::lock, 3).find("-p3-"), std::string::npos);
  for (const char* name : {"_c_x-p3-lock-0000000001", "_c_x-p0-lease-0000000001", "_c_x-p03-lease-0000000001",
                           "_c_x-p1-lease-0000000001", "_c_x-p3x-lease-0000000001", "_c_x-p-lease-0000000001",
                           "_c_x-p1000001-lease-0000000001", "p3-lease-0000000001", "lease-0000000001",
                           "_c_0f8e7b9a-1111-4222-8333-444455556666-lease-0000000001"})
    EXPECT_EQ(parse_contender(name)->weight, 1u) << name;
  EXPECT_EQ(weight_of("/a/b"), 1u);  // not a contender
}
