// SPDX-License-Identifier: Apache-2.0
// async_floor — the floor of `bench/scale --mode async` (issue 25): one session's acquires with
// every request in flight together, on the bare ZooKeeper C client (no lock library).
//
//   async_floor --zk HOST:PORT [--async-waiters 1000] [--async-paths 10000] [--requests floor|zklock]
//   async_floor --zk HOST:PORT --warm-up K      (a neutral server warm-up; leaves no node behind)
//
// The flags are scale's, so that a runner gives both the same N (bench/async-scale does). Every
// request of a scenario is sent at once by main's thread, none waits for another path's replies,
// and nothing bounds the number in flight (ZooKeeper processes one session's requests in order
// and throttles a connection by TCP when too many are outstanding; the C client queues the rest).
// What a reply asks for next (the exists watch after a listing) is sent from the C client's
// completion thread as soon as the reply is in. Names are zklock's (Curator's) "_c_<uuid>-lock-<seq>"
// so that listings weigh what zklock's do; contenders carry no data.
//
// 1. async_one_path (scale's "one path"): another session holds the lock node's first contender;
//    this session sends, for each of --async-waiters contenders, an ephemeral-sequential create
//    and a listing back to back, and once a listing is in, an exists watch on the contender just
//    ahead (each listing is longer than the one before: the queue grows as they go). fill_ms: from
//    the first send until the last exists reply, i.e. every contender queued, listed and watching.
// 2. async_many_paths (scale's "many paths"), on --async-paths fresh lock paths:
//    (a) first acquires of free paths: the holder session sends, per path, the create of the lock
//        node (a container, as zklock makes it), the create of its contender and a listing, back
//        to back; holders_granted_s: paths per second from the first send to the last reply;
//    (b) queued behind holders: a second session sends, per path, a contender's create and a
//        listing, then the exists watch on the holder; fill_ms: from the first send until the last
//        exists reply; queued_s = paths per second over it.
// With --requests zklock, each acquire sends zklock's requests instead of the protocol's minimum
// (what zklock's own protocol costs the server and the client, apart from the library): a first
// acquire in the session creates its contender by the ACL probe's transaction (create ours, create,
// stamp and delete a probe), and a waiter arms its own node's exists watch right before the one on
// the contender ahead (a holder arms it after its listing, as the hold's loss watch).
// The field names are scale's where they measure the same thing (pending, issue_ms, fill_ms,
// holders_granted_s), so a script pairs each of zklock's figures with its floor by scenario and
// field. One JSON object per line on stdout, "lib":"async-floor"; exit 1 if any reply was not
// the one expected (an error, or a listing that does not show the queue as sent).
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "bare_client.hpp"
#include "floor_requests.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;
using bare::handle;

