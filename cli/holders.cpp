// SPDX-License-Identifier: Apache-2.0
// Who holds a lock, as `zklock exec` tells it: the holders named when a --timeout runs out (or
// --timeout 0 finds the lock taken), and with --verbose the queue position of each node exec
// queues and the contender just ahead of it (a thread that watches the queue while exec waits).
#include <algorithm>
#include "cli.hpp"

namespace zkcli {

using zklock::contender_info;
using zklock::contender_side;
using zklock::contender_state;

bool counts(lock_mode m, contender_side k) {
  switch (m) {
    case lock_mode::mutex:  // one path, one meaning: every lock mode queues with every lock kind
    case lock_mode::shared:
    case lock_mode::write: return k != contender_side::lease;
    case lock_mode::permits: return k == contender_side::lease;
  }
  return true;
}

std::string describe(const contender_info& c) {
  std::string out;
  auto part = [&](const std::string& p) { out += (out.empty() ? "" : ", ") + p; };
  if (!c.who.host.empty()) part("host " + c.who.host);
  if (c.who.pid) part("pid " + std::to_string(*c.who.pid));
  if (c.who.since)
    part("since " + iso_time(std::chrono::duration_cast<ms>(c.who.since->time_since_epoch()).count()));
  part("token " + std::to_string(c.token));
  return out;
}

namespace {

/// Returns: what `c` is in the queue, for people: "holder, write" or "waiter, lease".
std::string role(const contender_info& c) {
  return std::string{zklock::to_string(c.state)} + ", " +
         (c.side == contender_side::mutex ? "lock" : zklock::to_string(c.side));
}

}  // namespace

std::string holders_of(zklock::session& s, const options& o) {
  std::vector<contender_info> queue;
  try {
    queue = zklock::contenders(s, o.path);
  } catch (const std::exception&) {
    return {};  // the message goes without the names
  }
  std::string held, waiting;
  std::size_t holders = 0, waiters = 0, used = 0;
  for (const auto& c : queue) {
    if (!counts(o.mode, c.side) || c.session_id == s.id()) continue;  // (not our own node, if still there)
    if (c.state == contender_state::holder) {
      used += c.permits;
      held += (holders++ == 0 ? "" : "; ") + describe(c);
    } else {
      ++waiters;
    }
  }
  std::string out = holders == 0 ? "nobody holds it now (it was released meanwhile)" : "held by " + held;
  std::string notes;  // "(1 of 2 leases used, 3 waiters queued)"
  if (o.mode == lock_mode::permits && holders > 0)
    notes = std::to_string(used) + " of " + std::to_string(o.permits) + " leases used";
  if (waiters > 0) notes += (notes.empty() ? "" : ", ") + count_of(waiters, "waiter") + " queued";
  return notes.empty() ? out : out + " (" + notes + ")";
}

queue_reporter::queue_reporter(zklock::session& s, const options& o) {
  thread_ = std::thread([&s, &o, stop = stop_.get_token()] {
    std::vector<std::string> told;  // the nodes of ours reported so far
    try {
      zklock::watch_contenders(s, o.path, {steady::time_point::max(), stop}, [&](const std::vector<contender_info>& q) {
        // Ours: the node of this session's current id, of a kind this mode queues (exec queues one).
        const std::int64_t self = s.id();
        std::vector<const contender_info*> line;  // the queue this mode's lock uses
        for (const auto& c : q)
          if (counts(o.mode, c.side)) line.push_back(&c);
        const auto me = std::find_if(line.begin(), line.end(), [&](const contender_info* c) { return c->session_id == self; });
        if (me == line.end() || std::find(told.begin(), told.end(), (*me)->node) != told.end()) return true;
        told.push_back((*me)->node);
        if ((*me)->state == contender_state::holder) return true;  // granted at once: exec says so
        const std::size_t ahead = static_cast<std::size_t>(me - line.begin());
        const contender_info& just = *me[-1];  // a waiter has someone ahead
        say("queued for %s at position %zu (%s ahead), behind %s (%s; %s)", o.path.c_str(), ahead + 1,
            count_of(ahead, "contender").c_str(), just.node.c_str(), role(just).c_str(), describe(just).c_str());
        if (just.state != contender_state::holder) {
          std::string held;
          for (const contender_info* c : line)
            if (c->state == contender_state::holder) held += (held.empty() ? "" : "; ") + describe(*c);
          if (!held.empty()) say("%s is held by %s", o.path.c_str(), held.c_str());
        }
        return true;
      });
    } catch (const std::system_error& e) {  // the session closed by a signal: the acquire says what matters
      if (!stop.stop_requested() && e.code() != zklock::make_error_code(zklock::errc::session_closed))
        say("no more queue reports: %s", tidy(e.what()).c_str());
    } catch (const std::exception& e) {
      say("no more queue reports: %s", tidy(e.what()).c_str());
    }
  });
}

queue_reporter::~queue_reporter() {
  stop_.request_stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace zkcli
