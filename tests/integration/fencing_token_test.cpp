// SPDX-License-Identifier: Apache-2.0
// Fencing tokens: the holder's node's creation zxid, strictly increasing across successive holders
// (mutex and the write side of a read/write lock), refused when not held — for every watch
// strategy x wake-up combination; the tokens of read holds and semaphore leases.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

using zkt::combos;

template <class C>
class FencingToken : public ::testing::Test {};
TYPED_TEST_SUITE(FencingToken, combos);

/// Returns: the czxid of the only child of `path` owned by `s` whose name contains `marker` (0 if
/// there is not exactly one).
std::int64_t czxid_of(const std::string& path, const zklock::session& s, const std::string& marker = "") {
  std::vector<std::int64_t> found;
  for (const auto& k : zkt::children(path)) {
    if (k.find(marker) == std::string::npos) continue;
    const auto node = zkt::stat_node(path + "/" + k);
    if (node.exists && node.ephemeral_owner == s.id()) found.push_back(node.czxid);
  }
  return found.size() == 1 ? found.front() : 0;
}

using zkt::code_of;

// 20 acquisitions in turn over 5 sessions: every token is the node's czxid and larger than the last.
TYPED_TEST(FencingToken, IncreasesAcrossHoldersInTurn) {
  const auto path = zkt::unique_path("fence-turn");
  auto sessions = zkt::open_sessions(5);
  std::vector<std::unique_ptr<typename TypeParam::mutex>> locks;
  for (auto& s : sessions) locks.push_back(std::make_unique<typename TypeParam::mutex>(*s, path));
  std::int64_t last = 0;
  for (std::size_t i = 0; i < 20; ++i) {
    auto& m = *locks[i % locks.size()];
    std::lock_guard g{m};
    const std::int64_t token = m.fencing_token();
    EXPECT_GT(token, last) << "acquisition " << i;
    EXPECT_EQ(token, czxid_of(path, *sessions[i % sessions.size()])) << "acquisition " << i;
    EXPECT_EQ(m.fencing_token(), token) << "a hold's token does not change";
    last = token;
  }
}

// Contending threads (own sessions and objects): tokens increase in the order the lock was granted.
TYPED_TEST(FencingToken, IncreasesInGrantOrderUnderContention) {
  const auto path = zkt::unique_path("fence-contended");
  constexpr int threads = 4, rounds = 5;
  auto sessions = zkt::open_sessions(threads);
  std::mutex mu;
  std::vector<std::int64_t> tokens;  // in grant order
  int mismatches = 0;
  {
    std::vector<std::jthread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        typename TypeParam::mutex m{*sessions[static_cast<std::size_t>(t)], path};
        for (int i = 0; i < rounds; ++i) {
          std::lock_guard g{m};
          const std::int64_t token = m.fencing_token();
          const std::int64_t czxid = czxid_of(path, *sessions[static_cast<std::size_t>(t)]);
          std::lock_guard lk{mu};
          tokens.push_back(token);
          if (token != czxid) ++mismatches;
        }
      });
  }
  ASSERT_EQ(tokens.size(), static_cast<std::size_t>(threads * rounds));
  EXPECT_EQ(mismatches, 0);
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_GT(tokens[i], tokens[i - 1]) << "grant " << i;
}

// Write holders of a read/write lock, with readers in between: the same guarantee.
TYPED_TEST(FencingToken, IncreasesAcrossSharedMutexWriters) {
  const auto path = zkt::unique_path("fence-rw");
  auto sessions = zkt::open_sessions(3);
  std::vector<std::unique_ptr<typename TypeParam::shared_mutex>> locks;
  for (auto& s : sessions) locks.push_back(std::make_unique<typename TypeParam::shared_mutex>(*s, path));
  std::int64_t last = 0;
  for (std::size_t i = 0; i < 12; ++i) {
    auto& w = *locks[i % locks.size()];
    auto& r = *locks[(i + 1) % locks.size()];
    {
      std::shared_lock g{r};  // a reader between writers: its node must not count as a token
    }
    std::unique_lock g{w};
    const std::int64_t token = w.fencing_token();
    EXPECT_GT(token, last) << "write hold " << i;
    EXPECT_EQ(token, czxid_of(path, *sessions[i % sessions.size()], "__WRIT__")) << "write hold " << i;
    last = token;
  }
}