double ms_between(clock_type::time_point a, clock_type::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

/// Returns: the sequence number ZooKeeper appended to a contender's name (its last 10 digits).
long long sequence_of(std::string_view name) {
  return name.size() < 10 ? -1 : std::strtoll(std::string{name.substr(name.size() - 10)}.c_str(), nullptr, 10);
}

/// Counts the units of work (paths, contenders) whose replies are all in, and when the last came.
/// Filled on the C client's completion thread, waited for by main's.
class tally {
 public:
  explicit tally(std::size_t n) : left_(n) {}
  /// Effects: one more unit is complete; wakes the waiter after the last.
  void done() {
    const auto now = clock_type::now();
    std::lock_guard lk{mu_};
    last_ = now;
    if (--left_ == 0) cv_.notify_all();  // under the lock: the waiter may end *this once it returns
  }
  /// Effects: records a reply that was not the one expected (the first one's description kept).
  void unexpected(const std::string& what) {
    std::lock_guard lk{mu_};
    if (errors_++ == 0) first_error_ = what;
  }
  /// Effects: waits until every unit is complete. Returns: the moment the last one was. Throws after `limit`.
  clock_type::time_point wait(std::chrono::seconds limit) {
    std::unique_lock lk{mu_};
    if (!cv_.wait_for(lk, limit, [&] { return left_ == 0; }))
      throw std::runtime_error("replies still outstanding after the time limit");
    return last_;
  }
  long errors() {
    std::lock_guard lk{mu_};
    return errors_;
  }
  std::string first_error() {
    std::lock_guard lk{mu_};
    return first_error_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::size_t left_;
  clock_type::time_point last_{};
  long errors_ = 0;
  std::string first_error_;
};

/// One contender's requests and what their replies said. Touched by main's thread until its
/// requests are sent, then only by the completion thread (which also sends its exists).
struct contender {
  zhandle_t* zh = nullptr;
  tally* t = nullptr;
  std::string lock_path;  // the lock node
  std::string prefix;     // lock_path + "/_c_<uuid>-lock-"
  std::string created;    // our node's name under lock_path (from the create's reply)
  std::string expected;   // the name the listing must show just ahead of ours, or
  const contender* before = nullptr;  // the contender whose node that is (its create answered by then)
  std::string watched;    // the full path the exists watch is on
  std::size_t listing_bytes = 0;
  int replies_left = 0;
  // --requests zklock: the ACL probe's transaction (its results and the stamp's stat)
  zoo_op_t ops[4];
  zoo_op_result_t results[4];
  struct Stat stamp {};
  char name[512] = {};

  void reply(int n = 1) {
    if ((replies_left -= n) == 0) t->done();
  }
  void unexpected(const char* what, int rc) {
    t->unexpected(std::string{what} + " " + lock_path + ": " + ::zerror(rc));
  }
};

bool g_zklock_requests = false;  // --requests zklock

/// Returns: the "lib" of the JSON lines: async-floor, or async-floor-zklock-requests.
const char* lib_name() { return g_zklock_requests ? "async-floor-zklock-requests" : "async-floor"; }

extern "C" void on_probed(int rc, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc == ZOK) c->created = std::string_view{c->name}.substr(c->lock_path.size() + 1);
  else c->unexpected("creating a contender (with the ACL probe) under", rc);
  c->reply();
}

/// Sends the contender's create: a plain one, or (--requests zklock, a path's first acquire in the
/// session) zklock's ACL probe transaction.
void send_create(contender& c, string_stat_completion_t plain, bool first_in_session) {
  if (!g_zklock_requests || !first_in_session) {
    const int rc = ::zoo_acreate2(c.zh, c.prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                                  plain, &c);
    if (rc != ZOK) throw std::runtime_error(std::string{"cannot send a create: "} + ::zerror(rc));
    return;
  }
  const char* path = c.prefix.c_str();
  bare::acl_probe_ops(c.ops, path, c.name, static_cast<int>(sizeof c.name), &c.stamp);
  const int rc = ::zoo_amulti(c.zh, 4, c.ops, c.results, on_probed, &c);
  if (rc != ZOK) throw std::runtime_error(std::string{"cannot send a transaction: "} + ::zerror(rc));
}

extern "C" void on_own_event(zhandle_t*, int, int, const char*, void*) {}  // nobody deletes ours

extern "C" void on_own_exists(int rc, const struct Stat*, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc != ZOK) c->unexpected("watching our own node under", rc);
  c->reply();
}

/// --requests zklock: arms the exists watch on our own node (one more reply to wait for).
void send_own_watch(contender& c) {
  ++c.replies_left;
  const std::string own = c.lock_path + "/" + c.created;
  if (const int rc = ::zoo_awexists(c.zh, own.c_str(), on_own_event, nullptr, on_own_exists, &c); rc != ZOK) {
    c.unexpected("sending our own node's exists watch under", rc);
    c.reply();
  }
}

extern "C" void on_container(int rc, const char*, const struct Stat*, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc != ZOK && rc != ZNODEEXISTS) c->unexpected("creating the lock node", rc);
  c->reply();
}

extern "C" void on_created(int rc, const char* name, const struct Stat*, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc == ZOK && name) c->created = std::string_view{name}.substr(c->lock_path.size() + 1);
  else c->unexpected("creating a contender under", rc);
  c->reply();
}

/// Returns: the child of `kids` with the highest sequence number below `mine`'s ("" if none), and
/// the reply's payload in bytes (a 4-byte count, then each name with its 4-byte length).
std::pair<std::string, std::size_t> just_ahead(const String_vector* kids, const std::string& mine) {
  const long long my_seq = sequence_of(mine);
  long long best = -1;
  std::string ahead;
  std::size_t bytes = 4;
  for (int i = 0; kids && i < kids->count; ++i) {
    const std::string_view k{kids->data[i]};
    bytes += 4 + k.size();
    if (const long long s = sequence_of(k); s < my_seq && s > best) {
      best = s;
      ahead = k;
    }
  }
  return {ahead, bytes};
}

/// The listing of a first acquire: its contender must be the only one.
extern "C" void on_listed_first(int rc, const String_vector* kids, const struct Stat*, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc != ZOK) c->unexpected("listing", rc);
  else if (kids->count != 1 || c->created != kids->data[0])
    c->t->unexpected("a free path's listing shows others: " + c->lock_path);
  else c->listing_bytes = just_ahead(kids, c->created).second;
  if (rc == ZOK && g_zklock_requests) send_own_watch(*c);  // the hold's loss watch
  c->reply();
}

