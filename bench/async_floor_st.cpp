// SPDX-License-Identifier: Apache-2.0
// async_floor_st — async_floor's "many paths" scenario on the *single-threaded* ZooKeeper C client
// (Debian's libzookeeper-st2): one thread runs both sessions' I/O loops (zookeeper_interest, poll,
// zookeeper_process) and every completion, so a request costs no hand-off between threads. It shows
// what "one I/O loop per session" (issues 25 and 29) could save against the multi-threaded client,
// whose caller, I/O thread and completion thread hand every request and reply to one another.
//
//   async_floor_st --zk HOST:PORT [--async-paths 10000] [--requests floor|zklock]
//
// (a) first acquires of free paths: the holders' session sends, per path, the lock node's create (a
//     container), the contender's create and a listing back to back (with --requests zklock: the
//     contender by the ACL probe's transaction, and the own node's exists watch after the listing);
// (b) queued behind the holders: a second session sends, per path, the contender's create and a
//     listing, then the exists watch on the holder (with --requests zklock: the transaction, and the
//     own node's watch before the holder's).
// One JSON line on stdout, "lib":"async-floor-st" (or "async-floor-st-zklock-requests"), with
// async_floor's field names; exit 1 if any reply was not the one expected. Built only where the
// single-threaded library is installed (tools/setup installs it; its -dev package conflicts with the
// multi-threaded one's, so this program uses the shared headers without THREADED and links the
// library by its path). Not part of zklock, which uses the multi-threaded client.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/resource.h>
#include <unistd.h>

#ifdef THREADED
#error "async_floor_st is built against the single-threaded C client (no THREADED)"
#endif
#include <zookeeper/zookeeper.h>

#include "floor_requests.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

double cpu_us() {
  rusage r{};
  ::getrusage(RUSAGE_SELF, &r);
  auto us = [](const timeval& t) { return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_usec); };
  return us(r.ru_utime) + us(r.ru_stime);
}

