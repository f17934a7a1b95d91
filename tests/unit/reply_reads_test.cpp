// SPDX-License-Identifier: Apache-2.0
// The C client's recv(2), as zklock routes it (modules/session/handle.cpp, zklock_zk_sys_recv): one
// system call takes what the socket holds, and the client's reads of each reply's length and body
// are served from it, in order, without loss; a socket closed, or a new one on the same descriptor,
// starts with nothing read ahead; another socket's reads pass through. On a connected Unix socket
// pair, which hands over what is written as TCP's loopback does.
#include <cerrno>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

extern "C" ssize_t zklock_zk_sys_recv(int fd, void* buf, std::size_t len, int flags);
extern "C" int zklock_zk_sys_close(int fd);
extern "C" int zklock_zk_sys_socket(int domain, int type, int protocol);
extern "C" bool zklock_zk_read_ahead(int fd) noexcept;

namespace {

/// A connected, non-blocking stream pair: `client` (read through zklock's recv), `server`.
struct stream_pair {
  int client = -1, server = -1;
  stream_pair() {
    int fds[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fds) != 0) throw std::runtime_error("socketpair");
    client = fds[0];
    server = fds[1];
  }
  ~stream_pair() {
    if (client >= 0) zklock_zk_sys_close(client);
    if (server >= 0) ::close(server);
  }
  void write(const std::string& bytes) const {
    if (::send(server, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size()))
      throw std::runtime_error("send");
  }
  /// Returns: what one read of at most `n` bytes gave (empty if none).
  std::string read(std::size_t n) const {
    std::string got(n, '\0');
    const ssize_t r = zklock_zk_sys_recv(client, got.data(), n, 0);
    got.resize(r > 0 ? static_cast<std::size_t>(r) : 0);
    return got;
  }
};

}  // namespace

TEST(ReplyReads, RepliesReadAheadComeInOrderWithoutAnotherSystemCall) {
  stream_pair p;
  p.write("aaaaBODY-ONEbbbbBODY-TWO");  // two "replies", each a 4-byte length and a body
  EXPECT_EQ(p.read(4), "aaaa");
  EXPECT_TRUE(zklock_zk_read_ahead(p.client));  // the rest came with it
  // Nothing more is in the socket: what follows can only come from what was read ahead.
  char probe;
  EXPECT_EQ(::recv(p.client, &probe, 1, MSG_PEEK), -1);
  EXPECT_EQ(errno, EAGAIN);
  EXPECT_EQ(p.read(8), "BODY-ONE");
  EXPECT_EQ(p.read(4), "bbbb");
  EXPECT_EQ(p.read(100), "BODY-TWO");  // a read is never given more than was read ahead
  EXPECT_FALSE(zklock_zk_read_ahead(p.client));
  // then from the socket again, and its "would block" as recv(2) says it
  EXPECT_EQ(zklock_zk_sys_recv(p.client, &probe, 1, 0), -1);
  EXPECT_EQ(errno, EAGAIN);
  p.write("cccc");
  EXPECT_EQ(p.read(4), "cccc");
}

TEST(ReplyReads, TheEndOfTheStreamComesAfterWhatWasReadAhead) {
  stream_pair p;
  p.write("last");
  ::close(p.server);
  p.server = -1;
  EXPECT_EQ(p.read(2), "la");
  EXPECT_EQ(p.read(2), "st");
  char c;
  EXPECT_EQ(zklock_zk_sys_recv(p.client, &c, 1, 0), 0);
}

TEST(ReplyReads, ALongReplyIsReadStraightIntoTheClientsBuffer) {
  stream_pair p;
  const std::string big(20 * 1024, 'x');  // more than is read ahead at once
  p.write(big + "tail");
  const std::string got = p.read(big.size());
  EXPECT_EQ(got, big);
  EXPECT_FALSE(zklock_zk_read_ahead(p.client));  // read into the caller's buffer: nothing kept back
  EXPECT_EQ(p.read(4), "tail");
}

TEST(ReplyReads, AClosedSocketsBytesAreForgotten) {
  stream_pair p;
  p.write("1234rest-of-the-old-connection");
  EXPECT_EQ(p.read(4), "1234");
  ASSERT_TRUE(zklock_zk_read_ahead(p.client));
  const int old_fd = p.client;
  ASSERT_EQ(zklock_zk_sys_close(p.client), 0);
  p.client = -1;
  EXPECT_FALSE(zklock_zk_read_ahead(old_fd));
  // a new connection on the same descriptor reads its own bytes only
  stream_pair q;  // most often on old_fd itself, the lowest free descriptor
  if (q.client != old_fd) {
    ASSERT_EQ(::dup2(q.client, old_fd), old_fd);
    ::close(q.client);
    q.client = old_fd;
  }
  q.write("new!");
  EXPECT_EQ(q.read(100), "new!");
}

TEST(ReplyReads, ANewSocketOnADescriptorStillReadAheadStartsEmpty) {
  // A descriptor closed without zklock's close (so its bytes were not forgotten) and then taken by
  // a socket the client makes: the bytes read ahead from the old one are not the new one's.
  stream_pair p;
  p.write("1234stale");
  EXPECT_EQ(p.read(4), "1234");
  const int fd = p.client;
  ::close(fd);
  p.client = -1;
  std::vector<int> extra;  // sockets on lower free descriptors, until one is made on fd
  int made = zklock_zk_sys_socket(AF_UNIX, SOCK_STREAM, 0);
  while (made >= 0 && made < fd && extra.size() < 64) {
    extra.push_back(made);
    made = zklock_zk_sys_socket(AF_UNIX, SOCK_STREAM, 0);
  }
  for (const int e : extra) ::close(e);
  ASSERT_EQ(made, fd);
  EXPECT_FALSE(zklock_zk_read_ahead(fd));
  ::close(made);
}

TEST(ReplyReads, AnotherSocketsReadsPassThrough) {
  stream_pair p, other;
  p.write("aaaapending");
  EXPECT_EQ(p.read(4), "aaaa");
  other.write("isro-answer");  // the client's read-only probe, on a socket of its own
  EXPECT_EQ(other.read(2), "is");
  EXPECT_EQ(p.read(7), "pending");  // the first socket's bytes are still there, whole
  EXPECT_EQ(other.read(100), "ro-answer");
}
