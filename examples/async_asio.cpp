// SPDX-License-Identifier: Apache-2.0
// async_asio — zklock's asynchronous acquire as an Asio operation: many locks, one io_context.
//
// usage: example_async_asio [SHARDS=200] [HOSTS]
//   HOSTS: "host:port[,host:port...][/chroot]", else $ZOOKEEPER_HOSTS, else 127.0.0.1:2181.
// async_lock(m, token) below makes m.async_lock an Asio asynchronous operation: any completion
// token works (asio::use_awaitable here), the completion runs on the handler's executor (zklock
// posts it there), the pending acquire counts as work of the io_context, and Asio's cancellation
// stops it. Two threads run one io_context; every coroutine is spawned on one strand, so what they
// share needs no mutex. SHARDS coroutines each lock a path of their own and hold it until all are
// held; 8 take turns on one shared path; one gives up, when a timer wins, on a lock it holds.
// Exits 1 if a lock was granted twice or never, the shared path had two holders at once, an update
// was lost, a coroutine resumed off the strand, the timer lost, or a contender node was left.
#include <unistd.h>

// Debian 12's Asio (1.22) turns co_await on for clang only with the old Coroutines TS; clang++ >= 17
// has C++20's coroutines (<coroutine>), which that Asio uses once told. Newer Asio finds them itself.
#if defined(__clang__) && !defined(ASIO_HAS_CO_AWAIT)
#define ASIO_HAS_CO_AWAIT 1
#endif
#include <asio.hpp>  // standalone Asio (no Boost): libasio-dev
#include <asio/experimental/awaitable_operators.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <stop_token>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
import zklock;  // after the standard headers (and Asio's)

namespace {

using namespace std::chrono_literals;

/// Starts an acquire of `m` (any zklock lock with async_lock: a mutex, a shared mutex's writer side)
/// as an Asio asynchronous operation completing with void(std::error_code, zklock::lock_hold).
/// With asio::use_awaitable: `zklock::lock_hold h = co_await async_lock(m, asio::use_awaitable);`,
/// which throws std::system_error with zklock's code (errc::cancelled if Asio cancelled it, ...).
/// The completion runs on the handler's associated executor (a coroutine's: its strand).
template <class Lock, class CompletionToken>
auto async_lock(Lock& m, CompletionToken&& token) {
  return asio::async_initiate<CompletionToken, void(std::error_code, zklock::lock_hold)>(
      [&m](auto handler) {
        // zklock's executor posts the completion to the handler's executor. That executor, kept
        // with outstanding work tracked until then, keeps io_context::run() from returning while
        // the acquire waits on the server (Asio sees no I/O of its own here).
        auto work = asio::prefer(asio::get_associated_executor(handler), asio::execution::outstanding_work.tracked);
        zklock::executor on_handler_executor = [work](std::function<void()> f) { asio::post(work, std::move(f)); };

        // Asio's per-operation cancellation (a timer that won a ||, a parallel group) stops the
        // acquire: zklock then deletes its contender node and completes with errc::cancelled.
        zklock::wait_context wc;
        if (auto slot = asio::get_associated_cancellation_slot(handler); slot.is_connected()) {
          std::stop_source stop;
          wc.stop = stop.get_token();
          slot.assign([stop](asio::cancellation_type) mutable { stop.request_stop(); });
        }

        m.async_lock(
            wc,
            [handler = std::move(handler)](std::error_code ec, zklock::lock_hold h) mutable {
              // Runs on the handler's executor already, so the handler is called directly.
              asio::get_associated_cancellation_slot(handler).clear();
              std::move(handler)(ec, std::move(h));
            },
            std::move(on_handler_executor));
      },
      token);
}

using strand = asio::strand<asio::io_context::executor_type>;

// What the coroutines share: touched only on the strand, so with no mutex.
struct tally {
  strand on;
  std::vector<int> shard_grants;  // per shard: grants seen (each must end at 1)
  int shards_held = 0;            // shard locks held right now
  int most_shards_held = 0;
  asio::steady_timer all_held;    // the shards wait on it; cancelled when the last one is granted
  int shared_inside = 0;          // holders of the shared path right now (never more than 1)
  int shared_grants = 0;
  long counter = 0;               // read and written around a suspension, under the shared lock
  std::int64_t last_token = 0;    // the shared lock's fencing tokens grow in grant order
  int finished = 0;               // coroutines ended
  std::vector<std::string> errors;

