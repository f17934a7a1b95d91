// SPDX-License-Identifier: Apache-2.0
// scale_async — bench/scale's third part: pending asynchronous acquires, all issued by one thread.
//
// one path: another session holds the lock; main's thread issues N async_lock calls on one lock
//   object (each queues a contender of its own; a callback, no thread, per acquire). Once the
//   server lists N + 1 contenders and N more watches are armed, the resident memory grown since
//   before the first call, over N, is the memory per pending acquire (the session, the lock object
//   and zklock's completion thread were there before; the fibers the burst makes, each step's stack
//   while it runs, kept by the session for its life, at most async_runner's limit, are counted in it
//   and reported apart: fiber_stacks_rss_bytes); the heap's bytes in use (mallinfo2) grown
//   over the same time, over N, tell live allocations from the allocator's slack. Then the holder
//   lets go; every callback releases its hold at once, handing over to the next: grants per second
//   while the chain drains, the handoff latency (one callback's start to the next's), fencing
//   tokens increasing in grant order. Then the session's second burst of N on the same path: its
//   resident memory and heap grown, over N, until listed and watched (second_burst_*: the fibers and
//   the allocator's arenas of the first burst are there), and it drains.
// many paths: a holder session holds M paths (M asynchronous acquires, granted at once, holds
//   kept); main's thread issues M more acquires, one per path, on a second session: memory per
//   pending acquire as above (the lock objects made before); then every holder lets go at once:
//   grants per second while they drain; each grant's token above its path's holder's.
// Callbacks run on zklock's completion thread (the default executor). With SCALE_MALLOC_INFO set in
// the environment, one path's first burst prints malloc_info(3) (every arena's free chunks by size)
// to stderr once its acquires are pending: where the resident memory beyond the heap in use sits.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <malloc.h>
#include <memory>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "scale_common.hpp"

import zklock;

bool async_scale(const zklock::session_options& o, const std::string& base, int waiters, int paths,
                 std::chrono::seconds limit);

namespace {

using scale::clock_type;
using scale::ms_since;
using namespace std::chrono_literals;

/// What the callbacks of n acquires saw, by acquire: filled on zklock's completion thread, read by
/// main once all n ran (every access under mu).
class outcomes {
 public:
  explicit outcomes(int n)
      : granted_(static_cast<std::size_t>(n)), token_(granted_.size()),
        calls_(granted_.size()), holds_(granted_.size()) {}

