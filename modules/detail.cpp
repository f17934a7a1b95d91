// SPDX-License-Identifier: Apache-2.0
// Pure logic of the algorithm: path checks, contender names, queue order, ids.
module;
#include <array>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>
#include <unistd.h>
#include <range/v3/action/sort.hpp>
#include <range/v3/range/conversion.hpp>
#include <range/v3/view/filter.hpp>
#include <range/v3/view/transform.hpp>
module zklock;

namespace zklock::detail {

namespace {
[[noreturn]] void bad_path(std::string_view path, std::string_view what, std::string_view why) {
  std::string shown;
  for (char c : path) shown += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  throw std::invalid_argument("zklock: bad " + std::string{what} + " \"" + shown + "\": " + std::string{why});
}
}  // namespace

void validate_path(std::string_view path, std::string_view what) {
  if (path.empty()) bad_path(path, what, "empty");
  if (path.size() > 1024) bad_path(path.substr(0, 40), what, "longer than 1024 bytes");
  if (path.front() != '/') bad_path(path, what, "not absolute (must start with '/')");
  if (path == "/") bad_path(path, what, "the root node cannot be used");
  if (path.back() == '/') bad_path(path, what, "trailing '/'");
  for (char c : path) {
    if (c == '\0') bad_path(path, what, "embedded NUL");
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) bad_path(path, what, "control character");
  }
  std::size_t start = 1;
  while (start <= path.size()) {
    const auto end = path.find('/', start);
    const auto comp = path.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start);
    if (comp.empty()) bad_path(path, what, "empty component ('//')");
    if (comp == "." || comp == "..") bad_path(path, what, "'.' or '..' component");
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  if (path == "/zookeeper" || path.starts_with("/zookeeper/"))
    bad_path(path, what, "the /zookeeper subtree belongs to the server");
}

std::string_view marker(contender_kind k) noexcept {
  switch (k) {
    case contender_kind::lock: return "lock-";
    case contender_kind::read: return "__READ__";
    case contender_kind::write: return "__WRIT__";
    case contender_kind::lease: return "lease-";
  }
  return "lock-";
}

std::optional<contender> parse_contender(std::string_view name) {
  // ZooKeeper appends the parent's counter as printf("%010d"): ten digits, or '-' and up to ten
  // digits once the counter has wrapped negative ("-000000001", "-2147483648").
  for (auto k : {contender_kind::lock, contender_kind::read, contender_kind::write, contender_kind::lease}) {
    const auto m = marker(k);
    const auto pos = name.rfind(m);
    if (pos == std::string_view::npos) continue;
    const auto seq_text = name.substr(pos + m.size());
    if (seq_text.size() != 10 && !(seq_text.size() == 11 && seq_text.front() == '-')) continue;
    if (seq_text.front() != '-' && (seq_text.front() < '0' || seq_text.front() > '9')) continue;
    std::int32_t seq = 0;
    const char* last = seq_text.data() + seq_text.size();
    auto [ptr, ec] = std::from_chars(seq_text.data(), last, seq);
    if (ec != std::errc{} || ptr != last) continue;
    return contender{std::string{name}, seq, k};
  }
  return std::nullopt;
}

std::vector<contender> sorted_contenders(const std::vector<std::string>& children, unsigned kinds) {
  auto wanted = [kinds](const std::optional<contender>& c) {
    return c && (kinds & (1u << static_cast<unsigned>(c->kind))) != 0;
  };
  auto out = children | ranges::views::transform([](const std::string& n) { return parse_contender(n); }) |
             ranges::views::filter(wanted) |
             ranges::views::transform([](const std::optional<contender>& c) { return *c; }) |
             ranges::to<std::vector>();
  return std::move(out) |
         ranges::actions::sort([](const contender& a, const contender& b) { return seq_before(a.seq, b.seq); });
}

std::string random_uuid() {
  thread_local std::mt19937_64 gen{[] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), static_cast<unsigned>(::getpid()),
                      static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count())};
    return std::mt19937_64{seq};
  }()};
  const std::uint64_t hi = gen(), lo = gen();
  static constexpr char hex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  auto put = [&](std::uint64_t v, int nibbles) {
    for (int i = nibbles - 1; i >= 0; --i) out += hex[(v >> (4 * i)) & 0xf];
  };
  put(hi >> 32, 8);
  out += '-';
  put((hi >> 16) & 0xffff, 4);
  out += '-';
  put((hi & 0x0fff) | 0x4000, 4);  // version 4
  out += '-';
  put(((lo >> 48) & 0x3fff) | 0x8000, 4);  // variant
  out += '-';
  put(lo & 0xffffffffffffULL, 12);
  return out;
}

std::string contender_prefix(contender_kind k) {
  std::string p = "_c_" + random_uuid() + "-";
  p += marker(k);
  return p;
}

std::string contender_data() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return "host=" + std::string{host} + " pid=" + std::to_string(::getpid()) + " since=" + std::to_string(ms);
}

}  // namespace zklock::detail
