// SPDX-License-Identifier: Apache-2.0
// The servers of a connect string, as zklock looks at them itself: which one a session reached
// (named as the connect string names it, for --verbose), and why no session could be had: a host
// that does not resolve, or per address a refused TCP connection, no answer to the connection at
// all, or a connection accepted and then asked ZooKeeper's four-letter word "srvr": any answer
// (even a refusal of the word) shows a server that is up, one that does not serve requests says so,
// and silence shows a server that never answers.
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>
#include "cli.hpp"

namespace zkcli {
namespace {

/// One server of a connect string, as it spells it.
struct server {
  std::string host;
  std::string port;
  std::string given() const { return (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + port; }
};

/// Returns: the servers of `connect` ("host:port[,host:port...][/chroot]"), in its order.
std::vector<server> servers_of(std::string_view connect) {
  connect = connect.substr(0, connect.find('/'));
  std::vector<server> out;
  while (!connect.empty()) {
    const auto comma = connect.find(',');
    std::string_view item = connect.substr(0, comma);
    connect = comma == std::string_view::npos ? std::string_view{} : connect.substr(comma + 1);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.remove_prefix(1);
    const auto colon = item.rfind(':');
    if (colon == std::string_view::npos) continue;
    std::string_view host = item.substr(0, colon);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
    out.push_back({std::string{host}, std::string{item.substr(colon + 1)}});
  }
  return out;
}

/// The addresses of one server, looked up as the ZooKeeper C client looks them up; freed with it.
struct addresses {
  addrinfo* list = nullptr;
  int rc = 0;  // getaddrinfo's: 0 or an EAI_ code
  explicit addresses(const server& s) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    hints.ai_flags = AI_ADDRCONFIG;
    rc = ::getaddrinfo(s.host.c_str(), s.port.c_str(), &hints, &list);
    if (rc == EAI_BADFLAGS || rc == EAI_ADDRFAMILY) {  // (the client asks again without the flag)
      hints.ai_flags = 0;
      rc = ::getaddrinfo(s.host.c_str(), s.port.c_str(), &hints, &list);
    }
  }
  ~addresses() {
    if (list) ::freeaddrinfo(list);
  }
  addresses(const addresses&) = delete;
  addresses& operator=(const addresses&) = delete;
};

/// Returns: `a` as "ip:port" or "[ip]:port" (as session::server_address() writes it), "" for
/// another address family.
std::string address_text(const sockaddr* a) {
  char ip[INET6_ADDRSTRLEN] = {};
  if (a->sa_family == AF_INET) {
    const auto* in = reinterpret_cast<const sockaddr_in*>(a);
    if (!::inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip)) return {};
    return std::string{ip} + ":" + std::to_string(ntohs(in->sin_port));
  }
  if (a->sa_family == AF_INET6) {
    const auto* in = reinterpret_cast<const sockaddr_in6*>(a);
    if (!::inet_ntop(AF_INET6, &in->sin6_addr, ip, sizeof ip)) return {};
    return "[" + std::string{ip} + "]:" + std::to_string(ntohs(in->sin6_port));
  }
  return {};
}

/// Returns: how to name the address `addr` of server `s`: "zk2:2181 at 10.0.0.2:2181", or the
/// address alone when the connect string gives it so.
std::string name_of(const server& s, const std::string& addr) {
  return s.given() == addr ? addr : s.given() + " at " + addr;
}

/// A look at one address: a TCP connection, then "srvr" and its answer.
struct probe {
  enum class stage { connecting, asking, done };
  std::string name;
  fd_t fd;
  stage at = stage::connecting;
  int error = 0;           // errno of a failed connection
  bool connected = false;  // the connection was accepted
  std::string answer;      // the first bytes of the answer to "srvr"

