// SPDX-License-Identifier: Apache-2.0
// zklock:inspect's implementation: list a lock node, read every contender, judge each by its rule.
module;
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <stdexcept>
#include <system_error>
#include <utility>
#include <vector>
module zklock;
import :nodes;

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

using detail::whole_number;

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
  if (!info) return std::nullopt;
  return detail::leases_stored(info->data);
}

// A hold record is an ephemeral sibling of the holder's contender node, "<path>/zkstats-<token>",
// holding "granted=<unix ms> waited=<ms> ahead=<n> wakeups=<n> requests=<n>". Not the contender
// node's own data: a changed contender node means something to the lock (a semaphore's poke), and
// the name is no contender to zklock or Curator (no marker; it sorts after every sequence number).
constexpr std::string_view record_prefix = "zkstats-";

/// Returns: the record in `data`, if every field is there, whole and not negative.
std::optional<hold_record> parse_record(std::string_view data) {
  long long granted = 0, waited = 0, ahead = 0, wakeups = 0, requests = 0;
  const std::pair<std::string_view, long long*> fields[] = {
      {"granted=", &granted}, {"waited=", &waited}, {"ahead=", &ahead}, {"wakeups=", &wakeups}, {"requests=", &requests}};
  unsigned found = 0;
  for (std::string_view rest = data; !rest.empty();) {
    const auto sp = rest.find(' ');
    const std::string_view word = rest.substr(0, sp);
    rest = sp == std::string_view::npos ? std::string_view{} : rest.substr(sp + 1);
    for (std::size_t i = 0; i < std::size(fields); ++i) {
      if (!word.starts_with(fields[i].first)) continue;
      const auto n = whole_number(word.substr(fields[i].first.size()));
      if (n && *n >= 0) {
        *fields[i].second = *n;
        found |= 1u << i;
      }
    }
  }
  if (found != (1u << std::size(fields)) - 1) return std::nullopt;
  hold_record r;
  r.granted = std::chrono::system_clock::time_point{std::chrono::milliseconds{granted}};
  r.waited = std::chrono::milliseconds{waited};
  r.ahead = static_cast<std::size_t>(ahead);
  r.wakeups = static_cast<std::size_t>(wakeups);
  r.requests = static_cast<std::size_t>(requests);
  return r;
}

/// Returns: the token a hold record's node name `name` is for, if it is one.
std::optional<std::int64_t> record_token(std::string_view name) {
  if (!name.starts_with(record_prefix)) return std::nullopt;
  const auto n = whole_number(name.substr(record_prefix.size()));
  if (!n || *n < 1) return std::nullopt;
  return *n;
}

}  // namespace

namespace {

/// Returns: `limit`, or what calling it returns (a deadline computed for each listing).
detail::clock::time_point deadline_of(detail::clock::time_point t) { return t; }
template <class F>
detail::clock::time_point deadline_of(const F& f) {
  return f();
}

/// Effects: lists `path` with a children watch and hands the listing to `seen` (nullopt if the
/// listing's deadline, `limit`, passed; `missing` if the node does not exist), waits for the
/// watch, and again, until
/// `seen` returns a value, `wc`'s deadline passes or its stop is requested. A session that ends
/// under it: on_live_session looks again on the next one. Leaves no watch behind.
/// Returns: what `seen` returned; false at the deadline or on the stop. Throws:
/// errc::operation_timeout if a listing bounded before `wc`'s deadline ran out; what `seen` throws.
template <class Limit, class Seen>
bool each_listing(session& s, const std::string& path, const wait_context& wc, const Limit& limit, Seen seen) {
  const auto look = [&]() -> bool {
    for (;;) {
      if (wc.stop.stop_requested()) return false;
      const auto w = std::make_shared<wake_condition_variable::waiter>();
      const std::stop_callback on_stop{wc.stop, [&w] { w->wake(); }};
      struct unwatch {  // on every way out (a no-op once the watch fired)
        session& s;
        const std::string& path;
        const wake_target* w;
        ~unwatch() { detail::drop_watch(s, path, true, w); }
      } guard{s, path, w.get()};
      const auto until = deadline_of(limit);
      bool missing = false;
      const auto listing = detail::list_children(s, path, w, until, &missing);
      if (!listing && until < wc.deadline) detail::throw_error(errc::operation_timeout, "zklock: listing " + path);
      if (const auto done = seen(listing, missing)) return *done;
      if (!w->wait_until(wc.deadline) || wc.stop.stop_requested()) return false;
    }
  };
  return on_live_session(s, wc, look).value_or(false);
}

}  // namespace

