// SPDX-License-Identifier: Apache-2.0
// The chaos test's checker: reads the logs of one chaos run and lists every safety violation.
// Pure (no server, no zklock): unit-tested on hand-made logs in chaos_test.cpp.
//
// Log lines, one event each; `who` names one contender process (a replacement gets a new one),
// times are CLOCK_MONOTONIC nanoseconds (one clock for every process of the machine):
//
//   contenders  ACQUIRE who t             about to call lock()
//               GRANT who token t ...     lock() returned; fencing token; anything after t ignored
//               LOST who token t          the hold's lost_token() fired
//               RELEASE who token t       done with the hold (logged before unlock())
//               NOTE who text...          ignored (errors the contender recovered from)
//   injector    PAUSE who t_stop t_cont kept|lost
//                                         SIGSTOPped from t_stop (confirmed stopped) to t_cont;
//                                         whether its session outlived the pause (server's view)
//               EXPIRE who t              its session was expired from outside (while paused)
//               KILL who t                SIGKILLed (t: reaped, so it ran no later than t)
//   store       ACCEPT who token t        the fenced store took a write, in decision order
//               REJECT who token t        ... or refused it as stale
//
// What a hold is. A hold is one GRANT. It is live from its grant until the first of: its RELEASE,
// its LOST, the KILL of its process, and the start of a pause of its process that its session did
// not survive ("lost"). A pause that began between the hold's ACQUIRE and its GRANT and cost the
// session leaves the hold no live time at all ("tainted": lock() returned after the process slept
// through its own expiry). Why pauses cut: a stopped process cannot notice that its lease ran out,
// and after SIGCONT it runs on its old belief until the library hears of the expiry; no lock can
// prevent that, which is what fencing tokens are for. So overlap is checked for live time only,
// and what a paused holder does afterwards is checked through the fenced store.
//
// The checks:
//   1. tokens:   ordered by grant time, the live holds' fencing tokens strictly increase;
//   2. overlap:  no two live holds of different processes overlap in time;
//   3. store:    accepted writes never go backwards (non-decreasing tokens); a rejected write was
//                really stale (older than one accepted before it); every write's token was granted
//                to the writer;
//   4. leftovers: the lock node has no children at the end;
//   and every line parses.
//
// A lock that several may hold at once (a read/write lock, a semaphore) is checked with a
// `sharing` rule instead of exclusion: check 2 becomes "no writer's live hold overlaps another
// process's live hold, and no more than `leases` live holds at once" (of a semaphore whose
// processes take several permits each, `permits`: no grant while the live holds' permits and its
// own exceed `leases`), and check 1 applies to the writers' tokens only (a reader's or a lease's
// token need not follow the grant order).
#pragma once
#include <algorithm>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace chaos {

enum class kind { acquire, grant, lost, release, note, pause, expire, kill, accept, reject };

/// One parsed log line.
struct event {
  kind k = kind::note;
  int who = 0;
  std::int64_t token = 0;
  std::int64_t t = 0;      ///< ns; a pause: when the process was confirmed stopped
  std::int64_t t_end = 0;  ///< a pause: when it was continued
  bool lossy = false;      ///< a pause: the session did not outlive it
};

namespace detail {

inline std::vector<std::string_view> words(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
    const std::size_t b = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '\r') ++i;
    if (i > b) out.push_back(line.substr(b, i - b));
  }
  return out;
}

template <class Int>
bool number(std::string_view s, Int& out) {
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc{} && p == s.data() + s.size();
}

inline std::string ms(std::int64_t ns, std::int64_t origin) {
  const std::int64_t d = ns - origin;
  const std::int64_t whole = d / 1'000'000, frac = (d < 0 ? -d : d) / 1000 % 1000;
  std::string f = std::to_string(frac);
  return std::to_string(whole) + "." + std::string(3 - f.size(), '0') + f + " ms";
}

}  // namespace detail