extern "C" void on_predecessor_event(zhandle_t*, int, int, const char*, void*) {}  // nobody leaves

extern "C" void on_exists(int rc, const struct Stat*, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc != ZOK) c->unexpected("watching the predecessor under", rc);
  c->reply();
}

/// The listing of a queued acquire: watch the contender just ahead, which must be `expected` (or
/// `before`'s node).
extern "C" void on_listed_queued(int rc, const String_vector* kids, const struct Stat*, const void* data) {
  auto* c = static_cast<contender*>(const_cast<void*>(data));
  if (rc != ZOK) {
    c->unexpected("listing", rc);
    c->reply(2);  // no exists follows
    return;
  }
  auto [ahead, bytes] = just_ahead(kids, c->created);
  c->listing_bytes = bytes;
  const std::string& want = c->before ? c->before->created : c->expected;
  if (ahead.empty() || ahead != want) {
    c->t->unexpected("listing " + c->lock_path + ": just ahead of " + c->created + " is '" + ahead + "', not '" +
                     want + "'");
    c->reply(2);
    return;
  }
  if (g_zklock_requests) send_own_watch(*c);  // first: it proves our node stands at a grant
  c->watched = c->lock_path + "/" + ahead;
  if (const int src = ::zoo_awexists(c->zh, c->watched.c_str(), on_predecessor_event, nullptr, on_exists, c);
      src != ZOK) {
    c->unexpected("sending the exists watch under", src);
    c->reply(2);
    return;
  }
  c->reply();
}

/// Throws if the C client refused to send a request (it answers every request it sent).
void sent(int rc, const char* what) {
  if (rc != ZOK) throw std::runtime_error(std::string{"cannot send "} + what + ": " + ::zerror(rc));
}

/// Sends a first acquire of a free path: lock node (container), contender, listing, back to back.
void send_first(contender& c) {
  c.replies_left = 3;
  sent(::zoo_acreate2(c.zh, c.lock_path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, on_container, &c),
       "a create");
  send_create(c, on_created, true);
  sent(::zoo_aget_children2(c.zh, c.lock_path.c_str(), 0, on_listed_first, &c), "a listing");
}

/// Sends a queued acquire: contender and listing back to back (the exists follows the listing).
void send_queued(contender& c, bool first_in_session) {
  c.replies_left = 3;
  send_create(c, on_created, first_in_session);
  sent(::zoo_aget_children2(c.zh, c.lock_path.c_str(), 0, on_listed_queued, &c), "a listing");
}

void create_container(zhandle_t* zh, const std::string& path) {
  const int rc = ::zoo_create(zh, path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, nullptr, 0);
  if (rc != ZOK && rc != ZNODEEXISTS) throw std::runtime_error("cannot create " + path + ": " + ::zerror(rc));
}

/// Throws if any reply of `t` was not the one expected.
void check(tally& t, const char* scenario) {
  if (t.errors()) {
    throw std::runtime_error(std::string{scenario} + ": " + std::to_string(t.errors()) +
                             " unexpected replies, the first: " + t.first_error());
  }
}

struct config {
  std::string zk;
  int waiters = 1000;
  int paths = 10'000;
  int warm_up = 0;
};

std::mt19937_64 g_rng{std::random_device{}()};

// ---- 1. one path -------------------------------------------------------------------------------

