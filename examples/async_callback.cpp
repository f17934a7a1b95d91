// SPDX-License-Identifier: Apache-2.0
// async_callback — the callback form of the asynchronous acquire: many waiters, no thread each.
//
// usage: example_async_callback [WAITERS=50] [HOSTS]
//   HOSTS: "host:port[,host:port...][/chroot]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
// 1. While main holds a mutex, WAITERS acquires queue on it from main's thread (no thread each);
//    main lets go and each callback, granted in queue order, releases at once, handing over.
// 2. A chain: each callback starts the next acquire before it returns.
// 3. A pending acquire is cancelled by its stop token: nothing is left on the server.
// Callbacks run on zklock's completion thread. Exits 1 if a callback ran twice or never, a token
// went backwards or an outcome is not the expected one.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <mutex>
#include <stop_token>
#include <string>
#include <system_error>
#include <vector>
import zklock;

namespace {

// What the callbacks report to main: every access under `mu`.
struct outcomes {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> calls;        // per acquire: how many times its callback ran (must end at 1)
  int finished = 0;              // callbacks run
  std::int64_t last_token = 0;   // tokens must grow in grant order
  std::vector<std::string> errors;

  explicit outcomes(int n) : calls(static_cast<std::size_t>(n)) {}
  /// Records that acquire i's callback ran; `ok`: what it saw was right.
  void record(int i, bool ok, const char* what) {
    std::lock_guard lk{mu};
    if (++calls[static_cast<std::size_t>(i)] != 1) errors.emplace_back("a callback ran twice");
    if (!ok) errors.emplace_back(what);
    ++finished;
    cv.notify_all();
  }
  /// Returns: whether `token` is above every token seen so far (and remembers it).
  bool newer(std::int64_t token) {
    std::lock_guard lk{mu};
    const bool ok = token > last_token;
    last_token = token;
    return ok;
  }
  /// Waits until n callbacks ran; after 60 s exits 1 at once (a lost callback must fail, not hang;
  /// unwinding would destroy what the missing callbacks still refer to).
  void wait_for(int n) {
    std::unique_lock lk{mu};
    if (!cv.wait_for(lk, std::chrono::seconds{60}, [&] { return finished >= n; })) {
      std::fprintf(stderr, "example_async_callback: %d of %d callbacks after 60 s\n", finished, n);
      std::_Exit(1);
    }
  }
};

}  // namespace

int main(int argc, char** argv) try {
  const int waiters = argc > 1 ? std::max(1, std::atoi(argv[1])) : 50;
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 2 ? argv[2] : env && *env ? env : "127.0.0.1:2181";
  const std::string base = "/zklock-examples/async-callback-" + std::to_string(::getpid());

  zklock::session s{hosts};
  zklock::mutex m{s, base + "/queue"};
  std::vector<std::string> errors;

  // --- 1. many waiters on one mutex, all queued from this thread
  {
    outcomes out{waiters + 1};
    std::mutex first_mu;
    zklock::lock_hold first;  // main's own hold, taken asynchronously too
    m.async_lock([&](std::error_code ec, zklock::lock_hold h) {
      out.newer(h ? h.fencing_token() : 0);
      { std::lock_guard lk{first_mu}; first = std::move(h); }
      out.record(waiters, !ec, "the first acquire failed");
    });
    out.wait_for(1);
    for (int i = 0; i < waiters; ++i)
      m.async_lock([&out, i](std::error_code ec, zklock::lock_hold h) {
        // granted in queue order: each one's token is above the one before
        out.record(i, !ec && h && out.newer(h.fencing_token()), "a waiter failed or came out of order");
      });  // h goes out of scope: released, the next waiter's turn
    { std::lock_guard lk{first_mu}; first.unlock(); }  // the queue drains
    out.wait_for(waiters + 1);
    errors.insert(errors.end(), out.errors.begin(), out.errors.end());
    std::printf("async_callback: %d waiters queued from one thread, granted in order\n", waiters);
  }

  // --- 2. a chain: each grant starts the next acquire from inside its callback
  {
    outcomes out{waiters};
    std::function<void(int)> next = [&](int i) {
      m.async_lock([&, i](std::error_code ec, zklock::lock_hold h) {
        const bool ok = !ec && h && out.newer(h.fencing_token());
        h.unlock();
        if (i + 1 < waiters) next(i + 1);  // never blocks: it only queues the next acquire
        out.record(i, ok, "a link of the chain failed");
      });
    };
    next(0);
    out.wait_for(waiters);
    errors.insert(errors.end(), out.errors.begin(), out.errors.end());
    std::printf("async_callback: a chain of %d acquires, each started by the one before\n", waiters);
  }

  // --- 3. cancellation: a pending acquire ends with errc::cancelled when its token is stopped
  {
    outcomes out{2};
    std::stop_source stop;
    zklock::lock_hold held;
    std::mutex held_mu;
    m.async_lock([&](std::error_code ec, zklock::lock_hold h) {
      { std::lock_guard lk{held_mu}; held = std::move(h); }
      out.record(0, !ec, "the holder's acquire failed");
    });
    out.wait_for(1);
    m.async_lock(zklock::wait_context{.stop = stop.get_token()}, [&](std::error_code ec, zklock::lock_hold h) {
      out.record(1, ec == zklock::errc::cancelled && !h, "a stopped acquire did not end in cancelled");
    });
    stop.request_stop();  // the callback runs once (its node and watch are gone by then)
    out.wait_for(2);
    { std::lock_guard lk{held_mu}; held.unlock(); }
    errors.insert(errors.end(), out.errors.begin(), out.errors.end());
    std::printf("async_callback: a pending acquire cancelled by its stop token\n");
  }

  for (const auto& e : errors) std::fprintf(stderr, "example_async_callback: %s\n", e.c_str());
  return errors.empty() ? 0 : 1;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_async_callback: %s\n", e.what());
  return 1;
}
