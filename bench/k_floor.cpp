// SPDX-License-Identifier: Apache-2.0
// k_floor — the floor of the peers' scenarios (a) (one client, uncontended), (c) (T clients, no hold),
// (k) (8 clients, each holds 5 ms), (d) (read/write lock, 8 clients) and (e) (semaphore of 4, 16
// clients): the bare ZooKeeper C client, to run beside Curator and zklock in one run-all.sh run
// (bench/k-floor-runner speaks the runner contract; tools/bench-peers adds it as `k-floor`). Each
// scenario's line has `cpu_window_ms` as the peers' do: what the fewest requests cost a client
// process, per acquisition, in the same run.
//
// What makes it ideal, and not a lock anyone could use: its clients share one process, so a
// waiter knows from memory, not from the server, whether the contender it watches had been
// granted. Each acquire sends a create, a listing and one exists watch on the predecessor;
// the handoff is the holder's delete (sent without waiting), its commit, and the notification to
// the next in line, which is granted on it with no further request. No look-ahead listing and no
// watch on a waiter's own node: the fewest packets any queue on ZooKeeper can pass around a
// handoff. A client queues again once its delete is answered (as zklock does when round trips
// are far). Gap and handoffs/s are measured as the peers measure them. (a) is the same queue with
// one client: a create, a listing (first in line) and a delete whose reply it waits for. (d) and (e)
// are the recipes with no shortcut: a create, a listing, an exists watch on the contender that
// blocks us (a read: the nearest write ahead; a write: its predecessor; a lease: the contender four
// places ahead) and a listing again after its deletion, a delete.
//
//   k_floor --zk HOST:PORT --dur S --scen LETTERS [--n N] [--warm N] [--threads 2,8,32]
//           [the other runner-contract flags, ignored]
//
// One JSON object per line on stdout, for a, c, k, d and e in LETTERS. Nothing is asserted: a benchmark.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>
#include <unistd.h>

#include <zookeeper/zookeeper.h>

#include "bare_client.hpp"

namespace {

using clock_type = std::chrono::steady_clock;
using namespace std::chrono_literals;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch()).count();
}

using bare::flag;
using bare::handle;

extern "C" void on_deleted(zhandle_t*, int type, int, const char*, void* ctx) {
  if (type == ZOO_DELETED_EVENT) static_cast<flag*>(ctx)->raise();
}

extern "C" void on_delete_reply(int, const void* data) { static_cast<flag*>(const_cast<void*>(data))->raise(); }

/// What the clients share: the queue's knowledge of who was granted, and the measurements.
struct shared_state {
  std::string dir;  // the lock node
  std::mutex mu;
  std::set<std::string> granted;  // names of contenders that were granted (the ideal's memory)
  std::atomic<int> holders{0};
  std::atomic<int> violations{0};
  std::atomic<std::int64_t> last_release{0};
  std::atomic<std::int64_t> deadline{0};
};