double ms_since(clock_type::time_point t0) {
  return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

bool g_zklock_requests = false;  // --requests zklock

/// Acquires whose replies are still to come, and the unexpected replies. One thread: no lock.
struct tally {
  long left = 0;
  long errors = 0;
};

/// One contender's requests (touched by the one thread only).
struct contender {
  zhandle_t* zh = nullptr;
  tally* t = nullptr;
  std::string lock_path, prefix, created, ahead;  // ahead: the holder's node, for a queued one
  int replies_left = 0;
  zoo_op_t ops[4];             // the ACL probe's transaction (--requests zklock)
  zoo_op_result_t results[4];
  struct Stat stamp {};
  char name[512] = {};

  void reply(int n = 1) {
    if ((replies_left -= n) == 0) --t->left;
  }
  void check(int rc) {
    if (rc != ZOK) ++t->errors;
  }
};

contender* of(const void* d) { return static_cast<contender*>(const_cast<void*>(d)); }

extern "C" void on_container(int rc, const char*, const struct Stat*, const void* d) {
  if (rc != ZNODEEXISTS) of(d)->check(rc);
  of(d)->reply();
}
extern "C" void on_created(int rc, const char* name, const struct Stat*, const void* d) {
  contender* c = of(d);
  c->check(rc);
  if (rc == ZOK && name) c->created = std::string{name}.substr(c->lock_path.size() + 1);
  c->reply();
}
extern "C" void on_probed(int rc, const void* d) {
  contender* c = of(d);
  c->check(rc);
  if (rc == ZOK) c->created = std::string{c->name}.substr(c->lock_path.size() + 1);
  c->reply();
}
extern "C" void on_exists(int rc, const struct Stat*, const void* d) {
  of(d)->check(rc);
  of(d)->reply();
}
extern "C" void no_event(zhandle_t*, int, int, const char*, void*) {}  // nobody leaves

void watch(contender& c, const std::string& name) {
  ++c.replies_left;
  const std::string path = c.lock_path + "/" + name;
  if (::zoo_awexists(c.zh, path.c_str(), no_event, nullptr, on_exists, &c) != ZOK) {
    ++c.t->errors;
    c.reply();
  }
}

extern "C" void on_listed_first(int rc, const String_vector* kids, const struct Stat*, const void* d) {
  contender* c = of(d);
  c->check(rc);
  if (rc == ZOK && (kids->count != 1 || c->created != kids->data[0])) ++c->t->errors;
  if (rc == ZOK && g_zklock_requests) watch(*c, c->created);  // the hold's loss watch
  c->reply();
}
extern "C" void on_listed_queued(int rc, const String_vector*, const struct Stat*, const void* d) {
  contender* c = of(d);
  c->check(rc);
  if (rc == ZOK) {
    if (g_zklock_requests) watch(*c, c->created);  // first: it proves our node stands at a grant
    watch(*c, c->ahead);
  }
  c->reply();
}

void sent(int rc) {
  if (rc != ZOK) throw std::runtime_error(std::string{"cannot send a request: "} + ::zerror(rc));
}

/// Sends the contender's create: a plain one, or zklock's ACL probe transaction.
void send_create(contender& c) {
  if (!g_zklock_requests) {
    sent(::zoo_acreate2(c.zh, c.prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL_SEQUENTIAL,
                        on_created, &c));
    return;
  }
  const char* path = c.prefix.c_str();
  bare::acl_probe_ops(c.ops, path, c.name, static_cast<int>(sizeof c.name), &c.stamp);
  sent(::zoo_amulti(c.zh, 4, c.ops, c.results, on_probed, &c));
}

/// Effects: runs the handles' I/O loops on this thread until `t` has no acquire left (or `limit`).
void run_until_done(const std::vector<zhandle_t*>& hs, const tally& t, std::chrono::seconds limit) {
  const auto until = clock_type::now() + limit;
  std::vector<pollfd> fds(hs.size());
  while (t.left > 0) {
    if (clock_type::now() > until) throw std::runtime_error("no reply for too long");
    int wait_ms = 100;
    for (std::size_t i = 0; i < hs.size(); ++i) {
      int fd = -1, interest = 0;
      timeval tv{};
      ::zookeeper_interest(hs[i], &fd, &interest, &tv);
      fds[i] = pollfd{fd, static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                             ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0};
      wait_ms = std::min(wait_ms, static_cast<int>(tv.tv_sec * 1000 + tv.tv_usec / 1000));
    }
    ::poll(fds.data(), fds.size(), wait_ms);
    for (std::size_t i = 0; i < hs.size(); ++i)
      ::zookeeper_process(hs[i], ((fds[i].revents & POLLIN) ? ZOOKEEPER_READ : 0) |
                                     ((fds[i].revents & POLLOUT) ? ZOOKEEPER_WRITE : 0));
  }
}

/// Returns: a connected handle (resolving its server list once a minute, as every floor's does).
zhandle_t* connect(const std::string& zk) {
  zhandle_t* zh = ::zookeeper_init(zk.c_str(), nullptr, 30000, nullptr, nullptr, 0);
  if (!zh) throw std::runtime_error("zookeeper_init failed for " + zk);
  ::zoo_set_servers_resolution_delay(zh, 60000);
  const auto until = clock_type::now() + std::chrono::seconds{30};
  while (::zoo_state(zh) != ZOO_CONNECTED_STATE) {
    if (clock_type::now() > until) throw std::runtime_error("cannot connect to " + zk);
    int fd = -1, interest = 0;
    timeval tv{};
    ::zookeeper_interest(zh, &fd, &interest, &tv);
    pollfd p{fd, static_cast<short>(((interest & ZOOKEEPER_READ) ? POLLIN : 0) |
                                    ((interest & ZOOKEEPER_WRITE) ? POLLOUT : 0)), 0};
    ::poll(&p, 1, 100);
    ::zookeeper_process(zh, ((p.revents & POLLIN) ? ZOOKEEPER_READ : 0) | ((p.revents & POLLOUT) ? ZOOKEEPER_WRITE : 0));
  }
  return zh;
}

}  // namespace