bool wait_until_free(session& s, std::string_view path_in, const wait_context& wc,
                     const std::function<void(std::size_t)>& on_busy) {
  const std::string path = detail::checked_path(std::string{path_in});
  constexpr unsigned all_kinds = 0xf;
  using listing_type = std::optional<detail::name_list>;
  return each_listing(s, path, wc, wc.deadline, [&](const listing_type& listing, bool) -> std::optional<bool> {
    if (!listing) return false;  // the deadline passed (a missing node is free: no contenders)
    const std::size_t n = detail::sorted_contenders(*listing, all_kinds).size();
    if (n == 0) return true;
    if (on_busy) on_busy(n);
    return std::nullopt;
  });
}

void validate_lock_path(std::string_view path) { detail::validate_path(path, "lock path"); }

stored_hold_record::stored_hold_record(stored_hold_record&& o) noexcept
    : s_(std::exchange(o.s_, nullptr)), path_(std::exchange(o.path_, {})), generation_(o.generation_) {}

stored_hold_record& stored_hold_record::operator=(stored_hold_record&& o) noexcept {
  if (this != &o) {
    release();
    s_ = std::exchange(o.s_, nullptr);
    path_ = std::exchange(o.path_, {});
    generation_ = o.generation_;
  }
  return *this;
}

stored_hold_record::~stored_hold_record() { release(); }

void stored_hold_record::release() noexcept {
  if (!s_) return;
  // A refusal (the lock node's ACL changed) leaves the node to its session's end: nothing to do.
  (void)detail::release_node(*s_, detail::held_node{path_, 0, generation_});
  s_ = nullptr;
  path_.clear();
}

stored_hold_record record_hold(session& s, std::string_view path_in, std::int64_t token, const hold_record& r) {
  const std::string path = detail::checked_path(std::string{path_in});
  if (token < 1) throw std::invalid_argument("zklock::record_hold: a fencing token is positive");
  using std::chrono::duration_cast;
  using std::chrono::milliseconds;
  const std::string data = "granted=" + std::to_string(duration_cast<milliseconds>(r.granted.time_since_epoch()).count()) +
                           " waited=" + std::to_string(r.waited.count()) + " ahead=" + std::to_string(r.ahead) +
                           " wakeups=" + std::to_string(r.wakeups) + " requests=" + std::to_string(r.requests);
  const std::string node = path + "/" + std::string{record_prefix} + std::to_string(token);
  const std::uint64_t generation = s.generation();
  if (!detail::create_ephemeral(s, node, data))
    detail::throw_error(detail::read_node(s, node) ? errc::node_exists : errc::no_node, "zklock: recording a hold at " + node);
  stored_hold_record out;
  out.s_ = &s;
  out.path_ = node;
  out.generation_ = generation;
  return out;
}