/// One client: queue, wait for the predecessor's deletion, hold `hold`, release; until the deadline.
/// `gaps` gets the gap of each acquire that followed a release (if `measure`).
long run_client(const std::string& zk, shared_state& st, std::chrono::milliseconds hold,
                std::vector<std::int64_t>& gaps, bool measure) {
  flag deleted, answered;  // before the handle: it is closed (its threads joined) before they go
  handle h{zk};
  long count = 0;
  const std::string prefix = st.dir + "/n-";
  while (now_ns() < st.deadline.load()) {
    char created[512] = {};
    if (::zoo_create(h.zh, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created,
                     sizeof created) != ZOK)
      throw std::runtime_error("create failed");
    const std::string mine = std::string{created}.substr(st.dir.size() + 1);
    for (;;) {  // until granted
      String_vector kids{};
      if (::zoo_get_children(h.zh, st.dir.c_str(), 0, &kids) != ZOK) throw std::runtime_error("list failed");
      std::string pred;
      for (int i = 0; i < kids.count; ++i)
        if (std::string k = kids.data[i]; k < mine && k > pred) pred = std::move(k);
      ::deallocate_String_vector(&kids);
      if (pred.empty()) break;  // first in line
      const std::string pred_path = st.dir + "/" + pred;
      struct Stat stat {};
      const int rc = ::zoo_wexists(h.zh, pred_path.c_str(), on_deleted, &deleted, &stat);
      if (rc == ZOK) deleted.wait_and_reset();
      else if (rc != ZNONODE) throw std::runtime_error("exists failed");
      std::lock_guard lk{st.mu};
      if (st.granted.count(pred)) break;  // it held, so all ahead of it were gone: our turn
    }
    {
      std::lock_guard lk{st.mu};
      st.granted.insert(mine);
    }
    const auto a = now_ns();
    if (++st.holders > 1) ++st.violations;
    if (const auto prev = st.last_release.load(); measure && prev != 0) gaps.push_back(a - prev);
    if (hold.count() > 0) std::this_thread::sleep_for(hold);
    --st.holders;
    st.last_release = now_ns();
    const std::string path = st.dir + "/" + mine;
    if (::zoo_adelete(h.zh, path.c_str(), -1, on_delete_reply, &answered) != ZOK)
      throw std::runtime_error("delete failed");
    answered.wait_and_reset();  // queue again once the delete is answered
    ++count;
  }
  return count;
}

/// Effects: runs `client(i)` on `T` threads at once and joins them. Throws: std::runtime_error if one
/// of them threw (after printing what).
template <class Client>
void run_clients(int T, Client&& client) {
  std::vector<std::thread> ts;
  std::atomic<bool> failed{false};
  for (int i = 0; i < T; ++i)
    ts.emplace_back([&, i] {
      try {
        client(i);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "k_floor: client %d: %s\n", i, e.what());
        failed = true;
      }
    });
  for (auto& t : ts) t.join();
  if (failed) throw std::runtime_error("a client failed");
}

struct result {
  std::vector<long> counts;
  std::vector<std::int64_t> gaps;
  double elapsed_s = 0;
  double cpu_s = 0;  // the process's, in the window
};

/// Runs `T` clients, each holding `hold`, for `dur` seconds on the lock node `dir`.
result run(const std::string& zk, const std::string& dir, int T, std::chrono::milliseconds hold, double dur,
           bool measure) {
  shared_state st;
  st.dir = dir;
  std::vector<std::vector<std::int64_t>> gaps(static_cast<std::size_t>(T));
  result r;
  r.counts.assign(static_cast<std::size_t>(T), 0);
  st.deadline = now_ns() + static_cast<std::int64_t>(dur * 1e9);
  const auto t0 = now_ns();
  const double c0 = bare::cpu_seconds();  // the clients connect in the window, as the peers' do not: a rounding error
  run_clients(T, [&](int i) {
    r.counts[static_cast<std::size_t>(i)] = run_client(zk, st, hold, gaps[static_cast<std::size_t>(i)], measure);
  });
  r.elapsed_s = static_cast<double>(now_ns() - t0) / 1e9;
  r.cpu_s = bare::cpu_seconds() - c0;
  if (st.violations) throw std::runtime_error("two clients held at once");
  for (auto& g : gaps) r.gaps.insert(r.gaps.end(), g.begin(), g.end());
  return r;
}

double percentile(std::vector<std::int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return static_cast<double>(v[std::min(v.size() - 1, static_cast<std::size_t>(static_cast<double>(v.size()) * q))]) / 1e3;
}

/// A bad command line: exit status 2, as the runner contract's runners do.
struct usage_error : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

/// Returns: how many nodes are left under `dir` (-1 if it cannot be listed).
int leftover(zhandle_t* admin, const std::string& dir) {
  String_vector left{};
  if (::zoo_get_children(admin, dir.c_str(), 0, &left) != ZOK) return -1;
  const int n = left.count;
  ::deallocate_String_vector(&left);
  return n;
}

