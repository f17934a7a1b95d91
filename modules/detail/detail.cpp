// SPDX-License-Identifier: Apache-2.0
// zklock.detail, defined: path checks, contender names, queue order, ids, ACL judgement (connect
// strings: modules/connect_string.cpp). The ZooKeeper operations that zklock:operations declares
// (create_and_list, arm_watches, ...) are in modules/session/ (contenders.cpp, watches.cpp, ...).
module;
#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <chrono>
#include <cstdint>
#include <optional>
#include <random>
#include <stdexcept>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <mutex>
#include <pthread.h>
#include <unistd.h>
#include <utility>
#include <range/v3/action/sort.hpp>
#include <range/v3/algorithm/partial_sort.hpp>
module zklock.detail;

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

namespace {
/// Returns: the weight "p<n>-" written just before a lease marker ends `head` with (n in
/// 2..1,000,000, no leading zero), or 1. `head` ends with "-p<n>-lease-" for a lease of n permits;
/// the uuid before it is hex, so no uuid group reads as "p<n>".
std::uint32_t lease_weight(std::string_view head) noexcept {
  head.remove_suffix(marker(contender_kind::lease).size());
  if (!head.ends_with('-')) return 1;
  head.remove_suffix(1);
  const auto dash = head.rfind('-');
  if (dash == std::string_view::npos) return 1;
  const auto text = head.substr(dash + 1);
  if (text.size() < 2 || text.size() > 8 || text[0] != 'p' || text[1] == '0') return 1;
  std::uint32_t n = 0;
  const auto [ptr, ec] = std::from_chars(text.data() + 1, text.data() + text.size(), n);
  if (ec != std::errc{} || ptr != text.data() + text.size() || n < 2 || n > 1'000'000) return 1;
  return n;
}

struct parsed_name {
  contender_kind kind;
  std::int32_t seq;
  std::uint32_t weight;
};

/// Returns: the contender a name stands for, without copying the name (kind, seq and weight).
std::optional<parsed_name> parse_name(std::string_view name) noexcept {
  // ZooKeeper appends the parent's counter as printf("%010d"): ten digits, or '-' and up to ten
  // digits once the counter has wrapped negative ("-000000001", "-2147483648"). The marker comes
  // right before it.
  for (std::size_t len : {std::size_t{10}, std::size_t{11}}) {
    if (name.size() <= len) break;
    const auto seq_text = name.substr(name.size() - len);
    if (len == 11 ? seq_text.front() != '-' : (seq_text.front() != '-' && (seq_text.front() < '0' || seq_text.front() > '9')))
      continue;
    const auto head = name.substr(0, name.size() - len);
    for (auto k : {contender_kind::lock, contender_kind::read, contender_kind::write, contender_kind::lease}) {
      if (!head.ends_with(marker(k))) continue;
      std::int32_t seq = 0;
      const char* last = seq_text.data() + seq_text.size();
      const auto [ptr, ec] = std::from_chars(seq_text.data(), last, seq);
      if (ec == std::errc{} && ptr == last)
        return parsed_name{k, seq, k == contender_kind::lease ? lease_weight(head) : 1u};
    }
  }
  return std::nullopt;
}
}  // namespace

std::optional<contender> parse_contender(std::string_view name) {
  const auto p = parse_name(name);
  if (!p) return std::nullopt;
  return contender{name, p->seq, p->weight, p->kind};
}

std::uint32_t weight_of(std::string_view name) noexcept {
  const auto p = parse_name(name.substr(name.rfind('/') + 1));
  return p ? p->weight : 1;
}

std::vector<contender> listed_contenders(const name_list& children, unsigned kinds, unsigned* present) {
  // One pass: every name is parsed once and viewed, not copied (a listing of a long queue is long:
  // this runs on every wake-up of a waiter that is not second in line).
  std::vector<contender> out;
  out.reserve(children.size());
  unsigned seen = 0;
  for (const std::string_view n : children) {
    const auto p = parse_name(n);
    if (!p) continue;
    const unsigned bit = 1u << static_cast<unsigned>(p->kind);
    seen |= bit;
    if ((kinds & bit) != 0) out.push_back(contender{n, p->seq, p->weight, p->kind});
  }
  if (present) *present = seen;
  return out;
}

std::vector<contender> sorted_contenders(const name_list& children, unsigned kinds, unsigned* present) {
  return listed_contenders(children, kinds, present) |
         ranges::actions::sort([](const contender& a, const contender& b) { return seq_before(a.seq, b.seq); });
}

std::size_t nearest_first(std::span<contender> ahead, std::size_t budget) {
  // Each contender weighs at least 1 permit: the budget is reached within its first `budget`.
  const std::size_t k = std::min(budget, ahead.size());
  ranges::partial_sort(ahead, ahead.begin() + static_cast<std::ptrdiff_t>(k),
                       [](const contender& a, const contender& b) { return seq_before(b.seq, a.seq); });
  std::size_t n = 0, w = 0;
  while (n < k && w < budget) w += ahead[n++].weight;
  return n;
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

std::string contender_prefix(contender_kind k, std::uint32_t permits) {
  std::string p = "_c_" + random_uuid() + "-";
  if (k == contender_kind::lease && permits > 1) ((p += 'p') += std::to_string(permits)) += '-';
  p += marker(k);
  return p;
}

namespace {

/// Returns: "host=<hostname> pid=<pid>", as the system says now.
std::string read_identity() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return "host=" + std::string{host} + " pid=" + std::to_string(::getpid());
}

/// Who this process is, read once (two system calls less per acquire), and again in a child
/// after a fork: the fork handlers keep the lock from being held by a thread the child lacks.
struct identity_cache {
  std::mutex mu;
  std::string text;  // empty: read it (at first, and in a forked child)

  static identity_cache& get() {
    static identity_cache* const c = [] {
      auto* made = new identity_cache;  // never destroyed: acquires may run during static destruction
      ::pthread_atfork([] { get().mu.lock(); }, [] { get().mu.unlock(); },
                       [] {
                         get().text.clear();
                         get().mu.unlock();
                       });
      return made;
    }();
    return *c;
  }
};

}  // namespace

