// SPDX-License-Identifier: Apache-2.0
// Test and bench support: scratch directories, four-letter words and TCP exchanges, JSON pieces.
#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <system_error>

#include "four_letter.hpp"
#include "json.hpp"
#include "json_escape.hpp"
#include "posix_io.hpp"
#include "scratch_dir.hpp"

namespace zkt {

// ---- scratch_dir ------------------------------------------------------------------------------

scratch_dir::scratch_dir(std::string_view stem) {
  std::string t = (std::filesystem::temp_directory_path() / (std::string{stem} + "-XXXXXX")).string();
  if (!::mkdtemp(t.data())) throw_errno("mkdtemp");
  path = t;
}

scratch_dir::~scratch_dir() {
  std::error_code ec;
  if (!keep) std::filesystem::remove_all(path, ec);
}

// ---- four-letter words ------------------------------------------------------------------------

std::vector<std::string> split(std::string_view s, char sep) {
  std::vector<std::string> out;
  std::size_t b = 0;
  for (;;) {
    const auto e = s.find(sep, b);
    if (e != b) out.emplace_back(s.substr(b, e == std::string_view::npos ? std::string_view::npos : e - b));
    if (e == std::string_view::npos) break;
    b = e + 1;
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> flag_pairs(int argc, char** argv) {
  std::vector<std::pair<std::string, std::string>> out;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 >= argc) throw std::invalid_argument(std::string{argv[i]} + ": missing value");
    out.emplace_back(argv[i], argv[i + 1]);
  }
  return out;
}

int dial(const std::string& host, const std::string& port, std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* ai = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &ai) != 0 || !ai) return -1;
  int fd = -1;
  for (addrinfo* p = ai; p && fd < 0; p = p->ai_next) {
    fd = ::socket(p->ai_family, p->ai_socktype | SOCK_CLOEXEC, p->ai_protocol);
    if (fd < 0) continue;
    timeval tv{static_cast<time_t>(timeout.count() / 1000), static_cast<suseconds_t>((timeout.count() % 1000) * 1000)};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    if (::connect(fd, p->ai_addr, p->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(ai);
  return fd;
}

std::string tcp_exchange(const std::string& host, const std::string& port, std::string_view request, bool one_line,
                         std::chrono::milliseconds timeout) {
  const int fd = dial(host, port, timeout);
  if (fd < 0) return {};
  std::string out;
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(request.size())) {
    if (!one_line) ::shutdown(fd, SHUT_WR);
    char buf[8192];
    for (ssize_t r; (r = ::recv(fd, buf, sizeof buf, 0)) > 0;) {
      out.append(buf, static_cast<std::size_t>(r));
      if (one_line && out.find('\n') != std::string::npos) break;
    }
  }
  ::close(fd);
  if (one_line) out = out.substr(0, out.find('\n'));
  return out;
}

std::pair<std::string, std::string> first_server(const std::string& connect) {
  std::string hp = connect.substr(0, connect.find(','));
  hp = hp.substr(0, hp.find('/'));
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return {hp, "2181"};
  return {hp.substr(0, colon), hp.substr(colon + 1)};
}

std::string four_letter_to(const std::string& connect, std::string_view word) {
  const auto [host, port] = first_server(connect);
  return tcp_exchange(host, port, word, false);
}

std::string four_letter(int port, std::string_view word) {
  return tcp_exchange("127.0.0.1", std::to_string(port), word, false);
}

mntr_values mntr(const std::string& connect) {
  mntr_values m;
  for (const auto& line : split(four_letter_to(connect, "mntr"), '\n')) {
    const auto tab = line.find('\t');
    if (tab == std::string::npos) continue;
    try {
      m[line.substr(0, tab)] = std::stod(line.substr(tab + 1));
    } catch (const std::exception&) {  // a non-numeric value (version, state)
    }
  }
  return m;
}

// ---- JSON -------------------------------------------------------------------------------------

std::string json_escape(std::string_view s) { return zkjson::escape(s); }

std::string json_number(double v, int decimals) {
  if (!std::isfinite(v)) return "null";
  char b[64];
  std::snprintf(b, sizeof b, "%.*f", decimals, v);
  return b;
}

}  // namespace zkt