/// (a): one client, `warm` cycles, then `n` timed: create, list (first in line: granted), delete
/// and wait for its reply. Prints the a_uncontended line.
void scen_a(const std::string& zk, zhandle_t* admin, const std::string& dir, long warm, long n,
            const std::string& tagged) {
  handle h{zk};
  const std::string prefix = dir + "/n-";
  auto cycle = [&] {
    char created[512] = {};
    if (::zoo_create(h.zh, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL, created,
                     sizeof created) != ZOK)
      throw std::runtime_error("create failed");
    String_vector kids{};
    if (::zoo_get_children(h.zh, dir.c_str(), 0, &kids) != ZOK) throw std::runtime_error("list failed");
    const bool first = kids.count == 1;
    ::deallocate_String_vector(&kids);
    if (!first) throw std::runtime_error("another contender in the uncontended floor");
    if (::zoo_delete(h.zh, created, -1) != ZOK) throw std::runtime_error("delete failed");
  };
  for (long i = 0; i < warm; ++i) cycle();
  std::vector<std::int64_t> lat;
  lat.reserve(static_cast<std::size_t>(n));
  const auto t0 = now_ns();
  const double c0 = bare::cpu_seconds();
  for (long i = 0; i < n; ++i) {
    const auto a = now_ns();
    cycle();
    lat.push_back(now_ns() - a);
  }
  const double cpu = bare::cpu_seconds() - c0;
  const double el = static_cast<double>(now_ns() - t0) / 1e9;
  std::printf("{\"lib\":\"k-floor\",\"lib_version\":\"%s\",\"scenario\":\"a_uncontended\",\"n\":%ld,"
              "\"ops_s\":%.1f,\"p50_us\":%.1f,\"p99_us\":%.1f,\"cpu_window_ms\":%.1f,\"cpu_us_per_acq\":%.1f,"
              "\"leftover_nodes\":%d%s}\n",
              ZOO_VERSION, n, static_cast<double>(n) / el, percentile(lat, 0.5), percentile(lat, 0.99), cpu * 1e3,
              n ? cpu * 1e6 / static_cast<double>(n) : 0.0, leftover(admin, dir), tagged.c_str());
  std::fflush(stdout);
}

/// (c) and (k): `T` clients, each holding `hold`, `dur` seconds after a 1 s warm-up of 4 clients
/// (as the peers do). Prints the line of `scenario`.
void scen_queue(const std::string& zk, zhandle_t* admin, const std::string& dir, const std::string& scenario, int T,
                std::chrono::milliseconds hold, double dur, const std::string& tagged) {
  run(zk, dir, 4, hold, 1.0, false);
  const result r = run(zk, dir, T, hold, dur, true);
  long total = 0;
  for (long c : r.counts) total += c;
  double mean = 0;
  for (auto g : r.gaps) mean += static_cast<double>(g);
  mean = r.gaps.empty() ? 0 : mean / static_cast<double>(r.gaps.size()) / 1e3;
  std::printf("{\"lib\":\"k-floor\",\"lib_version\":\"%s\",\"scenario\":\"%s\",\"threads\":%d,"
              "\"hold_ms\":%d,\"duration_s\":%.2f,\"acquisitions\":%ld,\"handoffs_s\":%.1f,\"gap_p50_us\":%.1f,"
              "\"gap_p99_us\":%.1f,\"gap_mean_us\":%.1f,\"per_thread_min\":%ld,\"per_thread_max\":%ld,"
              "\"cpu_window_ms\":%.1f,\"cpu_us_per_acq\":%.1f,\"violations\":0,\"stalls\":0,\"leftover_nodes\":%d%s}\n",
              ZOO_VERSION, scenario.c_str(), T, static_cast<int>(hold.count()), r.elapsed_s, total,
              static_cast<double>(total) / r.elapsed_s, percentile(r.gaps, 0.5), percentile(r.gaps, 0.99), mean,
              *std::min_element(r.counts.begin(), r.counts.end()), *std::max_element(r.counts.begin(), r.counts.end()),
              r.cpu_s * 1e3, total ? r.cpu_s * 1e6 / static_cast<double>(total) : 0.0, leftover(admin, dir),
              tagged.c_str());
  std::fflush(stdout);
}