std::string contender_data() {
  std::string out;
  {
    identity_cache& c = identity_cache::get();
    std::lock_guard lk{c.mu};
    if (c.text.empty()) c.text = read_identity();
    out = c.text;
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  return out.append(" since=").append(std::to_string(ms));
}

namespace {

/// Returns: the SHA-1 digest of `in` (FIPS 180-4), as ZooKeeper's digest scheme needs it.
std::array<unsigned char, 20> sha1(std::string_view in) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::string msg{in};
  const std::uint64_t bits = static_cast<std::uint64_t>(in.size()) * 8;
  msg += static_cast<char>(0x80);
  while (msg.size() % 64 != 56) msg += '\0';
  for (int i = 7; i >= 0; --i) msg += static_cast<char>((bits >> (8 * i)) & 0xff);
  auto rotl = [](std::uint32_t x, int n) { return (x << n) | (x >> (32 - n)); };
  for (std::size_t block = 0; block < msg.size(); block += 64) {
    std::uint32_t w[80];
    for (int t = 0; t < 16; ++t) {
      w[t] = 0;
      for (int b = 0; b < 4; ++b)
        w[t] = (w[t] << 8) | static_cast<unsigned char>(msg[block + static_cast<std::size_t>(4 * t + b)]);
    }
    for (int t = 16; t < 80; ++t) w[t] = rotl(w[t - 3] ^ w[t - 8] ^ w[t - 14] ^ w[t - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int t = 0; t < 80; ++t) {
      std::uint32_t f, k;
      if (t < 20) f = (b & c) | (~b & d), k = 0x5A827999;
      else if (t < 40) f = b ^ c ^ d, k = 0x6ED9EBA1;
      else if (t < 60) f = (b & c) | (b & d) | (c & d), k = 0x8F1BBCDC;
      else f = b ^ c ^ d, k = 0xCA62C1D6;
      const std::uint32_t next = rotl(a, 5) + f + e + k + w[t];
      e = d, d = c, c = rotl(b, 30), b = a, a = next;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e;
  }
  std::array<unsigned char, 20> out{};
  for (std::size_t i = 0; i < 20; ++i) out[i] = static_cast<unsigned char>(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

std::string base64(const unsigned char* p, std::size_t n) {
  static constexpr char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  for (std::size_t i = 0; i < n; i += 3) {
    const std::uint32_t v = (std::uint32_t{p[i]} << 16) | (i + 1 < n ? std::uint32_t{p[i + 1]} << 8 : 0) |
                            (i + 2 < n ? std::uint32_t{p[i + 2]} : 0);
    out += abc[(v >> 18) & 63];
    out += abc[(v >> 12) & 63];
    out += i + 1 < n ? abc[(v >> 6) & 63] : '=';
    out += i + 2 < n ? abc[v & 63] : '=';
  }
  return out;
}

}  // namespace

std::string digest_identity(std::string_view user_colon_password) {
  const auto colon = user_colon_password.find(':');
  if (colon == std::string_view::npos)
    throw std::invalid_argument("zklock: a digest credential is \"user:password\"");
  const auto d = sha1(user_colon_password);
  return std::string{user_colon_password.substr(0, colon)} + ":" + base64(d.data(), d.size());
}

bool acl_may_delete(const std::vector<acl_entry>& acl, std::string_view digest_id) noexcept {
  for (const auto& e : acl) {
    if (!(e.perms & acl_delete)) continue;
    if (e.scheme == "world") {
      if (e.id == "anyone") return true;
    } else if (e.scheme == "digest") {
      if (!digest_id.empty() && e.id == digest_id) return true;
    } else {
      return true;  // ip, sasl, x509, ...: the server may count us in; do not refuse
    }
  }
  return false;
}

// ---- who a contender is ------------------------------------------------------------------------

std::optional<long long> whole_number(std::string_view v) noexcept {
  long long n = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || ptr != v.data() + v.size() || v.empty()) return std::nullopt;
  return n;
}

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s) out += (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) ? '?' : c;
  return out;
}

identity_fields parse_identity(std::string_view data) {
  identity_fields w;
  bool ours = false;
  for (std::string_view rest = data; !rest.empty();) {
    const auto sp = rest.find(' ');
    const std::string_view word = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
    if (word.starts_with("host=")) {
      w.host = printable(word.substr(5));
      ours = true;
    } else if (word.starts_with("pid=")) {
      w.pid = whole_number(word.substr(4));
    } else if (word.starts_with("since=")) {
      if (const auto ms = whole_number(word.substr(6)))
        w.since = std::chrono::system_clock::time_point{std::chrono::milliseconds{*ms}};
    }
  }
  if (!ours) {  // another library's data, e.g. Curator's: the client's IP address as text
    w = identity_fields{};
    while (!data.empty() && (data.back() == ' ' || data.back() == '\n' || data.back() == '\0')) data.remove_suffix(1);
    w.host = printable(data);
  }
  return w;
}

}  // namespace zklock::detail
