// SPDX-License-Identifier: Apache-2.0
// Revocation (revoke(), on_revoke, revocation_token()) against the real server: a holder asked to
// let go hears it (notify) and releases; one that ignores the request, or hears it and keeps
// holding, is forced after the grace period and told by its loss signal; `release` ends the hold
// at once; every holder of a read side and of a semaphore, one named node, the asynchronous holds;
// a request to a holder that is already gone; a request made before the token was asked for.
#include <chrono>
#include <condition_variable>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <system_error>
#include <utility>
#include <vector>
#include "expect_error.hpp"
#include "stop_probe.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zklock::revoke_outcome;

using fired = zkt::stop_probe;

std::string outcomes(const std::vector<zklock::revoked>& r) {
  std::string out;
  for (const auto& e : r) out += std::string{out.empty() ? "" : ","} + zklock::to_string(e.outcome);
  return out;
}

// notify (the default): the holder hears the request and lets go within the grace period.
TEST(Revocation, ANotifiedHolderLetsGo) {
  const auto path = zkt::unique_path("revoke-notify");
  zklock::session holder{zkt::options()}, revoker{zkt::options()};
  zklock::owner_mutex m{holder, path};  // the object's hold: released from the session's thread below
  m.lock();
  const auto node = m.fence().node.substr(path.size() + 1);
  fired lost{m.lost_token()};
  std::stop_callback let_go{m.revocation_token(), [&] { m.unlock(); }};
  const auto r = zklock::revoke(revoker, path, {.grace = 30s});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].node, node);
  EXPECT_EQ(r[0].outcome, revoke_outcome::released);
  EXPECT_FALSE(lost.wait(0ms)) << "its own release is no loss";
  EXPECT_TRUE(zkt::children(path).empty());
}

// A holder that ignores requests, and one that hears but keeps holding: both forced after the
// grace period, and told by their loss signal.
TEST(Revocation, AHolderThatDoesNotLetGoIsForcedAfterTheGrace) {
  for (const auto policy : {zklock::on_revoke::ignore, zklock::on_revoke::notify}) {
    SCOPED_TRACE(policy == zklock::on_revoke::ignore ? "ignore" : "notify");
    const auto path = zkt::unique_path("revoke-force");
    zklock::session holder{zkt::options()}, revoker{zkt::options()};
    zklock::mutex m{holder, path};
    m.set_on_revoke(policy);
    m.lock();
    fired lost{m.lost_token()};
    fired asked{m.revocation_token()};
    const auto r = zklock::revoke(revoker, path, {.grace = 300ms});
    EXPECT_EQ(outcomes(r), "forced");
    EXPECT_TRUE(lost.wait(10s)) << "a forced holder is told";
    EXPECT_EQ(asked.wait(policy == zklock::on_revoke::ignore ? 0ms : 10s), policy == zklock::on_revoke::notify);
    EXPECT_FALSE(m.still_owned());
    std::error_code ec;
    m.unlock(ec);
    EXPECT_FALSE(ec) << ec.message();
    EXPECT_TRUE(zkt::children(path).empty());
  }
}

// release: zklock ends the hold at once (nobody asked for a token: it watches its node from the
// grant); the owner is told by both signals; the next waiter is granted.
TEST(Revocation, ReleaseEndsTheHoldAtOnce) {
  const auto path = zkt::unique_path("revoke-release");
  zklock::session holder{zkt::options()}, revoker{zkt::options()}, other{zkt::options()};
  zklock::mutex m{holder, path};
  m.set_on_revoke(zklock::on_revoke::release);
  m.lock();
  zklock::mutex next{other, path};
  auto waiting = std::async(std::launch::async, [&] { return next.try_lock_for(30s); });
  const auto r = zklock::revoke(revoker, path, {.grace = 30s});
  EXPECT_EQ(outcomes(r), "released");
  EXPECT_TRUE(waiting.get());
  EXPECT_TRUE(fired{m.lost_token()}.wait(10s));
  EXPECT_TRUE(fired{m.revocation_token()}.wait(10s));
  m.unlock();
  next.unlock();
}

