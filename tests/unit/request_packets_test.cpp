// SPDX-License-Identifier: Apache-2.0
// The C client's send(2), as zklock routes it (modules/session/handle.cpp, zklock_zk_sys_send): a
// request's 4-byte length prefix leaves in one packet with the request, and the requests that a
// batch of the I/O loop's completions sends leave together when the batch ends. Counted by the
// kernel (TCP_INFO's data segments) on a loopback connection with Nagle's algorithm off, as the
// client's.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <linux/tcp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

extern "C" ssize_t zklock_zk_sys_send(int fd, const void* buf, std::size_t len, int flags);
extern "C" int zklock_zk_sys_close(int fd);
extern "C" void zklock_zk_send_batch_begin() noexcept;
extern "C" void zklock_zk_send_batch_end() noexcept;

namespace {

/// A connected loopback TCP pair: `client` with TCP_NODELAY (as the C client sets it), `server`.
struct tcp_pair {
  int client = -1, server = -1;
  tcp_pair() {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t n = sizeof a;
    if (listener < 0 || ::bind(listener, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&a), &n) != 0)
      throw std::runtime_error("loopback listener");
    client = ::socket(AF_INET, SOCK_STREAM, 0);
    const int one = 1;
    if (client < 0 || ::setsockopt(client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one) != 0 ||
        ::connect(client, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      throw std::runtime_error("loopback connect");
    server = ::accept(listener, nullptr, nullptr);
    ::close(listener);
    if (server < 0) throw std::runtime_error("loopback accept");
  }
  ~tcp_pair() {
    ::close(client);
    ::close(server);
  }
  /// Returns: the data segments the client has sent so far.
  std::uint32_t segments() const {
    tcp_info info{};
    socklen_t n = sizeof info;
    if (::getsockopt(client, IPPROTO_TCP, TCP_INFO, &info, &n) != 0) throw std::runtime_error("TCP_INFO");
    return info.tcpi_data_segs_out;
  }
  /// Returns: `n` bytes read by the server (blocking).
  std::string read(std::size_t n) const {
    std::string got(n, '\0');
    for (std::size_t off = 0; off < n;) {
      const auto r = ::recv(server, got.data() + off, n - off, 0);
      if (r <= 0) throw std::runtime_error("recv");
      off += static_cast<std::size_t>(r);
    }
    return got;
  }
};

/// Returns: `request`'s length, as the client writes it before the request (big-endian).
std::array<char, 4> prefix_of(const std::string& request) {
  const std::uint32_t be = htonl(static_cast<std::uint32_t>(request.size()));
  std::array<char, 4> p;
  std::memcpy(p.data(), &be, sizeof be);
  return p;
}

}  // namespace

TEST(RequestPackets, TwoPlainWritesAreTwoPackets) {  // what the client did before: the baseline
  tcp_pair c;
  const std::string request(60, 'r');
  const auto prefix = prefix_of(request);
  const auto before = c.segments();
  ASSERT_EQ(::send(c.client, prefix.data(), prefix.size(), MSG_NOSIGNAL), 4);
  ASSERT_EQ(::send(c.client, request.data(), request.size(), MSG_NOSIGNAL), 60);
  EXPECT_EQ(c.segments() - before, 2u);
  EXPECT_EQ(c.read(64), std::string(prefix.data(), 4) + request);
}

TEST(RequestPackets, ALengthPrefixLeavesWithItsRequest) {
  tcp_pair c;
  const std::string request(60, 'r');
  const auto prefix = prefix_of(request);
  const auto before = c.segments();
  ASSERT_EQ(zklock_zk_sys_send(c.client, prefix.data(), prefix.size(), MSG_NOSIGNAL), 4);
  EXPECT_EQ(c.segments() - before, 0u);  // held for the request
  ASSERT_EQ(zklock_zk_sys_send(c.client, request.data(), request.size(), MSG_NOSIGNAL), 60);
  EXPECT_EQ(c.segments() - before, 1u);
  EXPECT_EQ(c.read(64), std::string(prefix.data(), 4) + request);
}

TEST(RequestPackets, OtherFourByteWritesGoAtOnce) {
  tcp_pair c;
  const auto before = c.segments();
  // The client's read-only probe: "isro", which read as a length would be far beyond any request.
  ASSERT_EQ(zklock_zk_sys_send(c.client, "isro", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(c.segments() - before, 1u);
  EXPECT_EQ(c.read(4), "isro");
}

TEST(RequestPackets, ABatchsRequestsLeaveTogetherWhenItEnds) {
  tcp_pair c;
  const std::string request(60, 'r');
  const auto prefix = prefix_of(request);
  const auto before = c.segments();
  zklock_zk_send_batch_begin();
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(zklock_zk_sys_send(c.client, prefix.data(), prefix.size(), MSG_NOSIGNAL), 4);
    ASSERT_EQ(zklock_zk_sys_send(c.client, request.data(), request.size(), MSG_NOSIGNAL), 60);
  }
  EXPECT_EQ(c.segments() - before, 0u);  // all held until the batch ends
  zklock_zk_send_batch_end();
  EXPECT_EQ(c.segments() - before, 1u);
  const std::string one = std::string(prefix.data(), 4) + request;
  EXPECT_EQ(c.read(3 * 64), one + one + one);
  // after the batch, writes go at once again (a 4-byte write that is no length prefix)
  ASSERT_EQ(zklock_zk_sys_send(c.client, "isro", 4, MSG_NOSIGNAL), 4);
  EXPECT_EQ(c.segments() - before, 2u);
  EXPECT_EQ(c.read(4), "isro");
}

TEST(RequestPackets, ASocketClosedInABatchIsLeftAlone) {
  tcp_pair c;
  const std::string request(60, 'r');
  zklock_zk_send_batch_begin();
  ASSERT_EQ(zklock_zk_sys_send(c.client, request.data(), request.size(), MSG_NOSIGNAL), 60);
  const int closed = c.client;
  ASSERT_EQ(zklock_zk_sys_close(closed), 0);
  const int fresh = ::socket(AF_INET, SOCK_STREAM, 0);  // another socket, under the number just closed
  ASSERT_GE(fresh, 0);
  ASSERT_EQ(::dup2(fresh, closed), closed);
  ::close(fresh);
  c.client = closed;
  zklock_zk_send_batch_end();  // must not touch the new socket: Nagle's algorithm stays on there
  int nodelay = -1;
  socklen_t n = sizeof nodelay;
  ASSERT_EQ(::getsockopt(c.client, IPPROTO_TCP, TCP_NODELAY, &nodelay, &n), 0);
  EXPECT_EQ(nodelay, 0);
}
