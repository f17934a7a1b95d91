// SPDX-License-Identifier: Apache-2.0
// `zklock ls PATH`: the contenders of a lock in queue order, as a table or JSON lines, with what
// the holders' acquires cost when `zklock exec` recorded it (zklock::record_hold), and a
// semaphore's leases used. `ls -r PREFIX`: every lock at or below PREFIX, each with its queue, as
// tables or one JSON document. A path that does not exist exits 66.
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

/// Returns: one contender as a JSON object (no newline), with its acquire record if it holds and
/// stored one, and the lease count `leases` of its semaphore (null if none).
std::string json_object(const std::string& path, const zklock::contender_info& r, long long now_ms,
                        std::optional<std::size_t> leases) {
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
         ",\"revocation_requested\":" + (r.revocation_requested ? "true" : "false") +
         ",\"node\":" + json_string(r.node) +
         ",\"leases\":" + (leases && r.side == zklock::contender_side::lease ? std::to_string(*leases) : "null") +
         ",\"permits\":" + (r.side == zklock::contender_side::lease ? std::to_string(r.permits) : "null") + "}";
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

/// Returns: how many holders and waiters `lock` has.
std::pair<std::size_t, std::size_t> tally(const zklock::lock_listing& lock) {
  std::size_t holders = 0;
  for (const auto& c : lock.contenders) holders += c.state == zklock::contender_state::holder;
  return {holders, lock.contenders.size() - holders};
}

/// Returns: a semaphore's leases in use, "1 of 2 leases used" (with the waiters, if any), or ""
/// for another lock. A lease's permits count as used while its contender holds it.
std::string leases_used(const zklock::lock_listing& lock) {
  if (!lock.leases) return {};
  std::size_t used = 0, waiting = 0;
  for (const auto& c : lock.contenders) {
    if (c.side != zklock::contender_side::lease) continue;
    if (c.state == zklock::contender_state::holder) used += c.permits;
    else ++waiting;
  }
  std::string out = std::to_string(used) + " of " + count_of(*lock.leases, "lease") + " used";
  if (waiting > 0) out += ", " + std::to_string(waiting) + " waiting";
  return out;
}

/// Returns: the contenders of `lock` as a table, heading included.
std::vector<std::vector<std::string>> table_of(const zklock::lock_listing& lock, long long now_ms) {
  std::vector<std::vector<std::string>> table{
      {"POS", "STATE", "KIND", "TOKEN", "HOST", "PID", "SINCE", "WAITED", "HELD", "WAKEUPS", "REQUESTS", "NODE"}};
  for (const auto& r : lock.contenders) {
    const auto since = since_ms(r);
    const auto a = record_of(r);
    std::string kind = side_name(r.side);
    if (r.permits > 1) kind += " x" + std::to_string(r.permits);  // a lease of many permits
    table.push_back({std::to_string(r.position + 1), zklock::to_string(r.state), kind,
                     std::to_string(r.token),
                     r.revocation_requested ? "revoke-requested" : r.who.host.empty() ? "-" : r.who.host,
                     r.who.pid ? std::to_string(*r.who.pid) : "-", since ? iso_time(*since) : "-",
                     a ? span(a->waited_ms) : "-", a ? span(now_ms - a->granted_ms) : "-",
                     a ? std::to_string(a->wakeups) : "-", a ? std::to_string(a->requests) : "-", r.node});
  }
  return table;
}

long long now_ms() {
  return std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();
}

/// Effects: `zklock ls -r PREFIX`: each lock at or below it with its queue, as tables (a line that
/// names the lock above each) or as one JSON document. Returns: 0, or 66 if PREFIX does not exist.
int run_ls_tree(zklock::session& s, const options& o) {
  const auto locks =
      on_live_session(s, steady::now() + o.connect_timeout, [&] { return zklock::locks_below(s, o.path); });
  if (!locks) {
    say("%s does not exist", o.path.c_str());  // (a free lock's node is removed by the server)
    return exit_code::no_input;
  }
  const long long now = now_ms();
  if (o.json) {  // {"path":..,"locks":[{"path":..,"leases":..,"holders":..,"waiters":..,"contenders":[..]},..]}
    std::string out = "{\"path\":" + json_string(o.path) + ",\"locks\":[";
    for (std::size_t i = 0; i < locks->size(); ++i) {
      const auto& lock = (*locks)[i];
      const auto [holders, waiters] = tally(lock);
      out += std::string{i ? "," : ""} + "\n{\"path\":" + json_string(lock.path) +
             ",\"leases\":" + (lock.leases ? std::to_string(*lock.leases) : "null") +
             ",\"holders\":" + std::to_string(holders) + ",\"waiters\":" + std::to_string(waiters) +
             ",\"contenders\":[";
      for (std::size_t j = 0; j < lock.contenders.size(); ++j)
        out += (j ? "," : "") + json_object(lock.path, lock.contenders[j], now, lock.leases);
      out += "]}";
    }
    out += locks->empty() ? "]}\n" : "\n]}\n";
    std::fputs(out.c_str(), stdout);
    return exit_code::ok;
  }
  if (locks->empty()) {
    std::printf("no locks at or below %s\n", o.path.c_str());
    return exit_code::ok;
  }
  for (std::size_t i = 0; i < locks->size(); ++i) {
    const auto& lock = (*locks)[i];
    const auto [holders, waiters] = tally(lock);
    std::string about = lock.leases ? "semaphore, " + leases_used(lock)
                                    : count_of(holders, "holder") + ", " + count_of(waiters, "waiter");
    if (i > 0) std::printf("\n");
    if (lock.contenders.empty()) {
      std::printf("%s (%s): no contenders\n", lock.path.c_str(), about.c_str());
      continue;
    }
    std::printf("%s (%s)\n", lock.path.c_str(), about.c_str());
    print_table(table_of(lock, now));
  }
  return exit_code::ok;
}

}  // namespace

int run_ls(const options& o) {
  auto s = open_session(o);
  if (o.recursive) return run_ls_tree(*s, o);
  // The library's own view of the queue; a session that ends under the listing is replaced, if
  // one can be had within --connect-timeout.
  const auto lock =
      on_live_session(*s, steady::now() + o.connect_timeout, [&] { return zklock::inspect_lock(*s, o.path); });
  if (!lock) {  // a misspelt path, or a lock whose node the server removed once free
    say("%s does not exist (nobody holds or waits for it; the server removes a lock's node once it is free)",
        o.path.c_str());
    return exit_code::no_input;
  }
  const long long now = now_ms();

  if (o.json) {
    for (const auto& r : lock->contenders)
      std::fputs((json_object(o.path, r, now, lock->leases) + "\n").c_str(), stdout);
    return exit_code::ok;
  }
  if (lock->contenders.empty()) {
    if (lock->leases) {
      std::printf("no contenders on %s (semaphore: %s)\n", o.path.c_str(), leases_used(*lock).c_str());
      return exit_code::ok;
    }
    // A node whose children are other nodes, not contenders: say what is below it.
    const auto below = lock->other_children == 0 ? std::nullopt : zklock::locks_below(*s, o.path);
    if (below && !below->empty()) {
      std::printf("no contenders on %s, but %s below it (list them with zklock ls -r %s)\n", o.path.c_str(),
                  count_of(below->size(), "lock").c_str(), o.path.c_str());
      return exit_code::ok;
    }
    std::printf("no contenders on %s\n", o.path.c_str());
    return exit_code::ok;
  }
  print_table(table_of(*lock, now));
  if (lock->leases) std::printf("%s\n", leases_used(*lock).c_str());
  return exit_code::ok;
}

}  // namespace zkcli