// Without a hold: errc::not_held — before locking, after unlocking, on a read-only hold of a
// read/write lock, and on a thread that does not hold the (per-thread) lock.
TEST(FencingTokenNotHeld, Throws) {
  const auto path = zkt::unique_path("fence-not-held");
  zklock::session s{zkt::options()};
  const auto not_held = std::error_code{zklock::errc::not_held};

  zklock::mutex m{s, path};
  EXPECT_EQ(code_of([&] { (void)m.fencing_token(); }), not_held);
  m.lock();
  EXPECT_EQ(code_of([&] { (void)m.fencing_token(); }), std::error_code{});
  std::thread([&] { EXPECT_EQ(code_of([&] { (void)m.fencing_token(); }), not_held); }).join();
  m.unlock();
  EXPECT_EQ(code_of([&] { (void)m.fencing_token(); }), not_held);

  const auto rw_path = zkt::unique_path("fence-not-held-rw");
  zklock::shared_mutex rw{s, rw_path};
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token(); }), not_held);
  rw.lock_shared();
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token(); }), not_held);
  rw.unlock_shared();
  rw.lock();
  EXPECT_EQ(rw.fencing_token(), czxid_of(rw_path, s));
  rw.unlock();
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token(); }), not_held);
}

// A read hold's token is its read node's czxid (the write node's after a downgrade); a writer
// after it gets a larger one. Refused without a read hold.
TEST(FencingTokenShared, ReadHolds) {
  const auto path = zkt::unique_path("fence-read");
  zklock::session s{zkt::options()};
  const auto not_held = std::error_code{zklock::errc::not_held};
  zklock::shared_mutex rw{s, path};
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token_shared(); }), not_held);
  rw.lock_shared();
  const std::int64_t read = rw.fencing_token_shared();
  EXPECT_EQ(read, czxid_of(path, s, "__READ__"));
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token(); }), not_held) << "a reader has no write token";
  rw.unlock_shared();
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token_shared(); }), not_held);

  rw.lock();
  const std::int64_t write = rw.fencing_token();
  EXPECT_GT(write, read);
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token_shared(); }), not_held) << "a writer has no read token";
  rw.lock_shared();  // downgrade: the read hold shares the write node
  EXPECT_EQ(rw.fencing_token_shared(), write);
  rw.unlock();
  EXPECT_EQ(rw.fencing_token_shared(), write);
  rw.unlock_shared();
  EXPECT_EQ(code_of([&] { (void)rw.fencing_token_shared(); }), not_held);
}

// A semaphore's token is its most recent lease's czxid: later leases get larger ones; release()
// makes the earlier lease's token current again. Refused without a lease.
TEST(FencingTokenShared, SemaphoreLeases) {
  const auto path = zkt::unique_path("fence-sem");
  zklock::session s{zkt::options()};
  const auto not_held = std::error_code{zklock::errc::not_held};
  zklock::counting_semaphore sem{s, path, 2};
  EXPECT_EQ(code_of([&] { (void)sem.fencing_token(); }), not_held);
  sem.acquire();
  const std::int64_t first = sem.fencing_token();
  EXPECT_EQ(first, czxid_of(path, s));
  sem.acquire();
  const std::int64_t second = sem.fencing_token();
  EXPECT_GT(second, first);
  sem.release();
  EXPECT_EQ(sem.fencing_token(), first);
  sem.release();
  EXPECT_EQ(code_of([&] { (void)sem.fencing_token(); }), not_held);
}

}  // namespace