namespace {

/// Returns: the contenders of the lock node `path` among its children `listing`, in queue order,
/// judged by each side's rule, each holder with its hold record; `leases()` gives the stored lease
/// count (called only if there are leases).
template <class Leases>
std::vector<contender_info> queue_of(session& s, const std::string& path, const detail::name_list& listing,
                                     Leases leases) {
  constexpr unsigned all_kinds = 0xf;
  std::vector<detail::contender> present;
  std::vector<contender_info> out;
  for (auto& c : detail::sorted_contenders(listing, all_kinds)) {
    const auto info = detail::read_node(s, (path + "/").append(c.name));
    if (!info) continue;  // left meanwhile
    contender_info ci;
    ci.node = c.name;
    ci.side = side_of(c.kind);
    ci.permits = c.weight;
    ci.token = info->czxid;
    ci.session_id = info->ephemeral_owner;
    ci.revocation_requested = detail::is_revocation_request(info->data);
    auto who = detail::parse_identity(info->data);
    ci.who = contender_identity{std::move(who.host), who.pid, who.since};
    out.push_back(std::move(ci));
    present.push_back(std::move(c));
  }

  // States, by each side's rule among the contenders still there.
  detail::name_list names;
  for (const auto& c : present) names.push_back(c.name);
  auto judge = [&](unsigned kinds, auto&& held) {
    const auto queue = detail::sorted_contenders(names, kinds);
    for (std::size_t i = 0; i < queue.size(); ++i)
      for (auto& ci : out)
        if (ci.node == queue[i].name)
          ci.state = held(queue, i) ? contender_state::holder : contender_state::waiter;
  };
  judge(detail::lock_kinds, [](const auto& q, std::size_t i) {
    switch (q[i].kind) {
      case detail::contender_kind::read: return detail::stand(detail::read_rule{}, q, i).held();
      case detail::contender_kind::write: return detail::stand(detail::write_rule{}, q, i).held();
      default: return detail::stand(detail::exclusive_rule{}, q, i).held();
    }
  });
  if (std::any_of(out.begin(), out.end(), [](const contender_info& c) { return c.side == contender_side::lease; })) {
    if (const std::optional<std::size_t> n = leases()) {
      judge(detail::semaphore_rule::kinds,
            [&](const auto& q, std::size_t i) { return detail::stand(detail::semaphore_rule{*n}, q, i).held(); });
    } else {
      for (auto& ci : out)
        if (ci.side == contender_side::lease) ci.state = contender_state::unknown;
    }
  }
  for (std::size_t i = 0; i < out.size(); ++i) out[i].position = i;

  // The holders' hold records (zklock exec stores one per hold; others store none).
  for (const std::string_view name : listing) {
    const auto token = record_token(name);
    if (!token) continue;
    const auto holder = std::find_if(out.begin(), out.end(), [&](const contender_info& c) {
      return c.token == *token && c.state == contender_state::holder;
    });
    if (holder == out.end()) continue;
    if (const auto info = detail::read_node(s, (path + "/").append(name))) holder->record = parse_record(info->data);
  }
  return out;
}

/// Returns: the children of `path` (none if it is missing). Throws: operation_timeout if the
/// connection stays down for connect_timeout; as list_children.
detail::name_list children_of(session& s, const std::string& path) {
  auto listing = detail::list_children(s, path, nullptr, detail::clock::now() + s.options().connect_timeout);
  if (!listing) detail::throw_error(errc::operation_timeout, "zklock: listing " + path);
  return std::move(*listing);
}

/// Returns: the lock node `path`, whose data is `data`, with its children `listing`.
lock_listing listing_of(session& s, const std::string& path, std::string_view data, const detail::name_list& listing) {
  lock_listing out;
  out.path = path;
  out.leases = detail::leases_stored(data);
  out.contenders = queue_of(s, path, listing, [&] { return out.leases; });
  for (const std::string_view name : listing)
    if (!detail::parse_contender(name) && !record_token(name)) ++out.other_children;
  return out;
}

/// Effects: appends to `out` the lock `path` (if it is one: it has contenders or stores a lease
/// count) and every lock below it, depth first. Returns: false if `path` does not exist.
bool collect_locks(session& s, const std::string& path, std::vector<lock_listing>& out) {
  const auto info = detail::read_node(s, path);
  if (!info) return false;
  const auto listing = children_of(s, path);
  auto here = listing_of(s, path, info->data, listing);
  if (!here.contenders.empty() || here.leases) out.push_back(std::move(here));
  auto names = listing.strings();
  std::sort(names.begin(), names.end());  // below it in name order
  for (const auto& name : names) {
    if (detail::parse_contender(name) || record_token(name)) continue;  // (ephemeral: no children)
    const std::string child = path == "/" ? "/" + name : path + "/" + name;
    if (child == "/zookeeper") continue;  // the server's own
    collect_locks(s, child, out);          // (a child that went meanwhile is skipped)
  }
  return true;
}

}  // namespace