// ---- (d) and (e): the recipes' requests, no shortcut ------------------------------------------------

/// Returns: the sequence number ZooKeeper appended to `name` (its last 10 digits).
long long sequence_of(const std::string& name) { return std::stoll(name.substr(name.size() - 10)); }

/// What a read/write or semaphore client shares with the others: the holders (to count violations).
struct recipe_state {
  std::atomic<int> readers{0}, writers{0}, leases{0};
  std::atomic<int> violations{0};
  std::atomic<std::int64_t> deadline{0};
};

/// Effects: queues under `dir` with a node named `prefix`, then lists, and while `blocker` names a
/// contender ahead (given the contenders in sequence order and our index), waits for its deletion
/// (an exists watch) and lists again: the recipe's requests. Returns: our node's path.
template <class Blocker>
std::string queue_by_recipe(zhandle_t* zh, flag& deleted, const std::string& dir, const std::string& prefix,
                            Blocker&& blocker) {
  char created[512] = {};
  if (::zoo_create(zh, (dir + "/" + prefix).c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                   created, sizeof created) != ZOK)
    throw std::runtime_error("create failed");
  const std::string mine = std::string{created}.substr(dir.size() + 1);
  for (;;) {
    String_vector kids{};
    if (::zoo_get_children(zh, dir.c_str(), 0, &kids) != ZOK) throw std::runtime_error("list failed");
    std::vector<std::string> names(kids.data, kids.data + kids.count);
    ::deallocate_String_vector(&kids);
    std::sort(names.begin(), names.end(),
              [](const std::string& a, const std::string& b) { return sequence_of(a) < sequence_of(b); });
    const auto me = static_cast<std::size_t>(std::find(names.begin(), names.end(), mine) - names.begin());
    const std::string ahead = blocker(names, me);
    if (ahead.empty()) return created;
    struct Stat stat {};
    const int rc = ::zoo_wexists(zh, (dir + "/" + ahead).c_str(), on_deleted, &deleted, &stat);
    if (rc == ZOK) deleted.wait_and_reset();
    else if (rc != ZNONODE) throw std::runtime_error("exists failed");
  }
}

/// Runs `T` clients for `dur` seconds, each calling `cycle(handle, flag, thread index)` until the
/// deadline. Returns: each client's count, the window's length and the process's CPU in it.
template <class Cycle>
result run_recipe(const std::string& zk, recipe_state& st, int T, double dur, Cycle&& cycle) {
  result r;
  r.counts.assign(static_cast<std::size_t>(T), 0);
  st.deadline = now_ns() + static_cast<std::int64_t>(dur * 1e9);
  const auto t0 = now_ns();
  const double c0 = bare::cpu_seconds();
  run_clients(T, [&](int i) {
    flag deleted;  // before the handle: it is closed (its threads joined) before the flag goes
    handle h{zk};
    while (now_ns() < st.deadline.load()) {
      cycle(h.zh, deleted, i);
      ++r.counts[static_cast<std::size_t>(i)];
    }
  });
  r.elapsed_s = static_cast<double>(now_ns() - t0) / 1e9;
  r.cpu_s = bare::cpu_seconds() - c0;
  if (st.violations) throw std::runtime_error("the recipe's exclusion was violated");
  return r;
}

