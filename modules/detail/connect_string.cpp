// SPDX-License-Identifier: Apache-2.0
// Connect strings ("host:port[,host:port...][/chroot]"), checked before the C client sees them:
// pure logic, on the caller's thread (the session's constructor). Unit-tested in
// tests/unit/connect_string_test.cpp.
module;
#include <cctype>
#include <stdexcept>
#include <string>
#include <string_view>
module zklock.detail;

namespace zklock::detail {

namespace {

[[noreturn]] void bad_connect(std::string_view connect, std::string_view why) {
  throw std::invalid_argument("zklock::session: bad connect string \"" + std::string{connect} + "\": " +
                              std::string{why});
}

bool parse_port(std::string_view p) {
  if (p.empty() || p.size() > 5) return false;
  unsigned v = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<unsigned>(c - '0');
  }
  return v >= 1 && v <= 65535;
}

}  // namespace

/// Returns: the chroot ("" if none). Throws: std::invalid_argument.
std::string validate_connect(std::string_view connect) {
  if (connect.empty()) bad_connect(connect, "empty");
  if (connect.find('\0') != std::string_view::npos) bad_connect(connect, "embedded NUL");
  const auto slash = connect.find('/');
  std::string_view hosts = connect.substr(0, slash);
  std::string chroot;
  if (slash != std::string_view::npos) {
    chroot = std::string{connect.substr(slash)};
    try {
      detail::validate_path(chroot, "chroot");
    } catch (const std::invalid_argument& e) {
      bad_connect(connect, e.what());
    }
  }
  if (hosts.empty()) bad_connect(connect, "no host");
  while (!hosts.empty()) {
    const auto comma = hosts.find(',');
    std::string_view h = hosts.substr(0, comma);
    hosts = comma == std::string_view::npos ? std::string_view{} : hosts.substr(comma + 1);
    if (h.empty()) bad_connect(connect, "empty host in list");
    std::string_view host, port;
    if (h.front() == '[') {  // [ipv6]:port
      const auto close = h.find(']');
      if (close == std::string_view::npos || close + 1 >= h.size() || h[close + 1] != ':')
        bad_connect(connect, "IPv6 host must be written [addr]:port");
      host = h.substr(1, close - 1);
      port = h.substr(close + 2);
    } else {
      const auto colon = h.rfind(':');
      if (colon == std::string_view::npos) bad_connect(connect, "missing port in \"" + std::string{h} + "\"");
      host = h.substr(0, colon);
      port = h.substr(colon + 1);
    }
    if (host.empty()) bad_connect(connect, "empty host name");
    for (char c : host)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == ':'))
        bad_connect(connect, "bad character in host \"" + std::string{host} + "\"");
    if (!parse_port(port)) bad_connect(connect, "port \"" + std::string{port} + "\" is not in 1..65535");
    if (comma == std::string_view::npos) break;
    if (hosts.empty()) bad_connect(connect, "trailing ','");
  }
  return chroot;
}

}  // namespace zklock::detail