  /// The callback of acquire i: records the grant; keeps the hold if `keep`, else releases it at
  /// once (the next contender's turn).
  void on_grant(int i, std::error_code ec, zklock::lock_hold h, bool keep) {
    const auto got = clock_type::now();
    const std::int64_t token = h ? h.fencing_token() : 0;
    if (!keep) h.unlock();
    std::lock_guard lk{mu_};
    const auto k = static_cast<std::size_t>(i);
    granted_[k] = got;
    token_[k] = token;
    if (ec && !error_) error_ = ec;
    if (keep) holds_[k] = std::move(h);
    if (++calls_[k] == 1) ++done_;
    else ++extra_calls_;
    // (only the last: a wake-up of the waiting thread per grant would be the benchmark's own cost,
    // 10,000 context switches in a run, which bench/async_floor does not pay either)
    if (done_ == granted_.size()) cv_.notify_all();
  }
  /// Waits until every acquire's callback ran; throws after `limit`.
  void wait_all(std::chrono::seconds limit) {
    std::unique_lock lk{mu_};
    if (!cv_.wait_for(lk, limit, [&] { return done_ == granted_.size(); }))
      throw std::runtime_error("asynchronous acquires still pending after the time limit");
  }
  /// Returns: whether any callback reported an error or ran more than once (after wait_all).
  bool failed() const { return static_cast<bool>(error_) || extra_calls_ != 0; }
  std::error_code error() const { return error_; }
  /// Releases every kept hold at once (each delete is sent in the background).
  void release_kept() { holds_.clear(); }
  /// Returns: acquire indices in grant order.
  std::vector<std::size_t> grant_order() const {
    std::vector<std::size_t> order(granted_.size());
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::sort(order.begin(), order.end(), [&](auto a, auto b) { return granted_[a] < granted_[b]; });
    return order;
  }
  const std::vector<clock_type::time_point>& granted() const { return granted_; }
  const std::vector<std::int64_t>& tokens() const { return token_; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<clock_type::time_point> granted_;
  std::vector<std::int64_t> token_;
  std::vector<int> calls_;
  std::vector<zklock::lock_hold> holds_;
  std::size_t done_ = 0, extra_calls_ = 0;
  std::error_code error_;
};

/// Polls the server every 20 ms until done() holds; throws after `limit`.
template <class Done>
void poll_until(Done done, const char* what, std::chrono::seconds limit) {
  const auto until = clock_type::now() + limit;
  while (!done()) {
    if (clock_type::now() > until) throw std::runtime_error(std::string{"scale: never "} + what);
    std::this_thread::sleep_for(20ms);  // polling the server while the acquires queue
  }
}

/// Runs one acquire and release of `m` and waits for it: zklock's completion thread and the lock
/// object's state exist before the memory is measured.
void warm_up(zklock::mutex& m) {
  outcomes w{1};
  m.async_lock([&w](std::error_code ec, zklock::lock_hold h) { w.on_grant(0, ec, std::move(h), false); });
  w.wait_all(60s);
  if (w.failed()) throw std::system_error(w.error(), "scale: the warm-up acquire failed");
}

bool one_path(const zklock::session_options& o, const std::string& base, int n, std::chrono::seconds limit) {
  const std::string path = base + "/async-one-" + std::to_string(n);
  zklock::session holder_s{o}, s{o};
  zklock::mutex holder{holder_s, path};
  zklock::mutex m{s, path};
  warm_up(m);
  holder.lock();
  scale::raw_view raw{o.connect};
  const long long watches0 = scale::watch_count(o.connect);
  outcomes out{n};

  const auto fibers0 = scale::fiber_stacks_now();
  const auto rss0 = scale::rss_bytes();
  const auto heap0 = scale::heap_bytes();
  const double cpu0 = scale::cpu_us();
  const auto t_issue = clock_type::now();
  for (int i = 0; i < n; ++i)
    m.async_lock([&out, i](std::error_code ec, zklock::lock_hold h) { out.on_grant(i, ec, std::move(h), false); });
  const double issue_ms = ms_since(t_issue);  // main's thread is free again from here
  poll_until([&] { return raw.children(path) >= static_cast<std::size_t>(n) + 1; }, "saw every contender", limit);
  poll_until([&] { return scale::watch_count(o.connect) >= watches0 + n; }, "saw every watch armed", limit);
  const double fill_ms = ms_since(t_issue);
  const double fill_cpu_us = scale::cpu_us() - cpu0;  // with the polls' few queries
  const auto rss_pending = scale::rss_bytes();
  const auto heap_pending = scale::heap_bytes();
  const auto fibers = scale::fiber_stacks_now();
  const std::int64_t fiber_rss = fibers.resident - fibers0.resident;  // made in the window, kept by the session
  if (std::getenv("SCALE_MALLOC_INFO")) ::malloc_info(0, stderr);  // the allocator's arenas, where the slack is

  const long long packets0 = scale::mntr(o.connect, "zk_packets_received");
  const auto t0 = clock_type::now();
  holder.unlock();
  out.wait_all(limit);
  const double drain_ms = ms_since(t0);
  const long long packets1 = scale::mntr(o.connect, "zk_packets_received");

  // the session's second burst of as many on the same path: the fibers, the malloc arenas and their
  // free lists the first one left are there, so the resident memory grows by what the pending
  // acquires hold beyond the memory the first burst freed
  holder.lock();
  outcomes again{n};
  const long long watches1 = scale::watch_count(o.connect);
  const auto rss1 = scale::rss_bytes();
  const auto heap1 = scale::heap_bytes();
  for (int i = 0; i < n; ++i)
    m.async_lock([&again, i](std::error_code ec, zklock::lock_hold h) { again.on_grant(i, ec, std::move(h), false); });
  poll_until([&] { return raw.children(path) >= static_cast<std::size_t>(n) + 1; }, "saw every contender again",
             limit);
  poll_until([&] { return scale::watch_count(o.connect) >= watches1 + n; }, "saw every watch armed again", limit);
  const auto rss_again = scale::rss_bytes();
  const auto heap_again = scale::heap_bytes();
  holder.unlock();
  again.wait_all(limit);
  if (again.failed()) std::fprintf(stderr, "scale: async_one_path, second burst: %s\n", again.error().message().c_str());

  // in grant order: tokens must increase; handoff k is grant k-1 to grant k (the callback's release,
  // its delete's round trip with the next waiter's notification, the completion thread's turn)
  const auto order = out.grant_order();
  bool in_order = true;
  std::vector<double> handoff_us;
  for (std::size_t k = 1; k < order.size(); ++k) {
    in_order = in_order && out.tokens()[order[k]] > out.tokens()[order[k - 1]];
    handoff_us.push_back(
        std::chrono::duration<double, std::micro>(out.granted()[order[k]] - out.granted()[order[k - 1]]).count());
  }
  std::sort(handoff_us.begin(), handoff_us.end());
  auto pct = [&](double p) {
    return handoff_us.empty() ? 0.0 : handoff_us[std::min(handoff_us.size() - 1, std::size_t(p * handoff_us.size()))];
  };
  std::printf(
      "{\"scenario\":\"async_one_path\",\"pending\":%d,\"issue_ms\":%.1f,\"fill_ms\":%.0f,"
      "\"rss_per_pending_acquire_bytes\":%.0f,\"heap_per_pending_acquire_bytes\":%.0f,\"fibers\":%d,"
      "\"fiber_stacks_rss_bytes\":%lld,\"rss_per_pending_without_fiber_stacks_bytes\":%.0f,\"drain_ms\":%.0f,"
      "\"handoffs_s\":%.0f,\"handoff_p50_us\":%.0f,\"handoff_p90_us\":%.0f,\"server_requests_per_handoff\":%.2f,"
      "\"fill_cpu_us_per_acquire\":%.1f,\"second_burst_rss_per_pending_acquire_bytes\":%.0f,"
      "\"second_burst_heap_per_pending_acquire_bytes\":%.0f,\"in_order\":%s,\"errors\":%s,\"sizeof_lock_hold\":%zu}\n",
      n, issue_ms, fill_ms, double(rss_pending - rss0) / n, double(heap_pending - heap0) / n, fibers.count,
      static_cast<long long>(fiber_rss), double(rss_pending - rss0 - fiber_rss) / n, drain_ms,
      n / (drain_ms / 1000), pct(0.5), pct(0.9),
      packets0 < 0 || packets1 < 0 ? -1.0 : double(packets1 - packets0) / n, fill_cpu_us / n,
      double(rss_again - rss1) / n, double(heap_again - heap1) / n, in_order ? "true" : "false",
      out.failed() || again.failed() ? "true" : "false", sizeof(zklock::lock_hold));
  std::fflush(stdout);
  if (out.failed()) std::fprintf(stderr, "scale: async_one_path: %s\n", out.error().message().c_str());
  return in_order && !out.failed() && !again.failed();
}

bool many_paths(const zklock::session_options& o, const std::string& base, int n, std::chrono::seconds limit) {
  zklock::session holder_s{o}, s{o};
  std::vector<std::unique_ptr<zklock::mutex>> holder_locks, locks;
  for (int i = 0; i < n; ++i) {
    const std::string path = base + "/async-many/p" + std::to_string(i);
    holder_locks.push_back(std::make_unique<zklock::mutex>(holder_s, path));
    locks.push_back(std::make_unique<zklock::mutex>(s, path));
  }
  warm_up(*locks.front());
  // the holders: n asynchronous acquires, granted at once (each creates its path's lock node)
  outcomes holders{n};
  const double hold_cpu0 = scale::cpu_us();
  const auto t_hold = clock_type::now();
  for (int i = 0; i < n; ++i)
    holder_locks[static_cast<std::size_t>(i)]->async_lock(
        [&holders, i](std::error_code ec, zklock::lock_hold h) { holders.on_grant(i, ec, std::move(h), true); });
  holders.wait_all(limit);
  const double hold_ms = ms_since(t_hold);
  const double hold_cpu_us = scale::cpu_us() - hold_cpu0;
  if (holders.failed()) throw std::system_error(holders.error(), "scale: a holder's acquire failed");
  const long long watches0 = scale::watch_count(o.connect);
  const long long fill_packets0 = scale::mntr(o.connect, "zk_packets_received");
  outcomes out{n};

  const auto fibers0 = scale::fiber_stacks_now();
  const auto rss0 = scale::rss_bytes();
  const auto heap0 = scale::heap_bytes();
  const double cpu0 = scale::cpu_us();
  const long long switches0 = scale::context_switches();
  const auto t_issue = clock_type::now();
  for (int i = 0; i < n; ++i)
    locks[static_cast<std::size_t>(i)]->async_lock(
        [&out, i](std::error_code ec, zklock::lock_hold h) { out.on_grant(i, ec, std::move(h), false); });
  const double issue_ms = ms_since(t_issue);
  // until every waiter is listed and watched: each arms two exists watches, on its own node (the
  // hold's loss watch, sent first) and on its holder's, once its create and listing are answered;
  // one cheap "wchs" per poll (not a listing per path, which would cap the rate measured at one path
  // per round trip; not "mntr", see scale::watch_count)
  poll_until([&] { return scale::watch_count(o.connect) >= watches0 + 2LL * n; }, "saw every watch armed", limit);
  const double fill_ms = ms_since(t_issue);
  const double fill_cpu_us = scale::cpu_us() - cpu0;
  const long long fill_switches = scale::context_switches() - switches0;
  const auto rss_pending = scale::rss_bytes();
  const auto heap_pending = scale::heap_bytes();
  const auto fibers = scale::fiber_stacks_now();
  const std::int64_t fiber_rss = fibers.resident - fibers0.resident;  // made in the window, kept by the session
  const long long fill_packets1 = scale::mntr(o.connect, "zk_packets_received");  // both sessions' requests

  const auto t0 = clock_type::now();
  holders.release_kept();
  out.wait_all(limit);
  const double drain_ms = ms_since(t0);
  bool in_order = true;
  for (std::size_t i = 0; i < out.tokens().size(); ++i) in_order = in_order && out.tokens()[i] > holders.tokens()[i];
  std::printf(
      "{\"scenario\":\"async_many_paths\",\"pending\":%d,\"holders_granted_s\":%.0f,\"issue_ms\":%.1f,"
      "\"fill_ms\":%.0f,\"rss_per_pending_acquire_bytes\":%.0f,\"heap_per_pending_acquire_bytes\":%.0f,"
      "\"fibers\":%d,\"fiber_stacks_rss_bytes\":%lld,\"rss_per_pending_without_fiber_stacks_bytes\":%.0f,"
      "\"drain_ms\":%.0f,\"grants_s\":%.0f,\"holders_cpu_us_per_acquire\":%.1f,\"fill_cpu_us_per_acquire\":%.1f,"
      "\"fill_context_switches_per_acquire\":%.2f,"
      "\"server_requests_per_queued_acquire\":%.2f,\"in_order\":%s,\"errors\":%s}\n",
      n, n / (hold_ms / 1000), issue_ms, fill_ms, double(rss_pending - rss0) / n, double(heap_pending - heap0) / n,
      fibers.count, static_cast<long long>(fiber_rss), double(rss_pending - rss0 - fiber_rss) / n, drain_ms,
      n / (drain_ms / 1000), hold_cpu_us / n, fill_cpu_us / n, double(fill_switches) / n,
      fill_packets0 < 0 || fill_packets1 < 0 ? -1.0 : double(fill_packets1 - fill_packets0) / n,
      in_order ? "true" : "false", out.failed() ? "true" : "false");
  std::fflush(stdout);
  if (out.failed()) std::fprintf(stderr, "scale: async_many_paths: %s\n", out.error().message().c_str());
  return in_order && !out.failed();
}

}  // namespace

/// Runs both asynchronous scenarios (see the banner). Returns: false if an acquire failed, a
/// callback ran twice or a grant came out of queue order. Throws if the queue does not fill, or the
/// acquires are not all granted, within `limit` (each).
bool async_scale(const zklock::session_options& o, const std::string& base, int waiters, int paths,
                 std::chrono::seconds limit) {
  std::fprintf(stderr, "scale: %d pending asynchronous acquires on one path\n", waiters);
  const bool one = one_path(o, base, waiters, limit);
  std::fprintf(stderr, "scale: %d pending asynchronous acquires across %d paths\n", paths, paths);
  const bool many = many_paths(o, base, paths, limit);
  return one && many;
}