  /// Effects: the connection is made (or failed, `e`): asks "srvr" on it.
  void on_connected(int e) {
    error = e;
    at = stage::done;
    if (e != 0) return;
    connected = true;
    if (::send(fd.get(), "srvr", 4, MSG_NOSIGNAL) == 4) at = stage::asking;
  }
  /// Effects: reads the answer (done at its first bytes, or when the server closes the connection).
  void on_readable() {
    char buf[256];
    const ssize_t n = ::recv(fd.get(), buf, sizeof buf, 0);
    if (n > 0) answer.assign(buf, static_cast<std::size_t>(n));
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) at = stage::done;
  }
};

/// Returns: what `p` met, in words, as the end of a sentence that starts with its name.
std::string outcome(const probe& p, ms limit) {
  if (p.at == probe::stage::connecting)
    return "did not answer a TCP connection within " + std::to_string(limit.count()) +
           " ms (the host is down, or a firewall drops the connection)";
  if (!p.connected && p.error == ECONNREFUSED) return "refused the connection (no server listens there)";
  if (!p.connected) return "cannot be reached (" + std::string{std::strerror(p.error)} + ")";
  if (p.at == probe::stage::asking)
    return "accepts TCP connections but never answered (not a ZooKeeper server, or one that is stuck)";
  if (p.answer.find("not currently serving") != std::string::npos)
    return "is up but not serving requests (a member without a quorum?)";
  if (!p.answer.empty()) return "answers (the server is up, but gave no session in time)";
  return "accepted a TCP connection, then closed it without a word";
}

}  // namespace

std::string reached_server(const zklock::session& s, std::string_view connect) {
  const std::string addr = s.server_address();
  if (addr.empty()) return {};
  for (const auto& srv : servers_of(connect)) {
    const addresses a{srv};
    if (a.rc != 0) continue;
    for (const addrinfo* ai = a.list; ai; ai = ai->ai_next)
      if (address_text(ai->ai_addr) == addr) return name_of(srv, addr);
  }
  return addr;
}

std::string why_unreachable(std::string_view connect, ms limit) {
  std::vector<probe> probes;
  for (const auto& srv : servers_of(connect)) {
    const addresses a{srv};
    if (a.rc != 0) return "host \"" + srv.host + "\" does not resolve (" + ::gai_strerror(a.rc) + ")";
    if (limit == ms::zero()) continue;
    for (const addrinfo* ai = a.list; ai; ai = ai->ai_next) {
      const std::string addr = address_text(ai->ai_addr);
      if (addr.empty()) continue;
      probe p;
      p.name = name_of(srv, addr);
      p.fd = fd_t{::socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)};
      if (p.fd.get() < 0) p.on_connected(errno);
      else if (::connect(p.fd.get(), ai->ai_addr, ai->ai_addrlen) == 0) p.on_connected(0);
      else if (errno != EINPROGRESS) p.on_connected(errno);
      probes.push_back(std::move(p));
    }
  }
  // The looks still in progress, together, until they end or `limit` passes.
  const auto deadline = steady::now() + limit;
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<probe*> of;
    for (auto& p : probes)
      if (p.at != probe::stage::done) {
        fds.push_back({p.fd.get(), static_cast<short>(p.at == probe::stage::connecting ? POLLOUT : POLLIN), 0});
        of.push_back(&p);
      }
    const auto left = std::chrono::ceil<ms>(deadline - steady::now()).count();
    if (fds.empty() || left <= 0) break;
    const int r = ::poll(fds.data(), fds.size(), static_cast<int>(left));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (!fds[i].revents) continue;
      if (of[i]->at == probe::stage::asking) {
        of[i]->on_readable();
        continue;
      }
      int error = 0;
      socklen_t len = sizeof error;
      if (::getsockopt(fds[i].fd, SOL_SOCKET, SO_ERROR, &error, &len) != 0) error = errno;
      of[i]->on_connected(error);
    }
  }
  std::string out;
  for (const auto& p : probes) out += (out.empty() ? "" : "; ") + p.name + " " + outcome(p, limit);
  return out;
}

}  // namespace zkcli