/// Returns: the event of a log line, or nullopt if the line is malformed. Blank lines are notes.
inline std::optional<event> parse_line(std::string_view line) {
  const auto w = detail::words(line);
  event e;
  if (w.empty()) return e;
  const std::string_view tag = w[0];
  auto who = [&] { return w.size() > 1 && detail::number(w[1], e.who); };
  auto who_token_t = [&](kind k) -> std::optional<event> {
    e.k = k;
    if (w.size() < 4 || !who() || !detail::number(w[2], e.token) || !detail::number(w[3], e.t)) return std::nullopt;
    return e;
  };
  auto who_t = [&](kind k) -> std::optional<event> {
    e.k = k;
    if (w.size() != 3 || !who() || !detail::number(w[2], e.t)) return std::nullopt;
    return e;
  };
  if (tag == "ACQUIRE") return who_t(kind::acquire);
  if (tag == "GRANT") return who_token_t(kind::grant);  // extra words: session id etc.
  if (tag == "LOST" || tag == "RELEASE" || tag == "ACCEPT" || tag == "REJECT") {
    if (w.size() != 4) return std::nullopt;
    return who_token_t(tag == "LOST" ? kind::lost : tag == "RELEASE" ? kind::release
                       : tag == "ACCEPT"                             ? kind::accept
                                                                     : kind::reject);
  }
  if (tag == "NOTE") {
    if (!who()) return std::nullopt;
    return e;
  }
  if (tag == "EXPIRE") return who_t(kind::expire);
  if (tag == "KILL") return who_t(kind::kill);
  if (tag == "PAUSE") {
    e.k = kind::pause;
    if (w.size() != 5 || !who() || !detail::number(w[2], e.t) || !detail::number(w[3], e.t_end) || e.t_end < e.t)
      return std::nullopt;
    if (w[4] != "kept" && w[4] != "lost") return std::nullopt;
    e.lossy = w[4] == "lost";
    return e;
  }
  return std::nullopt;
}

/// One hold, as the checker sees it.
struct hold {
  int who = 0;
  std::int64_t token = 0;
  std::int64_t granted = 0;
  std::int64_t ended = std::numeric_limits<std::int64_t>::max();  ///< end of its live time
  std::string end_reason = "never released";
  bool tainted = false;  ///< no live time (see the top of this file)
};

/// What a run amounted to, and what is wrong with it.
struct report {
  std::vector<std::string> violations;
  std::vector<hold> holds;  ///< in grant order
  std::size_t grants = 0, live_grants = 0, tainted_grants = 0, lost_signals = 0;
  std::size_t accepted = 0, rejected = 0;
  std::size_t pauses_kept = 0, pauses_lost = 0, expiries = 0, kills = 0;
  std::size_t overlaps = 0;  ///< pairs of overlapping live holds

  bool ok() const noexcept { return violations.empty(); }

  /// Returns: whether some violation message contains `what` (e.g. "overlap").
  bool has(std::string_view what) const {
    return std::any_of(violations.begin(), violations.end(),
                       [&](const std::string& v) { return v.find(what) != std::string::npos; });
  }

  /// Returns: one line of counts.
  std::string summary() const {
    return std::to_string(grants) + " grants (" + std::to_string(live_grants) + " live, " +
           std::to_string(tainted_grants) + " tainted by a lossy pause), " + std::to_string(lost_signals) +
           " lost signals; writes: " + std::to_string(accepted) + " accepted, " + std::to_string(rejected) +
           " rejected; chaos: " + std::to_string(pauses_kept) + " pauses survived, " + std::to_string(pauses_lost) +
           " pauses lost the session, " + std::to_string(expiries) + " expiries, " + std::to_string(kills) +
           " kills; " + std::to_string(violations.size()) + " violations";
  }

  /// Returns: the summary, then every violation on its own line.
  std::string text() const {
    std::string out = summary();
    for (const auto& v : violations) out += "\n  " + v;
    return out;
  }
};

/// Who may hold the lock at once: by default one process (a mutex). A read/write lock names its
/// reader processes (they share; a writer is alone); a semaphore has `leases` > 1 (no readers).
struct sharing {
  std::size_t leases = 1;
  std::set<int> readers;
  std::map<int, std::size_t> permits = {};  ///< a process's permits per hold (absent: 1)
  bool exclusive() const noexcept { return leases == 1 && readers.empty(); }
  std::size_t permits_of(int who) const {
    const auto it = permits.find(who);
    return it == permits.end() ? 1 : it->second;
  }
};

