// SPDX-License-Identifier: Apache-2.0
// A deletion grants a waiter only when what it saw proves its turn. A waiter watches the nearest
// contenders ahead and, when one is deleted, may take the lock without listing the queue again, but
// only if the deletions it counted prove that nobody it waits for is left. Each test builds a
// queue where a deletion ahead of a waiter is NOT its turn (someone ahead still holds) and asserts
// that the waiter's timed try runs out: it must not be granted while the holder holds. The holder
// lets go only after that try returned, so a wrong grant cannot hide behind a late release. A
// waiter with time left is then granted in its turn. A grant that trusted any deletion of a watched
// contender fails every one of these tests; one that trusted the deletion of the contender just
// ahead fails all but the crash.
//
// Sessions end here by close(): to every other contender an expiry, a crash and a close look the
// same (the server deletes the session's ephemeral nodes, and its watchers see the deletions), and
// close() ends it at a known moment. The chaos and fault-injection suites expire and kill for real.
#include <chrono>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

/// A contender on a session of its own, on a thread: `attempt(session, holding)` tries to take a
/// lock and calls holding(true) once granted (which blocks until let_go(); then it releases) or
/// holding(false) when its try ran out. An exception from the attempt counts as not granted.
class contender {
 public:
  using holding = std::function<void(bool)>;
  using attempt_fn = std::function<void(zklock::session&, const holding&)>;
  explicit contender(attempt_fn attempt) {
    thread_ = std::jthread([this, attempt = std::move(attempt)] {
      bool reported = false;
      const holding report = [&](bool granted) {
        reported = true;
        result_.set_value(granted);
        if (granted) go_.wait();
      };
      try {
        attempt(*s_, report);
      } catch (const std::exception&) {
        if (!reported) result_.set_value(false);
      }
    });
  }
  ~contender() { let_go(); }
  contender(const contender&) = delete;
  contender& operator=(const contender&) = delete;

  /// Returns: whether the attempt was granted (waits for its outcome).
  bool granted() { return outcome_.get(); }
  /// Returns: whether the attempt has an outcome already.
  bool decided() const { return outcome_.wait_for(0s) == std::future_status::ready; }
  /// Effects: a granted attempt releases now.
  void let_go() {
    std::call_once(once_, [&] { let_go_.set_value(); });
  }
  /// Returns: the contender's session.
  zklock::session& session() { return *s_; }

 private:
  std::unique_ptr<zklock::session> s_ = std::make_unique<zklock::session>(zkt::options());
  std::promise<bool> result_;
  std::shared_future<bool> outcome_ = result_.get_future().share();
  std::promise<void> let_go_;
  std::shared_future<void> go_ = let_go_.get_future().share();
  std::once_flag once_;
  std::jthread thread_;  // last: joined before the rest goes
};

using clock_type = std::chrono::steady_clock;

/// Returns: a deadline `d` from now.
clock_type::time_point in(clock_type::duration d) { return clock_type::now() + d; }

/// The attempts: a try of one side of a lock until a deadline, released once let go.
template <class Mutex>
contender::attempt_fn exclusive_until(const std::string& path, clock_type::time_point until) {
  return [path, until](zklock::session& s, const contender::holding& h) {
    Mutex m{s, path};
    const bool ok = m.try_lock_until(until);
    h(ok);
    if (ok) m.unlock();
  };
}
template <class SharedMutex>
contender::attempt_fn shared_until(const std::string& path, clock_type::time_point until) {
  return [path, until](zklock::session& s, const contender::holding& h) {
    SharedMutex m{s, path};
    const bool ok = m.try_lock_shared_until(until);
    h(ok);
    if (ok) m.unlock_shared();
  };
}
template <class Semaphore>
contender::attempt_fn lease_until(const std::string& path, std::ptrdiff_t leases, clock_type::time_point until) {
  return [path, leases, until](zklock::session& s, const contender::holding& h) {
    Semaphore sem{s, path, leases};
    const bool ok = sem.try_acquire_until(until);
    h(ok);
    if (ok) sem.release();
  };
}

/// How long a waiter that must not be granted keeps trying after the deletion ahead of it (a wrong
/// grant follows the deletion event within milliseconds).
constexpr auto kTrustWindow = 1s;
/// The deadline of contenders that wait for their turn.
constexpr auto kLong = 30s;