// Every holder of the read side, every lease of a semaphore, or one named node; the waiters are
// not asked.
TEST(Revocation, EveryHolderOfAReadSideAndOfASemaphoreOrOneNode) {
  const auto base = zkt::unique_path("revoke-many");
  zklock::session a{zkt::options()}, b{zkt::options()}, c{zkt::options()}, revoker{zkt::options()};
  {
    zklock::shared_mutex ra{a, base + "-rw"}, rb{b, base + "-rw"};
    zklock::basic_shared_mutex<zklock::owner_policies> w{c, base + "-rw"};  // locked on another thread
    ra.set_on_revoke(zklock::on_revoke::release);
    rb.set_on_revoke(zklock::on_revoke::release);
    ra.lock_shared();
    rb.lock_shared();
    auto writer = std::async(std::launch::async, [&] { return w.try_lock_for(30s); });
    const auto r = zklock::revoke(revoker, base + "-rw", {.grace = 30s});
    EXPECT_EQ(outcomes(r), "released,released");
    EXPECT_TRUE(writer.get()) << "the waiting writer was not granted";
    w.set_on_revoke(zklock::on_revoke::release);  // for its next hold: the write side
    w.unlock();
    w.lock();
    EXPECT_EQ(outcomes(zklock::revoke(revoker, base + "-rw", {.grace = 30s})), "released");
    EXPECT_TRUE(fired{w.lost_token()}.wait(10s));
    w.unlock();
    ra.unlock_shared();
    rb.unlock_shared();
  }
  {
    zklock::counting_semaphore sa{a, base + "-sem", 2}, sb{b, base + "-sem", 2};
    sa.set_on_revoke(zklock::on_revoke::release);
    sa.acquire();
    sb.acquire();  // notify: keeps it
    const auto keep = sb.fence().node.substr(base.size() + 5);
    const auto one = zklock::revoke(revoker, base + "-sem", {.node = sa.fence().node.substr(base.size() + 5)});
    EXPECT_EQ(outcomes(one), "released");
    EXPECT_TRUE(sb.still_owned()) << "a named revocation reached another lease";
    const auto all = zklock::revoke(revoker, base + "-sem", {.grace = 0ms});
    ASSERT_EQ(all.size(), 1u);
    EXPECT_EQ(all[0].node, keep);
    EXPECT_EQ(all[0].outcome, revoke_outcome::forced);
    sa.release();
    sb.release();
  }
}

// The asynchronous holds: a lock_hold's revocation_token().
TEST(Revocation, ALockHoldHearsTheRequest) {
  const auto path = zkt::unique_path("revoke-async");
  zklock::session holder{zkt::options()}, revoker{zkt::options()};
  zklock::mutex m{holder, path};
  std::promise<std::pair<std::error_code, zklock::lock_hold>> p;
  m.async_lock([&](std::error_code ec, zklock::lock_hold h) { p.set_value({ec, std::move(h)}); });
  auto [ec, h] = p.get_future().get();
  ASSERT_FALSE(ec) << ec.message();
  fired asked{h.revocation_token()};
  auto r = std::async(std::launch::async, [&] { return zklock::revoke(revoker, path, {.grace = 30s}); });
  ASSERT_TRUE(asked.wait(30s));
  h.unlock();
  EXPECT_EQ(outcomes(r.get()), "released");
}

// A request made before the holder asks for its token is seen when it does (the watch's reply
// carries the node's data); `zklock ls` (contenders()) shows it pending. A holder already gone is
// reported gone; without force a holder that keeps the lock is reported still held.
TEST(Revocation, PendingRequestsAndHoldersAlreadyGone) {
  const auto path = zkt::unique_path("revoke-pending");
  zklock::session holder{zkt::options()}, revoker{zkt::options()};
  zklock::mutex m{holder, path};
  m.lock();
  const auto node = m.fence().node.substr(path.size() + 1);
  const auto r = zklock::revoke(revoker, path, {.grace = 0ms, .force = false});
  EXPECT_EQ(outcomes(r), "still held");
  const auto q = zklock::contenders(revoker, path);
  ASSERT_EQ(q.size(), 1u);
  EXPECT_TRUE(q[0].revocation_requested);
  EXPECT_TRUE(fired{m.revocation_token()}.wait(10s)) << "the request made before was not seen";
  m.unlock();
  const auto gone = zklock::revoke(revoker, path, {.node = node});
  EXPECT_EQ(outcomes(gone), "gone");
  EXPECT_TRUE(zklock::revoke(revoker, path).empty());  // nobody holds
  EXPECT_THROW(zklock::revoke(revoker, path, {.grace = -1ms}), std::invalid_argument);
  EXPECT_THROW(zklock::revoke(revoker, path, {.node = "a/b"}), std::invalid_argument);
  EXPECT_THROW(zklock::revoke(revoker, "relative"), std::invalid_argument);
}

// A holder whose session the server ended: its node went with it, so it is reported gone.
TEST(Revocation, AHolderWhoseSessionIsGone) {
  const auto path = zkt::unique_path("revoke-expired");
  auto o = zkt::options();
  o.reestablish_after_expiry = false;
  zklock::session holder{o}, revoker{zkt::options()};
  zklock::mutex m{holder, path};
  m.lock();
  const auto node = m.fence().node.substr(path.size() + 1);
  ASSERT_TRUE(zkt::expire(holder));
  EXPECT_EQ(outcomes(zklock::revoke(revoker, path, {.node = node})), "gone");
  m.unlock();
}

}  // namespace
