// SPDX-License-Identifier: Apache-2.0
// `zklock ls PATH`: the contenders of a lock in queue order, as a table or JSON lines, with what
// the holders' acquires cost when `zklock exec` recorded it (zklock::record_hold).
#include <algorithm>
#include "cli.hpp"

namespace zkcli {
namespace {

/// Returns: the KIND column for a contender of side `s` ("lock" for a mutex, as the node names say).
const char* side_name(zklock::contender_side s) {
  return s == zklock::contender_side::mutex ? "lock" : zklock::to_string(s);
}

/// A holder's acquire record (zklock::hold_record), in milliseconds.
struct acquire_record {
  long long granted_ms = 0, waited_ms = 0, ahead = 0, wakeups = 0, requests = 0;
};

/// Returns: `c`'s acquire record, if it holds and `zklock exec` stored one (zklock::record_hold).
std::optional<acquire_record> record_of(const zklock::contender_info& c) {
  if (c.state != zklock::contender_state::holder || !c.record) return std::nullopt;
  const zklock::hold_record& r = *c.record;
  return acquire_record{std::chrono::duration_cast<ms>(r.granted.time_since_epoch()).count(), r.waited.count(),
                        static_cast<long long>(r.ahead), static_cast<long long>(r.wakeups),
                        static_cast<long long>(r.requests)};
}

std::optional<long long> since_ms(const zklock::contender_info& c) {
  if (!c.who.since) return std::nullopt;
  return std::chrono::duration_cast<ms>(c.who.since->time_since_epoch()).count();
}

/// Returns: one contender as a JSON line, with its acquire record if it holds and stored one.
std::string json_line(const std::string& path, const zklock::contender_info& r, long long now_ms) {
  const auto a = record_of(r);
  const auto since = since_ms(r);
  auto number = [&](long long v) { return a ? std::to_string(v) : std::string{"null"}; };
  return "{\"path\":" + json_string(path) + ",\"position\":" + std::to_string(r.position + 1) +
         ",\"state\":" + json_string(zklock::to_string(r.state)) + ",\"kind\":" + json_string(side_name(r.side)) +
         ",\"token\":" + std::to_string(r.token) + ",\"host\":" + json_string(r.who.host) +
         ",\"pid\":" + (r.who.pid ? std::to_string(*r.who.pid) : "null") +
         ",\"since\":" + (since ? json_string(iso_time(*since)) : "null") +
         ",\"since_ms\":" + (since ? std::to_string(*since) : "null") +
         ",\"granted\":" + (a ? json_string(iso_time(a->granted_ms)) : "null") +
         ",\"granted_ms\":" + number(a ? a->granted_ms : 0) +
         ",\"held_ms\":" + number(a ? std::max(0LL, now_ms - a->granted_ms) : 0) +
         ",\"waited_ms\":" + number(a ? a->waited_ms : 0) + ",\"ahead\":" + number(a ? a->ahead : 0) +
         ",\"wakeups\":" + number(a ? a->wakeups : 0) + ",\"requests\":" + number(a ? a->requests : 0) +
         ",\"node\":" + json_string(r.node) + "}\n";
}

/// Effects: prints `table` with columns padded to their widest cell, two spaces apart.
void print_table(const std::vector<std::vector<std::string>>& table) {
  std::vector<std::size_t> width(table.front().size(), 0);
  for (const auto& line : table)
    for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (const auto& line : table) {
    std::string out;
    for (std::size_t c = 0; c < line.size(); ++c) {
      out += line[c];
      if (c + 1 < line.size()) out += std::string(width[c] - line[c].size() + 2, ' ');
    }
    std::printf("%s\n", out.c_str());
  }
}

}  // namespace

int run_ls(const options& o) {
  auto s = open_session(o);
  // The library's own view of the queue; a session that ends under the listing is replaced, if
  // one can be had within --connect-timeout.
  const auto rows = on_live_session(*s, steady::now() + o.connect_timeout, [&] { return zklock::contenders(*s, o.path); });
  const long long now_ms =
      std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();

  if (o.json) {
    for (const auto& r : rows) std::fputs(json_line(o.path, r, now_ms).c_str(), stdout);
    return exit_code::ok;
  }
  if (rows.empty()) {
    std::printf("no contenders on %s\n", o.path.c_str());
    return exit_code::ok;
  }
  std::vector<std::vector<std::string>> table{
      {"POS", "STATE", "KIND", "TOKEN", "HOST", "PID", "SINCE", "WAITED", "HELD", "WAKEUPS", "REQUESTS", "NODE"}};
  for (const auto& r : rows) {
    const auto since = since_ms(r);
    const auto a = record_of(r);
    table.push_back({std::to_string(r.position + 1), zklock::to_string(r.state), side_name(r.side),
                     std::to_string(r.token), r.who.host.empty() ? "-" : r.who.host,
                     r.who.pid ? std::to_string(*r.who.pid) : "-", since ? iso_time(*since) : "-",
                     a ? span(a->waited_ms) : "-", a ? span(now_ms - a->granted_ms) : "-",
                     a ? std::to_string(a->wakeups) : "-", a ? std::to_string(a->requests) : "-", r.node});
  }
  print_table(table);
  return exit_code::ok;
}

}  // namespace zkcli