template <class C>
class GrantOnDeletion : public ::testing::Test {};
// The fast path is the predecessor strategy's; zkt::combos runs it with the condition variable.
using predecessor_combos = ::testing::Types<zkt::combo<zklock::watch_predecessor, zklock::wake_latch>>;
TYPED_TEST_SUITE(GrantOnDeletion, predecessor_combos);

// [H, A, B, D]: A times out while H holds. B, watching H and A, sees A go: no proof (H is left).
// D waits on; once H releases, D is granted.
TYPED_TEST(GrantOnDeletion, AWaiterAheadTimingOutIsNoTurn) {
  using mutex = typename TypeParam::mutex;
  const auto path = zkt::unique_path("grant-timeout-ahead");
  zklock::session hs{zkt::options()};
  mutex holder{hs, path};
  holder.lock();
  const auto a_gives_up = in(1s);
  contender a{exclusive_until<mutex>(path, a_gives_up)};
  ASSERT_TRUE(zkt::await_children(path, 2));
  contender b{exclusive_until<mutex>(path, a_gives_up + kTrustWindow)};
  ASSERT_TRUE(zkt::await_children(path, 3));
  contender d{exclusive_until<mutex>(path, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 4));
  ASSERT_LT(clock_type::now(), a_gives_up) << "the queue took too long to build";
  EXPECT_FALSE(a.granted());
  EXPECT_FALSE(b.granted()) << "granted while the holder held: A's timeout is not B's turn";
  EXPECT_FALSE(d.decided());
  holder.unlock();
  EXPECT_TRUE(d.granted());
  d.let_go();
}

// [H, A, B]: A's session ends while H holds (its node goes with it). B must not be granted.
TYPED_TEST(GrantOnDeletion, AWaiterAheadWhoseSessionEndsIsNoTurn) {
  using mutex = typename TypeParam::mutex;
  const auto path = zkt::unique_path("grant-expiry-ahead");
  zklock::session hs{zkt::options()};
  mutex holder{hs, path};
  holder.lock();
  contender a{exclusive_until<mutex>(path, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 2));
  const auto b_gives_up = in(1s + kTrustWindow);
  contender b{exclusive_until<mutex>(path, b_gives_up)};
  ASSERT_TRUE(zkt::await_children(path, 3));
  a.session().close();  // its node goes with the session, as in an expiry
  ASSERT_LT(clock_type::now() + kTrustWindow, b_gives_up) << "the expiry took too long";
  EXPECT_FALSE(b.granted()) << "granted while the holder held: the end of A's session is not B's turn";
  holder.unlock();
}

// [H, A, B]: the holder crashes (its session ends without a release). A is granted; B, behind A,
// must not be granted while A holds.
TYPED_TEST(GrantOnDeletion, AHolderThatCrashesHandsOverToTheNextOnly) {
  using mutex = typename TypeParam::mutex;
  const auto path = zkt::unique_path("grant-holder-crash");
  contender h{exclusive_until<mutex>(path, in(kLong))};
  ASSERT_TRUE(h.granted());
  contender a{exclusive_until<mutex>(path, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 2));
  const auto b_gives_up = in(1s + kTrustWindow);
  contender b{exclusive_until<mutex>(path, b_gives_up)};
  ASSERT_TRUE(zkt::await_children(path, 3));
  h.session().close();  // no unlock: the node goes with the session, as in a crash
  EXPECT_TRUE(a.granted());
  ASSERT_LT(clock_type::now() + kTrustWindow, b_gives_up) << "the hand-over took too long";
  EXPECT_FALSE(b.granted()) << "granted while A held";
  a.let_go();
}