void one_path(const config& cfg, const std::string& base) {
  const std::string lock_path = base + "/async-one-" + std::to_string(cfg.waiters);
  const auto n = static_cast<std::size_t>(cfg.waiters);
  tally t{n};
  std::deque<contender> cs(n);  // before the handles: closed (their threads joined) first
  handle holder_s{cfg.zk}, s{cfg.zk};
  create_container(holder_s.zh, lock_path);
  char holder[512] = {};
  const std::string holder_prefix = lock_path + "/" + bare::contender_prefix(g_rng);
  if (const int rc = ::zoo_create(holder_s.zh, holder_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                                  ZOO_EPHEMERAL_SEQUENTIAL, holder, sizeof holder);
      rc != ZOK)
    throw std::runtime_error(std::string{"cannot create the holder: "} + ::zerror(rc));
  for (auto& c : cs) {
    c.zh = s.zh;
    c.t = &t;
    c.lock_path = lock_path;
    c.prefix = lock_path + "/" + bare::contender_prefix(g_rng);
  }
  // Just ahead of contender i: contender i-1 (the server runs a session's requests in the order
  // sent); of the first: the holder. A listing's reply comes after the create replies of every
  // contender sent before it, on the same completion thread, so on_listed_queued can read i-1's name.
  cs.front().expected = std::string_view{holder}.substr(lock_path.size() + 1);
  for (std::size_t i = 1; i < n; ++i) cs[i].before = &cs[i - 1];
  const double cpu0 = 1e6 * bare::cpu_seconds();
  const auto t0 = clock_type::now();
  for (auto& c : cs) send_queued(c, false);  // (zklock probes a path once per session: 1 in 1,000, left out)
  const double issue_ms = ms_between(t0, clock_type::now());
  const double fill_ms = ms_between(t0, t.wait(600s));
  const double fill_cpu_us = 1e6 * bare::cpu_seconds() - cpu0;
  check(t, "async_one_path");
  std::size_t bytes_total = 0, bytes_last = 0;
  for (const auto& c : cs) {
    bytes_total += c.listing_bytes;
    bytes_last = std::max(bytes_last, c.listing_bytes);
  }
  std::printf("{\"lib\":\"%s\",\"scenario\":\"async_one_path\",\"pending\":%zu,\"issue_ms\":%.1f,"
              "\"fill_ms\":%.1f,\"queued_s\":%.0f,\"requests_per_acquire\":%d,\"listing_bytes_total\":%zu,"
              "\"listing_bytes_longest\":%zu,\"fill_cpu_us_per_acquire\":%.1f,\"errors\":0}\n",
              lib_name(), n, issue_ms, fill_ms, static_cast<double>(n) / (fill_ms / 1000), g_zklock_requests ? 4 : 3,
              bytes_total, bytes_last, fill_cpu_us / static_cast<double>(n));
  std::fflush(stdout);
}

// ---- 2. many paths -----------------------------------------------------------------------------

void many_paths(const config& cfg, const std::string& base) {
  const std::string dir = base + "/async-many";
  const auto n = static_cast<std::size_t>(cfg.paths);
  tally held{n}, queued{n};
  std::deque<contender> holders(n), waiters(n);  // before the handles: closed first
  handle holder_s{cfg.zk}, s{cfg.zk};
  create_container(holder_s.zh, dir);
  for (std::size_t i = 0; i < n; ++i) {
    auto& h = holders[i];
    h.zh = holder_s.zh;
    h.t = &held;
    h.lock_path = dir + "/p" + std::to_string(i);
    h.prefix = h.lock_path + "/" + bare::contender_prefix(g_rng);
    auto& w = waiters[i];
    w.zh = s.zh;
    w.t = &queued;
    w.lock_path = h.lock_path;
    w.prefix = w.lock_path + "/" + bare::contender_prefix(g_rng);
  }

  // (a) first acquires of free paths
  const double hold_cpu0 = 1e6 * bare::cpu_seconds();
  const auto t_hold = clock_type::now();
  for (auto& h : holders) send_first(h);
  const double hold_issue_ms = ms_between(t_hold, clock_type::now());
  const double hold_ms = ms_between(t_hold, held.wait(600s));
  const double hold_cpu_us = 1e6 * bare::cpu_seconds() - hold_cpu0;
  check(held, "async_many_paths, first acquires");

  // (b) queued behind the holders
  for (std::size_t i = 0; i < n; ++i) waiters[i].expected = holders[i].created;
  const double cpu0 = 1e6 * bare::cpu_seconds();
  const long long switches0 = bare::context_switches();
  const auto t0 = clock_type::now();
  for (auto& w : waiters) send_queued(w, true);
  const double issue_ms = ms_between(t0, clock_type::now());
  const double fill_ms = ms_between(t0, queued.wait(600s));
  const double fill_cpu_us = 1e6 * bare::cpu_seconds() - cpu0;
  const long long fill_switches = bare::context_switches() - switches0;
  check(queued, "async_many_paths, queued acquires");
  const int per = g_zklock_requests ? 4 : 3;
  std::printf("{\"lib\":\"%s\",\"scenario\":\"async_many_paths\",\"pending\":%zu,"
              "\"holders_issue_ms\":%.1f,\"holders_ms\":%.1f,\"holders_granted_s\":%.0f,\"holder_requests_per_path\":%d,"
              "\"issue_ms\":%.1f,\"fill_ms\":%.1f,\"queued_s\":%.0f,\"requests_per_acquire\":%d,"
              "\"holders_cpu_us_per_acquire\":%.1f,\"fill_cpu_us_per_acquire\":%.1f,"
              "\"fill_context_switches_per_acquire\":%.2f,\"errors\":0}\n",
              lib_name(), n, hold_issue_ms, hold_ms, static_cast<double>(n) / (hold_ms / 1000), per, issue_ms, fill_ms,
              static_cast<double>(n) / (fill_ms / 1000), per, hold_cpu_us / static_cast<double>(n),
              fill_cpu_us / static_cast<double>(n), static_cast<double>(fill_switches) / static_cast<double>(n));
  std::fflush(stdout);
}

