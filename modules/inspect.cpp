// SPDX-License-Identifier: Apache-2.0
// zklock:inspect's implementation: list a lock node, read every contender, judge each by its rule.
module;
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>
module zklock;

namespace zklock {

const char* to_string(contender_side s) noexcept {
  switch (s) {
    case contender_side::mutex: return "mutex";
    case contender_side::read: return "read";
    case contender_side::write: return "write";
    case contender_side::lease: return "lease";
  }
  return "unknown";
}

const char* to_string(contender_state s) noexcept {
  switch (s) {
    case contender_state::holder: return "holder";
    case contender_state::waiter: return "waiter";
    case contender_state::unknown: return "unknown";
  }
  return "unknown";
}

namespace {

std::optional<long long> whole_number(std::string_view v) {
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

contender_side side_of(detail::contender_kind k) noexcept {
  switch (k) {
    case detail::contender_kind::lock: return contender_side::mutex;
    case detail::contender_kind::read: return contender_side::read;
    case detail::contender_kind::write: return contender_side::write;
    case detail::contender_kind::lease: return contender_side::lease;
  }
  return contender_side::mutex;
}

/// Returns: the lease count stored on a semaphore node ("leases=N"), if any.
std::optional<std::size_t> stored_leases(session& s, const std::string& path) {
  const auto info = detail::read_node(s, path);
  if (!info || !info->data.starts_with("leases=")) return std::nullopt;
  const auto n = whole_number(std::string_view{info->data}.substr(7));
  if (!n || *n < 1) return std::nullopt;
  return static_cast<std::size_t>(*n);
}

}  // namespace

contender_identity parse_identity(std::string_view data) {
  contender_identity w;
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
    w = contender_identity{};
    while (!data.empty() && (data.back() == ' ' || data.back() == '\n' || data.back() == '\0')) data.remove_suffix(1);
    w.host = printable(data);
  }
  return w;
}

std::vector<contender_info> contenders(session& s, std::string_view path_in) {
  const std::string path = detail::checked_path(std::string{path_in});
  const auto listing = detail::list_children(s, path, nullptr, detail::clock::now() + s.options().connect_timeout);
  if (!listing) throw_error(errc::operation_timeout, "zklock: listing " + path);

  constexpr unsigned all_kinds = 0xf;
  std::vector<detail::contender> present;
  std::vector<contender_info> out;
  for (auto& c : detail::sorted_contenders(*listing, all_kinds)) {
    const auto info = detail::read_node(s, path + "/" + c.name);
    if (!info) continue;  // left meanwhile
    contender_info ci;
    ci.node = c.name;
    ci.side = side_of(c.kind);
    ci.token = info->czxid;
    ci.session_id = info->ephemeral_owner;
    ci.who = parse_identity(info->data);
    out.push_back(std::move(ci));
    present.push_back(std::move(c));
  }

  // States, by each side's rule among the contenders still there.
  std::vector<std::string> names;
  for (const auto& c : present) names.push_back(c.name);
  auto judge = [&](unsigned kinds, auto&& held) {
    const auto queue = detail::sorted_contenders(names, kinds);
    for (std::size_t i = 0; i < queue.size(); ++i)
      for (auto& ci : out)
        if (ci.node == queue[i].name)
          ci.state = held(queue, i) ? contender_state::holder : contender_state::waiter;
  };
  judge(detail::exclusive_rule::kinds,
        [](const auto& q, std::size_t i) { return detail::stand(detail::exclusive_rule{}, q, i).held(); });
  judge(detail::read_rule::kinds, [](const auto& q, std::size_t i) {
    return q[i].kind == detail::contender_kind::read ? detail::stand(detail::read_rule{}, q, i).held()
                                                     : detail::stand(detail::write_rule{}, q, i).held();
  });
  if (std::any_of(out.begin(), out.end(), [](const contender_info& c) { return c.side == contender_side::lease; })) {
    if (const auto leases = stored_leases(s, path)) {
      judge(detail::semaphore_rule::kinds,
            [&](const auto& q, std::size_t i) { return detail::stand(detail::semaphore_rule{*leases}, q, i).held(); });
    } else {
      for (auto& ci : out)
        if (ci.side == contender_side::lease) ci.state = contender_state::unknown;
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i].position = i;
  return out;
}

}  // namespace zklock