std::vector<contender_info> contenders(session& s, std::string_view path_in) {
  const std::string path = detail::checked_path(std::string{path_in});
  return queue_of(s, path, children_of(s, path), [&] { return stored_leases(s, path); });
}

std::optional<lock_listing> inspect_lock(session& s, std::string_view path_in) {
  const std::string path = detail::checked_path(std::string{path_in});
  const auto info = detail::read_node(s, path);
  if (!info) return std::nullopt;
  return listing_of(s, path, info->data, children_of(s, path));
}

std::optional<std::vector<lock_listing>> locks_below(session& s, std::string_view prefix_in) {
  const std::string prefix = detail::checked_path(std::string{prefix_in});
  std::vector<lock_listing> out;
  if (!collect_locks(s, prefix, out)) return std::nullopt;
  return out;
}

bool watch_contenders(session& s, std::string_view path_in, const wait_context& wc,
                      const std::function<bool(const std::vector<contender_info>&)>& on_change) {
  const std::string path = detail::checked_path(std::string{path_in});
  // Each listing within connect_timeout, as contenders(): a caller's stop is never stuck behind a
  // listing that waits for the connection.
  const auto limit = [&] { return std::min(wc.deadline, detail::clock::now() + s.options().connect_timeout); };
  using listing_type = std::optional<detail::name_list>;
  return each_listing(s, path, wc, limit, [&](const listing_type& listing, bool missing) -> std::optional<bool> {
    if (!listing || missing) return false;  // the deadline passed, or no node to watch
    if (!on_change(queue_of(s, path, *listing, [&] { return stored_leases(s, path); }))) return true;
    return std::nullopt;
  });
}

// ---- revoke ----------------------------------------------------------------------------------------

const char* to_string(revoke_outcome o) noexcept {
  switch (o) {
    case revoke_outcome::released: return "released";
    case revoke_outcome::forced: return "forced";
    case revoke_outcome::gone: return "gone";
    case revoke_outcome::still_held: return "still held";
  }
  return "unknown";
}

std::vector<revoked> revoke(session& s, std::string_view path_in, const revoke_options& o) {
  const std::string path = detail::checked_path(std::string{path_in});
  if (o.grace.count() < 0) throw std::invalid_argument("zklock::revoke: a negative grace period");
  if (o.node.find('/') != std::string::npos || o.node == "." || o.node == "..")
    throw std::invalid_argument("zklock::revoke: \"" + o.node + "\" is no node name under " + path);
  std::vector<revoked> out;
  if (!o.node.empty()) {
    out.push_back({o.node, revoke_outcome::gone});
  } else {
    for (const auto& c : contenders(s, path))
      if (c.state == contender_state::holder) out.push_back({c.node, revoke_outcome::gone});
  }
  // Ask: Curator's marker in each holder's node (a holder whose node is gone is not asked).
  std::vector<std::size_t> asked;
  for (std::size_t i = 0; i < out.size(); ++i) {
    try {
      s.set(path + "/" + out[i].node, std::string{detail::revocation_marker});
      asked.push_back(i);
    } catch (const std::system_error& e) {
      if (e.code() != errc::no_node) throw;
    }
  }
  if (asked.empty()) return out;
  // Wait for their nodes to go, on a children watch of the lock node, up to the grace period.
  auto still_there = [&](const detail::name_list& listing, std::size_t i) {
    for (std::size_t k = 0; k < listing.size(); ++k)
      if (listing[k] == out[i].node) return true;
    return false;
  };
  std::vector<std::size_t> left = asked;
  if (o.grace.count() > 0) {
    const wait_context wc{.deadline = detail::clock::now() + o.grace};
    using listing_type = std::optional<detail::name_list>;
    each_listing(s, path, wc, wc.deadline, [&](const listing_type& listing, bool missing) -> std::optional<bool> {
      if (missing) {  // the lock node is gone, and every node under it
        left.clear();
        return true;
      }
      if (!listing) return false;  // the grace period is over
      std::erase_if(left, [&](std::size_t i) { return !still_there(*listing, i); });
      if (left.empty()) return true;
      return std::nullopt;
    });
  }
  for (std::size_t i : asked) out[i].outcome = revoke_outcome::released;
  // Force the holds still there: delete their nodes (a node gone meanwhile was released in time).
  for (std::size_t i : left) {
    if (!o.force) {
      out[i].outcome = revoke_outcome::still_held;
      continue;
    }
    out[i].outcome = s.remove(path + "/" + out[i].node) ? revoke_outcome::forced : revoke_outcome::released;
  }
  return out;
}