/// Effects: checks one run. `events`: the contenders' and the injector's lines, in any order;
/// `store`: the store's lines in decision order; `leftovers`: the lock node's children at the end;
/// `rule`: who may hold at once. Returns: the report (see the top of this file for what is checked).
inline report check(const std::vector<std::string>& events, const std::vector<std::string>& store,
                    const std::vector<std::string>& leftovers, const sharing& rule = {}) {
  constexpr std::size_t max_listed = 20;  // per kind of violation; the rest are counted
  report r;
  std::map<std::string, std::size_t> listed;
  auto violation = [&](const std::string& key, const std::string& what) {
    if (listed[key]++ < max_listed) r.violations.push_back(what);
  };

  std::vector<event> evs;
  for (const auto& l : events) {
    if (auto e = parse_line(l)) {
      if (e->k == kind::accept || e->k == kind::reject)
        violation("parse", "a store line among the event lines: '" + l + "'");
      else if (e->k != kind::note)
        evs.push_back(*e);
    } else {
      violation("parse", "malformed line: '" + l + "'");
    }
  }
  std::vector<event> writes;
  for (const auto& l : store) {
    const auto e = parse_line(l);
    if (!e || (e->k != kind::accept && e->k != kind::reject))
      violation("parse", "malformed store line: '" + l + "'");
    else
      writes.push_back(*e);
  }
  {  // by time; ties keep their order (std::stable_sort warns with this libstdc++ and clang)
    std::vector<std::size_t> order(evs.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return evs[a].t != evs[b].t ? evs[a].t < evs[b].t : a < b;
    });
    std::vector<event> sorted;
    sorted.reserve(evs.size());
    for (std::size_t i : order) sorted.push_back(evs[i]);
    evs = std::move(sorted);
  }
  const std::int64_t origin = evs.empty() ? (writes.empty() ? 0 : writes.front().t) : evs.front().t;
  auto at = [&](std::int64_t ns) { return "t=" + detail::ms(ns, origin); };

  // Events per process, in time order.
  std::map<int, std::vector<event>> by_who;
  for (const auto& e : evs) by_who[e.who].push_back(e);
  for (const auto& e : evs) {
    switch (e.k) {
      case kind::pause: ++(e.lossy ? r.pauses_lost : r.pauses_kept); break;
      case kind::expire: ++r.expiries; break;
      case kind::kill: ++r.kills; break;
      case kind::lost: ++r.lost_signals; break;
      default: break;
    }
  }

  // Holds and their live time.
  std::set<std::pair<int, std::int64_t>> granted;  // (who, token)
  for (const auto& g : evs) {
    if (g.k != kind::grant) continue;
    ++r.grants;
    granted.insert({g.who, g.token});
    hold h{g.who, g.token, g.t};
    const auto& mine = by_who[g.who];
    std::int64_t acquired = g.t;  // the ACQUIRE that led to this grant
    for (const auto& e : mine)
      if (e.k == kind::acquire && e.t <= g.t) acquired = e.t;
    auto end_at = [&](std::int64_t t, const char* why) {
      if (t < h.ended) {
        h.ended = t;
        h.end_reason = why;
      }
    };
    for (const auto& e : mine) {
      if (e.t < g.t) continue;
      if (e.k == kind::release && e.token == g.token) end_at(e.t, "released");
      if (e.k == kind::lost && e.token == g.token) end_at(e.t, "lost");
      if (e.k == kind::kill) end_at(e.t, "killed");
    }
    for (const auto& e : mine) {
      if (e.k != kind::pause || !e.lossy || e.t < acquired || e.t >= h.ended) continue;
      if (e.t < g.t) {
        h.tainted = true;
        h.end_reason = "tainted: paused between ACQUIRE and GRANT, session lost";
      } else {
        end_at(e.t, "paused, session lost");
      }
      break;
    }
    r.holds.push_back(h);
  }
  for (const auto& h : r.holds) ++(h.tainted ? r.tainted_grants : r.live_grants);

  std::vector<const hold*> live;
  for (const auto& h : r.holds)
    if (!h.tainted) live.push_back(&h);
  auto show = [&](const hold& h) {
    return "process " + std::to_string(h.who) + " (token " + std::to_string(h.token) + ", granted " + at(h.granted) +
           ", " + h.end_reason +
           (h.ended == std::numeric_limits<std::int64_t>::max() ? std::string{} : " " + at(h.ended)) + ")";
  };

  // 1. Fencing tokens of successive grants strictly increase (of a semaphore: no order; of a
  //    read/write lock: the writers').
  if (rule.leases == 1) {
    std::vector<const hold*> writers;
    for (const hold* h : live)
      if (!rule.readers.contains(h->who)) writers.push_back(h);
    for (std::size_t i = 1; i < writers.size(); ++i)
      if (writers[i]->token <= writers[i - 1]->token)
        violation("tokens", "tokens: " + show(*writers[i]) + " was granted after " + show(*writers[i - 1]) +
                                " with a token that is not larger");
  }

  // 2. No two live holds of different processes overlap (exclusive), or: no live hold overlaps a
  //    writer's, and at no grant are more than `leases` live holds.
  if (rule.exclusive()) {
    for (std::size_t i = 0; i < live.size(); ++i)
      for (std::size_t j = i + 1; j < live.size() && live[j]->granted < live[i]->ended; ++j) {
        if (live[j]->who == live[i]->who) continue;
        ++r.overlaps;
        violation("overlap", "overlap: " + show(*live[j]) + " while " + show(*live[i]) + " still held it");
      }
  } else {
    for (std::size_t j = 0; j < live.size(); ++j) {
      const hold& h = *live[j];
      std::vector<const hold*> others;  // live holds of other processes when h was granted
      for (std::size_t i = 0; i < j; ++i)
        if (live[i]->who != h.who && live[i]->ended > h.granted) others.push_back(live[i]);
      const bool reader = rule.readers.contains(h.who);
      for (const hold* o : others)
        if (!rule.readers.empty() && (!reader || !rule.readers.contains(o->who))) {
          ++r.overlaps;
          violation("overlap", "overlap: " + show(h) + " while " + show(*o) + " still held it (" +
                                   (reader ? "a reader under a writer" : "a writer") + ")");
        }
      std::size_t taken = rule.permits_of(h.who);
      for (const hold* o : others) taken += rule.permits_of(o->who);
      if (rule.readers.empty() && taken > rule.leases) {
        ++r.overlaps;
        violation("overlap", "overlap: " + show(h) + " was granted while " + std::to_string(others.size()) +
                                 " holds of " + std::to_string(rule.leases) + " leases were live (" +
                                 std::to_string(taken) + " permits with its own), the first " +
                                 show(*others.front()));
      }
    }
  }

  // 3. The fenced store: no accepted write goes backwards, rejections are deserved, writes come
  //    from grants.
  std::int64_t highest = std::numeric_limits<std::int64_t>::min();
  for (const auto& w : writes) {
    const std::string who = "process " + std::to_string(w.who) + " token " + std::to_string(w.token) + " " + at(w.t);
    if (!granted.contains({w.who, w.token}))
      violation("forged", "store: a write by " + who + " whose token was never granted to it");
    if (w.k == kind::accept) {
      ++r.accepted;
      if (w.token < highest)
        violation("backwards", "store: accepted write goes backwards: " + who + " after token " +
                                   std::to_string(highest));
      highest = std::max(highest, w.token);
    } else {
      ++r.rejected;
      if (w.token >= highest)
        violation("rejected", "store: rejected a write that was not stale: " + who + " (highest accepted " +
                                  (highest == std::numeric_limits<std::int64_t>::min() ? std::string{"none"}
                                                                                        : std::to_string(highest)) +
                                  ")");
    }
  }

  // 4. Nothing left under the lock node.
  if (!leftovers.empty()) {
    std::string names;
    for (const auto& n : leftovers) names += (names.empty() ? "" : ", ") + n;
    violation("leftovers", "leftovers: the lock node still has " + std::to_string(leftovers.size()) +
                               " children at the end: " + names);
  }

  for (const auto& [key, n] : listed)
    if (n > max_listed)
      r.violations.push_back("... and " + std::to_string(n - max_listed) + " more violations of kind " + key);

  return r;
}

}  // namespace chaos