int main(int argc, char** argv) try {
  std::string zk;
  int n = 10'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--zk") zk = v;
    else if (k == "--async-paths") n = std::max(1, std::stoi(v));
    else if (k == "--requests" && (v == "floor" || v == "zklock")) g_zklock_requests = v == "zklock";
    else throw std::invalid_argument("unknown flag " + k);
  }
  if (zk.empty() || argc % 2 == 0) throw std::invalid_argument("--zk HOST:PORT is required, every flag takes a value");
  ::zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  zhandle_t* holder_s = connect(zk);
  zhandle_t* s = connect(zk);
  const std::vector<zhandle_t*> both{holder_s, s};
  std::mt19937_64 rng{std::random_device{}()};
  const std::string dir = "/bench-async-floor-st-" + std::to_string(::getpid());
  std::deque<contender> holders(static_cast<std::size_t>(n)), waiters(static_cast<std::size_t>(n));
  {
    contender d;  // the base: a container, removed by the server once it is empty again
    tally t;
    t.left = 1;
    d.t = &t;
    d.replies_left = 1;
    sent(::zoo_acreate2(holder_s, dir.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, on_container, &d));
    run_until_done(both, t, std::chrono::seconds{30});
    if (t.errors) throw std::runtime_error("cannot create " + dir);
  }
  for (std::size_t i = 0; i < holders.size(); ++i) {
    contender& h = holders[i];
    contender& w = waiters[i];
    h.zh = holder_s;
    w.zh = s;
    h.lock_path = w.lock_path = dir + "/p" + std::to_string(i);
    h.prefix = h.lock_path + "/" + bare::contender_prefix(rng);
    w.prefix = w.lock_path + "/" + bare::contender_prefix(rng);
  }
  // (a) first acquires of free paths
  tally held;
  held.left = n;
  const double hold_cpu0 = cpu_us();
  const auto t_hold = clock_type::now();
  for (contender& h : holders) {
    h.t = &held;
    h.replies_left = 3;
    sent(::zoo_acreate2(holder_s, h.lock_path.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_CONTAINER, on_container,
                        &h));
    send_create(h);
    sent(::zoo_aget_children2(holder_s, h.lock_path.c_str(), 0, on_listed_first, &h));
  }
  run_until_done(both, held, std::chrono::seconds{600});
  const double hold_ms = ms_since(t_hold), hold_cpu_us = cpu_us() - hold_cpu0;
  // (b) queued behind the holders
  tally queued;
  queued.left = n;
  for (std::size_t i = 0; i < waiters.size(); ++i) waiters[i].ahead = holders[i].created;
  const double cpu0 = cpu_us();
  const auto t0 = clock_type::now();
  for (contender& w : waiters) {
    w.t = &queued;
    w.replies_left = 2;  // the create and the listing; each watch adds its own
    send_create(w);
    sent(::zoo_aget_children2(s, w.lock_path.c_str(), 0, on_listed_queued, &w));
  }
  run_until_done(both, queued, std::chrono::seconds{600});
  const double fill_ms = ms_since(t0), fill_cpu_us = cpu_us() - cpu0;
  const int per = g_zklock_requests ? 4 : 3;
  std::printf("{\"lib\":\"%s\",\"scenario\":\"async_many_paths\",\"pending\":%d,\"holders_ms\":%.1f,"
              "\"holders_granted_s\":%.0f,\"holder_requests_per_path\":%d,\"fill_ms\":%.1f,\"queued_s\":%.0f,"
              "\"requests_per_acquire\":%d,\"holders_cpu_us_per_acquire\":%.1f,\"fill_cpu_us_per_acquire\":%.1f,"
              "\"errors\":%ld}\n",
              g_zklock_requests ? "async-floor-st-zklock-requests" : "async-floor-st", n, hold_ms, n / (hold_ms / 1000),
              per, fill_ms, n / (fill_ms / 1000), per, hold_cpu_us / n, fill_cpu_us / n, held.errors + queued.errors);
  ::zookeeper_close(s);
  ::zookeeper_close(holder_s);
  return held.errors + queued.errors ? 1 : 0;
} catch (const std::invalid_argument& e) {
  std::fprintf(stderr, "async_floor_st: %s\nusage: async_floor_st --zk HOST:PORT [--async-paths 10000] "
                       "[--requests floor|zklock]\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "async_floor_st: %s\n", e.what());
  return 1;
}