// [H, A1, A2, B]: both waiters between H and B give up at once. B sees both its watched nodes go,
// but H (unwatched) still holds.
TYPED_TEST(GrantOnDeletion, TwoWaitersAheadLeavingAtOnceIsNoTurn) {
  using mutex = typename TypeParam::mutex;
  const auto path = zkt::unique_path("grant-two-leave");
  zklock::session hs{zkt::options()};
  mutex holder{hs, path};
  holder.lock();
  const auto leave = in(1s);
  contender a1{exclusive_until<mutex>(path, leave)};
  ASSERT_TRUE(zkt::await_children(path, 2));
  contender a2{exclusive_until<mutex>(path, leave)};
  ASSERT_TRUE(zkt::await_children(path, 3));
  contender b{exclusive_until<mutex>(path, leave + kTrustWindow)};
  ASSERT_TRUE(zkt::await_children(path, 4));
  ASSERT_LT(clock_type::now(), leave) << "the queue took too long to build";
  EXPECT_FALSE(a1.granted());
  EXPECT_FALSE(a2.granted());
  EXPECT_FALSE(b.granted()) << "granted while the holder held";
  holder.unlock();
}

// Readers and writers. [W0, R1, W2, R3]: W2 gives up while writer W0 holds; R3 (whose writers
// ahead are W0 and W2) must not be granted, nor R1. Then [R0, W1, R2]: W1 gives up while reader R0
// holds; R2 is granted beside R0 (readers share).
TYPED_TEST(GrantOnDeletion, AWriterAheadLeavingIsNoTurnWhileAnotherWriterHolds) {
  using shared = typename TypeParam::shared_mutex;
  const auto path = zkt::unique_path("grant-rw");
  zklock::session ws{zkt::options()};
  shared w0{ws, path};
  w0.lock();
  contender r1{shared_until<shared>(path, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 2));
  const auto w2_leaves = in(1s);
  contender w2{exclusive_until<shared>(path, w2_leaves)};
  ASSERT_TRUE(zkt::await_children(path, 3));
  contender r3{shared_until<shared>(path, w2_leaves + kTrustWindow)};
  ASSERT_TRUE(zkt::await_children(path, 4));
  ASSERT_LT(clock_type::now(), w2_leaves) << "the queue took too long to build";
  EXPECT_FALSE(w2.granted());
  EXPECT_FALSE(r3.granted()) << "granted while writer W0 held";
  EXPECT_FALSE(r1.decided());
  w0.unlock();
  EXPECT_TRUE(r1.granted());

  // R1 holds now (a reader). A writer gives up behind it; a reader behind that writer joins R1.
  const auto w_leaves = in(1s);
  contender w{exclusive_until<shared>(path, w_leaves)};
  ASSERT_TRUE(zkt::await_children(path, 2));
  contender r{shared_until<shared>(path, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 3));
  EXPECT_FALSE(w.granted());
  EXPECT_TRUE(r.granted()) << "a reader behind a writer that left shares with the reader that holds";
  r.let_go();
  r1.let_go();
}

// Semaphore of 2 leases: [H0, H1, S2, S3, S4]. H1 returns its lease first (out of order): S2 is
// granted; S3 must not be (H0 and S2 hold). Once H0 returns its lease, S4 is granted.
TYPED_TEST(GrantOnDeletion, SemaphoreLeasesReturnedOutOfOrderGrantOnlyByCount) {
  using semaphore = typename TypeParam::semaphore;
  const auto path = zkt::unique_path("grant-sem");
  contender h0{lease_until<semaphore>(path, 2, in(kLong))};
  ASSERT_TRUE(h0.granted());
  contender h1{lease_until<semaphore>(path, 2, in(kLong))};
  ASSERT_TRUE(h1.granted());
  contender s2{lease_until<semaphore>(path, 2, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 3));
  const auto s3_gives_up = in(1s + kTrustWindow);
  contender s3{lease_until<semaphore>(path, 2, s3_gives_up)};
  ASSERT_TRUE(zkt::await_children(path, 4));
  contender s4{lease_until<semaphore>(path, 2, in(kLong))};
  ASSERT_TRUE(zkt::await_children(path, 5));
  h1.let_go();
  EXPECT_TRUE(s2.granted());
  ASSERT_LT(clock_type::now() + kTrustWindow, s3_gives_up) << "the hand-over took too long";
  EXPECT_FALSE(s3.granted()) << "a third lease: H0 and S2 held";
  EXPECT_FALSE(s4.decided());
  h0.let_go();
  EXPECT_TRUE(s4.granted());
  s4.let_go();
  s2.let_go();
}

}  // namespace