  tally(strand s, int shards) : on{s}, shard_grants(static_cast<std::size_t>(shards)), all_held{s, 30s} {}
  void check(bool ok, const char* what) {
    if (!ok) errors.emplace_back(what);
  }
  /// Checks that the caller runs on the strand (after a co_await of zklock's completion).
  void check_on_strand() { check(on.running_in_this_thread(), "a coroutine resumed off its strand"); }
};

// Locks its own path, holds it until every shard holds its own, then lets go.
asio::awaitable<void> shard(zklock::mutex& m, std::size_t i, tally& t) {
  zklock::lock_hold h = co_await async_lock(m, asio::use_awaitable);
  t.check_on_strand();
  ++t.shard_grants[i];
  t.most_shards_held = std::max(t.most_shards_held, ++t.shards_held);
  if (t.shards_held == static_cast<int>(t.shard_grants.size())) {
    t.all_held.cancel();  // the last one in opens the gate
  } else {
    std::error_code cancelled;
    co_await t.all_held.async_wait(asio::redirect_error(asio::use_awaitable, cancelled));
  }
  t.check(h.still_owned(), "a shard lock was lost while held");
  --t.shards_held;
}  // h released here

// Takes its turns on the shared path, with a suspension between reading and writing the counter.
asio::awaitable<void> take_turns(zklock::mutex& m, int rounds, tally& t) {
  asio::steady_timer work{t.on};
  for (int r = 0; r < rounds; ++r) {
    zklock::lock_hold h = co_await async_lock(m, asio::use_awaitable);
    t.check_on_strand();
    ++t.shared_grants;
    t.check(++t.shared_inside == 1, "two holders of the shared path at once");
    t.check(h.fencing_token() > t.last_token, "a fencing token went backwards");
    t.last_token = h.fencing_token();
    const long seen = t.counter;
    work.expires_after(2ms);
    co_await work.async_wait(asio::use_awaitable);  // slow work: the other coroutines run meanwhile
    t.counter = seen + 1;
    --t.shared_inside;
  }
}

// While holding `m`, races a second acquire of it against a timer: the acquire cannot be granted
// (our own hold is ahead of it), so the timer wins and Asio cancels the acquire. The || returns
// only once both have completed: the cancelled acquire completed too.
asio::awaitable<void> give_up(zklock::mutex& m, tally& t) {
  using namespace asio::experimental::awaitable_operators;
  zklock::lock_hold h = co_await async_lock(m, asio::use_awaitable);
  t.check_on_strand();
  asio::steady_timer timer{t.on, 200ms};
  auto first = co_await (async_lock(m, asio::use_awaitable) || timer.async_wait(asio::use_awaitable));
  t.check(first.index() == 1, "a lock we hold was granted again before the timer");
}

}  // namespace

int main(int argc, char** argv) try {
  const int shards = argc > 1 ? std::max(1, std::atoi(argv[1])) : 200;
  const char* env = std::getenv("ZOOKEEPER_HOSTS");
  const std::string hosts = argc > 2 ? argv[2] : env && *env ? env : "127.0.0.1:2181";
  const std::string base = "/zklock-examples/async-asio-" + std::to_string(::getpid());
  constexpr int turn_takers = 8, rounds = 3;
  const int coroutines = shards + turn_takers + 1;

  asio::io_context io;  // first: outlives the session, the locks and every hold
  zklock::session_options o;
  o.connect = hosts;
  o.background_release = true;  // a release sends its delete and returns: the loop never waits for it
  zklock::session s{o};
  std::deque<zklock::mutex> shard_locks;
  for (int i = 0; i < shards; ++i) shard_locks.emplace_back(s, base + "/shard-" + std::to_string(i));
  zklock::mutex shared{s, base + "/shared"};
  zklock::mutex gate{s, base + "/give-up"};

  tally t{asio::make_strand(io), shards};
  asio::steady_timer watchdog{io, 60s};  // a lost completion must fail the run, not hang it
  watchdog.async_wait([&](std::error_code ec) {
    if (ec) return;  // cancelled: every coroutine ended
    std::fprintf(stderr, "example_async_asio: coroutines still running after 60 s\n");
    std::_Exit(1);  // unwinding would destroy what the pending completions refer to
  });

  // Spawned on the strand, a coroutine has the strand as its executor, so async_lock hands zklock
  // the strand: every grant resumes its coroutine there. The completion handler runs there too.
  auto spawn = [&](asio::awaitable<void> a) {
    asio::co_spawn(t.on, std::move(a), [&](std::exception_ptr e) {
      try {
        if (e) std::rethrow_exception(e);
      } catch (const std::exception& x) {
        t.errors.push_back(std::string{"a coroutine failed: "} + x.what());
      }
      if (++t.finished == coroutines) watchdog.cancel();
    });
  };
  for (std::size_t i = 0; i < shard_locks.size(); ++i) spawn(shard(shard_locks[i], i, t));
  for (int i = 0; i < turn_takers; ++i) spawn(take_turns(shared, rounds, t));
  spawn(give_up(gate, t));

  const auto start = std::chrono::steady_clock::now();
  std::jthread helper{[&io] { io.run(); }};  // two threads run the loop, as a server's would
  io.run();
  helper.join();
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;

  // Every hold is released and the cancelled contender deleted: nothing queues under `base`.
  s.flush();  // the deletes sent by background releases are served by now
  const auto left = zklock::locks_below(s, base);
  t.check(!left || left->empty(), "contender nodes were left on the server");
  t.check(std::all_of(t.shard_grants.begin(), t.shard_grants.end(), [](int n) { return n == 1; }),
          "a shard lock was granted twice, or never");
  t.check(t.most_shards_held == shards, "the shard locks were not all held at once");
  t.check(t.shared_grants == turn_takers * rounds, "a turn on the shared path was granted twice, or never");
  t.check(t.counter == turn_takers * rounds, "an update under the shared lock was lost");
  for (const auto& e : t.errors) std::fprintf(stderr, "example_async_asio: %s\n", e.c_str());
  if (!t.errors.empty()) return 1;
  std::printf("async_asio: %d coroutines on one strand, two threads: %d shard locks held at once, "
              "%d turns on one shared path, a timer beat an acquire; %.2f s\n",
              coroutines, shards, t.shared_grants, took.count());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "example_async_asio: %s\n", e.what());
  return 1;
}