namespace {

/// Returns: what `path` is, for messages: "the semaphore /p (N = 2)" or "the lock /p".
std::string kind_of(const lock_listing& l) {
  return l.leases ? "the semaphore " + l.path + " (N = " + std::to_string(*l.leases) + ")" : "the lock " + l.path;
}

/// Returns: a contender for messages: its node, and its host and pid where it stored them.
std::string named(const contender_info& c) {
  std::string out = c.node;
  if (!c.who.host.empty() || c.who.pid) {
    out += " (";
    if (!c.who.host.empty()) out += c.who.host;
    if (c.who.pid) out += (c.who.host.empty() ? "pid " : ", pid ") + std::to_string(*c.who.pid);
    out += ")";
  }
  return out;
}

/// Throws: errc::not_empty: `l` is in use, naming its holders and how many wait.
[[noreturn]] void refuse_busy(const lock_listing& l) {
  std::string holders;
  std::size_t held = 0, waiting = 0;
  for (const contender_info& c : l.contenders) {
    if (c.state != contender_state::holder) {
      ++waiting;
      continue;
    }
    if (++held <= 8) holders += (holders.empty() ? "" : ", ") + named(c);
  }
  if (held > 8) holders += " and " + std::to_string(held - 8) + " more";
  std::string text = "zklock: " + kind_of(l) + " is in use";
  if (held != 0) text += ": held by " + holders;
  if (waiting != 0) text += (held != 0 ? ", " : ": ") + std::to_string(waiting) + " waiting";
  detail::throw_error(errc::not_empty, text + "; nothing removed (remove it once it is free: zklock wait " + l.path +
                                           "; or end the holds: zklock revoke " + l.path + ")");
}

}  // namespace

std::optional<lock_listing> remove_lock(session& s, std::string_view path_in) {
  const std::string path = detail::checked_path(std::string{path_in});
  for (int attempt = 1;; ++attempt) {
    const auto info = detail::read_node(s, path);
    if (!info) return std::nullopt;
    const detail::name_list kids = children_of(s, path);
    lock_listing l = listing_of(s, path, info->data, kids);
    if (!l.contenders.empty()) refuse_busy(l);
    if (l.other_children != 0 || (!l.leases && !info->data.empty())) {  // (lock nodes store nothing)
      std::string names;
      std::size_t n = 0;
      for (const std::string_view name : kids)
        if (!detail::parse_contender(name) && !record_token(name) && ++n <= 8)
          names += (names.empty() ? "" : ", ") + std::string{name};
      detail::throw_error(errc::path_kind_mismatch,
                          n != 0 ? "zklock: " + path + " is no idle lock: it has other nodes below it (" + names +
                                       (n > 8 ? ", ..." : "") + "); nothing removed"
                                 : "zklock: " + path + " is no lock: it stores data that is no lease count; nothing removed");
    }
    // Hold records left without their holds (ended meanwhile), then the node. A contender that
    // queues meanwhile makes the delete fail (not empty): look again, and report it in use.
    for (const std::string_view name : kids)
      if (record_token(name)) s.remove(path + "/" + std::string{name});
    try {
      if (!s.remove(path)) return std::nullopt;
      return l;
    } catch (const std::system_error& e) {
      if (e.code() != errc::not_empty || attempt == 10) throw;
    }
  }
}

}  // namespace zklock