/// (e): a semaphore of 4 leases, 16 clients, each holding `hold`: a lease is one of the first four
/// contenders; a later one watches the contender four places ahead. Prints e_semaphore_hold<H>.
void scen_semaphore(const std::string& zk, zhandle_t* admin, const std::string& dir, std::chrono::milliseconds hold,
                    double dur, const std::string& tagged) {
  constexpr int leases = 4, clients = 16;
  const std::string sem = dir + "-sem" + std::to_string(hold.count());
  ::zoo_create(admin, sem.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
  recipe_state st;
  auto cycle = [&](zhandle_t* zh, flag& deleted, int) {
    const std::string node = queue_by_recipe(zh, deleted, sem, "lease-", [](const std::vector<std::string>& q, std::size_t me) {
      return me < leases ? std::string{} : q[me - leases];
    });
    if (++st.leases > leases) ++st.violations;
    if (hold.count() > 0) std::this_thread::sleep_for(hold);
    --st.leases;
    if (::zoo_delete(zh, node.c_str(), -1) != ZOK) throw std::runtime_error("delete failed");
  };
  run_recipe(zk, st, 4, 1.0, cycle);  // warm-up
  const result r = run_recipe(zk, st, clients, dur, cycle);
  long total = 0;
  for (long c : r.counts) total += c;
  std::printf("{\"lib\":\"k-floor\",\"lib_version\":\"%s\",\"scenario\":\"e_semaphore_hold%d\",\"clients\":%d,"
              "\"leases\":%d,\"hold_ms\":%d,\"duration_s\":%.2f,\"acquisitions\":%ld,\"leases_s\":%.1f,"
              "\"cpu_window_ms\":%.1f,\"cpu_us_per_acq\":%.1f,\"violations\":0,\"leftover_nodes\":%d%s}\n",
              ZOO_VERSION, static_cast<int>(hold.count()), clients, leases, static_cast<int>(hold.count()), r.elapsed_s,
              total, static_cast<double>(total) / r.elapsed_s, r.cpu_s * 1e3,
              total ? r.cpu_s * 1e6 / static_cast<double>(total) : 0.0, leftover(admin, sem), tagged.c_str());
  std::fflush(stdout);
  ::zoo_delete(admin, sem.c_str(), -1);
}

/// (d): a read/write lock, 8 clients, 90 % reads, each holding 1 ms: a read waits for the nearest
/// write ahead, a write for its predecessor. Prints d_rwlock.
void scen_rwlock(const std::string& zk, zhandle_t* admin, const std::string& dir, double dur, const std::string& tagged) {
  constexpr int clients = 8;
  const std::string rw = dir + "-rw";
  ::zoo_create(admin, rw.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
  recipe_state st;
  std::vector<long> reads(clients, 0), writes(clients, 0);
  std::vector<unsigned> seeds(clients);
  for (int i = 0; i < clients; ++i) seeds[static_cast<std::size_t>(i)] = 12345u + static_cast<unsigned>(i);
  bool counting = false;
  auto cycle = [&](zhandle_t* zh, flag& deleted, int i) {
    unsigned& seed = seeds[static_cast<std::size_t>(i)];
    seed = seed * 1103515245u + 12345u;  // each client's own generator: 90 % reads
    const bool write = (seed >> 16) % 10 == 0;
    const std::string node =
        queue_by_recipe(zh, deleted, rw, write ? "write-" : "read-", [&](const std::vector<std::string>& q, std::size_t me) {
          if (write) return me == 0 ? std::string{} : q[me - 1];
          for (std::size_t k = me; k-- > 0;)
            if (q[k].starts_with("write-")) return q[k];
          return std::string{};
        });
    if (write) {
      if (++st.writers > 1 || st.readers > 0) ++st.violations;
    } else {
      ++st.readers;
      if (st.writers > 0) ++st.violations;
    }
    std::this_thread::sleep_for(1ms);
    if (write) --st.writers;
    else --st.readers;
    if (::zoo_delete(zh, node.c_str(), -1) != ZOK) throw std::runtime_error("delete failed");
    if (counting) ++(write ? writes : reads)[static_cast<std::size_t>(i)];
  };
  run_recipe(zk, st, 4, 1.0, cycle);  // warm-up
  counting = true;
  const result r = run_recipe(zk, st, clients, dur, cycle);
  long nr = 0, nw = 0;
  for (int i = 0; i < clients; ++i) nr += reads[static_cast<std::size_t>(i)], nw += writes[static_cast<std::size_t>(i)];
  std::printf("{\"lib\":\"k-floor\",\"lib_version\":\"%s\",\"scenario\":\"d_rwlock\",\"threads\":%d,\"hold_ms\":1,"
              "\"duration_s\":%.2f,\"ops_s\":%.1f,\"reads\":%ld,\"writes\":%ld,\"cpu_window_ms\":%.1f,"
              "\"cpu_us_per_op\":%.1f,\"violations\":0,\"stalls\":0,\"leftover_nodes\":%d%s}\n",
              ZOO_VERSION, clients, r.elapsed_s, static_cast<double>(nr + nw) / r.elapsed_s, nr, nw, r.cpu_s * 1e3,
              nr + nw ? r.cpu_s * 1e6 / static_cast<double>(nr + nw) : 0.0, leftover(admin, rw), tagged.c_str());
  std::fflush(stdout);
  ::zoo_delete(admin, rw.c_str(), -1);
}

}  // namespace

int main(int argc, char** argv) try {
  std::string zk, scen = "a,c,k,d,e", tag;
  double dur = 10;
  long n = 2000, warm = 200;
  std::vector<int> threads{2, 8, 32};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--zk") zk = v;
    else if (k == "--dur") dur = std::stod(v);
    else if (k == "--scen") scen = v;
    else if (k == "--tag") tag = v;
    else if (k == "--n") n = std::stol(v);
    else if (k == "--warm") warm = std::stol(v);
    else if (k == "--threads") {
      threads.clear();
      for (std::size_t at = 0; at <= v.size();) {
        const auto comma = std::min(v.find(',', at), v.size());
        threads.push_back(std::stoi(v.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (k == "--proxy" || k == "--ctrl" || k == "--herd") continue;
    else throw usage_error("unknown flag " + k);
  }
  if (zk.empty()) throw usage_error("usage: k_floor --zk HOST:PORT [--dur S] [--scen LETTERS] [--n N] [--warm N] [--threads T,...]");
  auto wanted = [&](const char* letter) { return ("," + scen + ",").find("," + std::string{letter} + ",") != std::string::npos; };
  if (!wanted("a") && !wanted("c") && !wanted("k") && !wanted("d") && !wanted("e")) return 0;
  ::zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  handle admin{zk};
  const std::string dir = "/bench-k-floor-" + std::to_string(::getpid());
  if (::zoo_create(admin.zh, dir.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0) != ZOK)
    throw std::runtime_error("cannot create " + dir);
  const std::string tagged = tag.empty() ? "" : ",\"tag\":\"" + tag + "\"";
  std::printf("{\"lib\":\"k-floor\",\"lib_version\":\"%s\",\"scenario\":\"env\",\"what\":\"the bare C client doing a lock's requests "
              "(bench/k_floor.cpp)\",\"session_timeout_ms\":30000,\"loadavg\":\"%s\"%s}\n",
              ZOO_VERSION, bare::loadavg().c_str(), tagged.c_str());
  if (wanted("a")) scen_a(zk, admin.zh, dir, warm, n, tagged);
  if (wanted("c"))
    for (const int T : threads)
      scen_queue(zk, admin.zh, dir, "c_contended_T" + std::to_string(T), T, 0ms, dur, tagged);
  if (wanted("k")) scen_queue(zk, admin.zh, dir, "k_contended_hold5_T8", 8, 5ms, dur, tagged);
  if (wanted("d")) scen_rwlock(zk, admin.zh, dir, dur, tagged);
  if (wanted("e"))
    for (const auto hold : {0ms, 20ms}) scen_semaphore(zk, admin.zh, dir, hold, dur, tagged);
  ::zoo_delete(admin.zh, dir.c_str(), -1);
  return 0;
} catch (const usage_error& e) {
  std::fprintf(stderr, "k_floor: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "k_floor: %s\n", e.what());
  return 1;
}
