// SPDX-License-Identifier: Apache-2.0
// The C client zklock runs on reads a getChildren reply's names (tools/zookeeper-client/
// listing_names.c in zklock's build of it): every name as sent, and, in zklock's build, all in one
// allocation (the array of pointers, then the names) and none at all from a reply too short for
// what it announces. Replies built here byte by byte, read by the client's own deserializer.
#include <arpa/inet.h>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>
#include <gtest/gtest.h>
#include <zookeeper/recordio.h>
#include <zookeeper/zookeeper.jute.h>

// zklock's copy of the C client has every global symbol renamed (cmake/zklockPrivateClient.cmake)
extern "C" struct iarchive* zklock_zk_create_buffer_iarchive(char* buffer, int len);
extern "C" void zklock_zk_close_buffer_iarchive(struct iarchive** ia);
extern "C" int zklock_zk_deserialize_GetChildrenResponse(struct iarchive* in, const char* tag,
                                                         struct GetChildrenResponse* v);
extern "C" void zklock_zk_deallocate_GetChildrenResponse(struct GetChildrenResponse* v);

namespace {

/// A reply's bytes: a big-endian int32 count, then each name as a big-endian int32 length and its bytes.
struct reply_bytes {
  std::vector<char> bytes;
  void put_int(std::int32_t v) {
    const std::uint32_t net = htonl(static_cast<std::uint32_t>(v));
    const auto* p = reinterpret_cast<const char*>(&net);
    bytes.insert(bytes.end(), p, p + sizeof net);
  }
  void put_name(std::string_view n) {
    put_int(static_cast<std::int32_t>(n.size()));
    bytes.insert(bytes.end(), n.begin(), n.end());
  }
};

/// What the client's deserializer made of `r`: its return code and the names it gave.
struct read_back {
  int rc = 0;
  std::int32_t count = -2;
  std::vector<std::string> names;
  bool one_block = true;  // every name inside the allocation the pointers start, right after them, in order
};

read_back read(reply_bytes r) {
  read_back out;
  struct iarchive* ia = zklock_zk_create_buffer_iarchive(r.bytes.data(), static_cast<int>(r.bytes.size()));
  GetChildrenResponse res{};
  out.rc = zklock_zk_deserialize_GetChildrenResponse(ia, "reply", &res);
  out.count = res.children.count;
  const char* expected = res.children.data ? reinterpret_cast<const char*>(res.children.data + res.children.count)
                                           : nullptr;
  for (std::int32_t i = 0; i < res.children.count && res.children.data; ++i) {
    const char* n = res.children.data[i];
    if (!n) {
      out.names.emplace_back("<null>");
      out.one_block = false;
      continue;
    }
    out.names.emplace_back(n);
    out.one_block = out.one_block && n == expected;
    expected = n + std::strlen(n) + 1;
  }
  zklock_zk_deallocate_GetChildrenResponse(&res);  // under ASan: frees what it allocated, and only that
  zklock_zk_close_buffer_iarchive(&ia);
  return out;
}

TEST(ListingNames, EveryNameAsSentInQueueOrderOfTheReply) {
  reply_bytes r;
  const std::vector<std::string> sent{"_c_1b4e28ba-2fa1-41d2-883f-0016d3cca427-lock-0000000003", "", "x",
                                      std::string(300, 'n')};
  r.put_int(static_cast<std::int32_t>(sent.size()));
  for (const auto& n : sent) r.put_name(n);
  const auto got = read(r);
  EXPECT_EQ(got.rc, 0);
  EXPECT_EQ(got.count, static_cast<std::int32_t>(sent.size()));
  EXPECT_EQ(got.names, sent);
#if ZKLOCK_TEST_LISTING_IN_ONE
  EXPECT_TRUE(got.one_block) << "each name should follow the last, right after the array of pointers";
#endif
}

TEST(ListingNames, AThousandNames) {
  reply_bytes r;
  std::vector<std::string> sent;
  for (int i = 0; i < 1000; ++i) sent.push_back("lock-" + std::to_string(1'000'000'000 + i));
  r.put_int(1000);
  for (const auto& n : sent) r.put_name(n);
  const auto got = read(r);
  EXPECT_EQ(got.rc, 0);
  EXPECT_EQ(got.names, sent);
#if ZKLOCK_TEST_LISTING_IN_ONE
  EXPECT_TRUE(got.one_block);
#endif
}

TEST(ListingNames, NoneListed) {
  reply_bytes r;
  r.put_int(0);
  const auto got = read(r);
  EXPECT_EQ(got.rc, 0);
  EXPECT_EQ(got.count, 0);
  EXPECT_TRUE(got.names.empty());
}

#if ZKLOCK_TEST_LISTING_IN_ONE
// (The C client's own deserializer leaves a name it could not read null, and the count as announced.)
TEST(ListingNames, AReplyShorterThanItsCountGivesNoNames) {
  reply_bytes r;
  r.put_int(3);
  r.put_name("lock-0000000001");
  r.put_name("lock-0000000002");  // and no third
  const auto got = read(r);
  EXPECT_NE(got.rc, 0);
  EXPECT_EQ(got.count, 0);
  EXPECT_TRUE(got.names.empty());
}

TEST(ListingNames, ANameLongerThanTheReplyGivesNoNames) {
  reply_bytes r;
  r.put_int(2);
  r.put_name("lock-0000000001");
  r.put_int(1 << 20);  // a length past the reply's end
  r.bytes.insert(r.bytes.end(), {'l', 'o'});
  const auto got = read(r);
  EXPECT_NE(got.rc, 0);
  EXPECT_EQ(got.count, 0);
}

TEST(ListingNames, ANegativeLengthGivesNoNames) {
  reply_bytes r;
  r.put_int(1);
  r.put_int(-5);
  const auto got = read(r);
  EXPECT_NE(got.rc, 0);
  EXPECT_EQ(got.count, 0);
}
#endif

}  // namespace