// ---- warm-up -----------------------------------------------------------------------------------

/// K first acquires (container, contender, listing) and an exists each, then every node deleted:
/// the server's code paths run hot before a measurement, and nothing is left to reap.
void warm_up(const config& cfg, const std::string& base) {
  const auto n = static_cast<std::size_t>(cfg.warm_up);
  tally t{n}, gone{2 * n};
  std::deque<contender> cs(n);
  handle s{cfg.zk};
  const auto t0 = clock_type::now();
  for (std::size_t i = 0; i < n; ++i) {
    auto& c = cs[i];
    c.zh = s.zh;
    c.t = &t;
    c.lock_path = base + "/w" + std::to_string(i);
    c.prefix = c.lock_path + "/" + bare::contender_prefix(g_rng);
    send_first(c);
  }
  t.wait(600s);
  check(t, "warm-up");
  static constexpr void_completion_t on_deleted = [](int rc, const void* data) {
    auto* g = static_cast<tally*>(const_cast<void*>(data));
    // ZNONODE: the server's container reaper may remove an emptied lock node before our delete
    if (rc != ZOK && rc != ZNONODE) g->unexpected(std::string{"deleting: "} + ::zerror(rc));
    g->done();
  };
  std::deque<std::string> nodes;
  for (auto& c : cs) {
    nodes.push_back(c.lock_path + "/" + c.created);
    sent(::zoo_adelete(s.zh, nodes.back().c_str(), -1, on_deleted, &gone), "a delete");
    sent(::zoo_adelete(s.zh, c.lock_path.c_str(), -1, on_deleted, &gone), "a delete");
  }
  gone.wait(600s);
  check(gone, "warm-up");
  ::zoo_delete(s.zh, base.c_str(), -1);
  std::printf("{\"lib\":\"async-floor\",\"scenario\":\"warm_up\",\"paths\":%zu,\"requests\":%zu,\"ms\":%.0f}\n", n,
              5 * n + 1, ms_between(t0, clock_type::now()));
  std::fflush(stdout);
}

/// A bad command line: exit status 2.
struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

}  // namespace

int main(int argc, char** argv) try {
  config cfg;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (i + 1 >= argc) throw usage_error(k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--zk") cfg.zk = v;
    else if (k == "--async-waiters") cfg.waiters = std::max(1, std::stoi(v));
    else if (k == "--async-paths") cfg.paths = std::max(1, std::stoi(v));
    else if (k == "--warm-up") cfg.warm_up = std::max(1, std::stoi(v));
    else if (k == "--requests" && (v == "floor" || v == "zklock")) g_zklock_requests = v == "zklock";
    else throw usage_error("unknown flag " + k);
  }
  if (cfg.zk.empty()) throw usage_error("--zk HOST:PORT is required");
  ::zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  const std::string base = "/bench-async-floor-" + std::to_string(::getpid());
  {
    handle admin{cfg.zk};
    create_container(admin.zh, base);  // a container: the server removes it once it is empty again
  }
  if (cfg.warm_up > 0) {
    warm_up(cfg, base);
    return 0;
  }
  std::printf("{\"lib\":\"async-floor\",\"lib_version\":\"%s\",\"scenario\":\"env\",\"what\":\"one session's "
              "acquires, every request in flight, on the bare C client (bench/async_floor.cpp)\",\"loadavg\":\"%s\"}\n",
              ZOO_VERSION, bare::loadavg().c_str());
  std::fflush(stdout);
  std::fprintf(stderr, "async_floor: %d acquires queued on one path\n", cfg.waiters);
  one_path(cfg, base);
  std::fprintf(stderr, "async_floor: %d first acquires of free paths, then %d queued behind them\n", cfg.paths,
               cfg.paths);
  many_paths(cfg, base);
  return 0;
} catch (const usage_error& e) {
  std::fprintf(stderr,
               "async_floor: %s\nusage: async_floor --zk HOST:PORT [--async-waiters 1000] [--async-paths 10000]\n"
               "       [--requests floor|zklock]\n"
               "       async_floor --zk HOST:PORT --warm-up K\n",
               e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "async_floor: %s\n", e.what());
  return 1;
}
