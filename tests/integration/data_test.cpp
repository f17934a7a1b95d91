// SPDX-License-Identifier: Apache-2.0
// The session's data API (create, get, exists, children, set, remove, commit) and guarded writes
// (commit_if_held with a lock's fence()), against the real server: results and stats as the
// server keeps them (checked through a raw handle), the server's refusals with their codes and
// paths, transactions all or nothing, and guarded transactions that commit only while the hold's
// node exists, for every lock kind, after a release, an expiry and a deletion by someone else.
#include <chrono>
#include <future>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>
#include <vector>
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;
using zkt::code_of;
using zkt::expect_error;
using zkt::message_of;
using zklock::errc;
using zklock::op;

/// Returns: what `f` throws as std::invalid_argument ("" if it throws none, or something else).
template <class F>
std::string invalid_argument_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  } catch (...) {
    return "(another exception)";
  }
  return "";
}

TEST(DataApi, CreateGetSetRemoveAsTheServerKeepsThem) {
  zklock::session s{zkt::options()};
  const auto root = zkt::unique_path("data-rw");
  zkt::create_path(root);
  const auto path = root + "/config";
  EXPECT_FALSE(s.get(path));
  EXPECT_FALSE(s.exists(path));
  EXPECT_EQ(s.create(path, "v1"), path);
  const auto raw = zkt::stat_node(path);
  ASSERT_TRUE(raw.exists);
  EXPECT_EQ(raw.data, "v1");
  const auto got = s.get(path);
  ASSERT_TRUE(got);
  EXPECT_EQ(got->data, "v1");
  EXPECT_EQ(got->stat.czxid, raw.czxid);
  EXPECT_EQ(got->stat.version, 0);
  EXPECT_EQ(got->stat.data_length, 2);
  EXPECT_EQ(got->stat.ephemeral_owner, 0);

  const auto st = s.set(path, "v2", 0);
  EXPECT_EQ(st.version, 1);
  EXPECT_GT(st.mzxid, raw.czxid);
  EXPECT_EQ(zkt::stat_node(path).data, "v2");
  expect_error([&] { s.set(path, "v3", 0); }, errc::bad_version, "set at a stale version");
  EXPECT_EQ(zkt::stat_node(path).data, "v2");
  const auto seen = s.exists(path);
  ASSERT_TRUE(seen);
  EXPECT_EQ(seen->version, 1);

  s.create(path + "/a");
  s.create(path + "/b", std::string(3000, 'x'));
  EXPECT_EQ(s.children(path), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(s.get(path + "/b")->data.size(), 3000u);
  EXPECT_EQ(s.exists(path)->num_children, 2);
  expect_error([&] { s.remove(path); }, errc::not_empty, "remove a node with children");
  expect_error([&] { s.remove(path + "/a", 5); }, errc::bad_version, "remove at a wrong version");
  EXPECT_TRUE(s.remove(path + "/a"));
  EXPECT_FALSE(s.remove(path + "/a"));
  EXPECT_TRUE(s.remove(path + "/b", 0));
  EXPECT_TRUE(s.remove(path, 1));
  EXPECT_FALSE(zkt::exists(path));
  EXPECT_FALSE(s.children("/").empty());  // "/" may be read
}

TEST(DataApi, RefusalsNameThePathAndCarryTheServersCode) {
  zklock::session s{zkt::options()};
  const auto root = zkt::unique_path("data-refusals");
  zkt::create_path(root);
  expect_error([&] { s.create(root); }, errc::node_exists, "create an existing node");
  expect_error([&] { s.create(root + "/missing/child"); }, errc::no_node, "create under a missing parent");
  expect_error([&] { s.set(root + "/missing", "x"); }, errc::no_node, "set a missing node");
  expect_error([&] { s.children(root + "/missing"); }, errc::no_node, "list a missing node");
  EXPECT_NE(message_of([&] { s.create(root + "/missing/child"); }).find(root + "/missing/child"), std::string::npos);
  // The same through the std::errc conditions.
  EXPECT_EQ(code_of([&] { s.create(root); }), std::errc::file_exists);
}

TEST(DataApi, SequentialAndEphemeralNodes) {
  const auto root = zkt::unique_path("data-modes");
  zkt::create_path(root);
  std::string eph, seq;
  {
    zklock::session s{zkt::options()};
    seq = s.create(root + "/job-", "a", zklock::create_mode::persistent_sequential);
    ASSERT_EQ(seq.size(), (root + "/job-").size() + 10) << seq;
    const auto seq2 = s.create(root + "/job-", "b", zklock::create_mode::persistent_sequential);
    EXPECT_LT(seq, seq2);
    eph = s.create(root + "/me", "", zklock::create_mode::ephemeral);
    EXPECT_EQ(s.exists(eph)->ephemeral_owner, s.id());
    expect_error([&] { s.create(eph + "/child"); }, errc::no_children_for_ephemerals, "child of an ephemeral");
    const auto c = s.create(root + "/box", "", zklock::create_mode::container);
    EXPECT_TRUE(zkt::exists(c));
  }
  EXPECT_FALSE(zkt::exists(eph));  // went with its session
  EXPECT_TRUE(zkt::exists(seq));
}

TEST(DataApi, BadInputIsRefusedBeforeAnythingIsSent) {
  zklock::session s{zkt::options()};
  for (const char* bad : {"", "relative", "/trailing/", "/a//b", "/a/./b", "/zookeeper/x"}) {
    EXPECT_NE(invalid_argument_of([&] { s.create(bad); }), "") << bad;
    EXPECT_NE(invalid_argument_of([&] { s.set(bad, "x"); }), "") << bad;
    EXPECT_NE(invalid_argument_of([&] { s.remove(bad); }), "") << bad;
    EXPECT_NE(invalid_argument_of([&] { s.commit({op::set(bad, "x")}); }), "") << bad;
  }
  EXPECT_NE(invalid_argument_of([&] { s.remove("/"); }), "");
  EXPECT_NE(invalid_argument_of([&] { s.get("x"); }), "");
  const auto root = zkt::unique_path("data-bad");
  EXPECT_NE(invalid_argument_of([&] {
              s.commit({op::create(root + "-a"), op::create(root + "-box", "", zklock::create_mode::container)});
            }).find("container"),
            std::string::npos);
  EXPECT_FALSE(zkt::exists(root + "-a"));  // nothing of a refused transaction was sent
  EXPECT_NE(invalid_argument_of([&] { s.commit_if_held(zklock::fence{}, {op::create(root + "-a")}); }), "");
  EXPECT_NE(invalid_argument_of([&] { s.create(root + "-big", std::string(1024 * 1024 + 1, 'x')); }), "");
  EXPECT_TRUE(s.commit({}).empty());
}

TEST(Transaction, CommitsAllOrNothing) {
  zklock::session s{zkt::options()};
  const auto root = zkt::unique_path("data-multi");
  zkt::create_path(root);
  s.create(root + "/cfg", "old");
  const auto results = s.commit({op::create(root + "/q-", "job", zklock::create_mode::persistent_sequential),
                                 op::set(root + "/cfg", "new", 0), op::check(root + "/cfg", 1),
                                 op::create(root + "/done")});
  ASSERT_EQ(results.size(), 4u);
  EXPECT_EQ(results[0].path.substr(0, (root + "/q-").size()), root + "/q-");
  EXPECT_EQ(results[0].path.size(), (root + "/q-").size() + 10);
  EXPECT_TRUE(zkt::exists(results[0].path));
  ASSERT_TRUE(results[1].stat);
  EXPECT_EQ(results[1].stat->version, 1);
  EXPECT_FALSE(results[2].stat);
  EXPECT_EQ(results[3].path, root + "/done");
  EXPECT_EQ(zkt::stat_node(root + "/cfg").data, "new");

  // The second operation fails: the first is not applied either, and the error names the second.
  std::string what;
  try {
    s.commit({op::create(root + "/never"), op::set(root + "/cfg", "newer", 0), op::remove(root + "/done")});
    ADD_FAILURE() << "a transaction with a stale version committed";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::bad_version);
    what = e.what();
  }
  EXPECT_NE(what.find("operation 2 of 3 (set " + root + "/cfg)"), std::string::npos) << what;
  EXPECT_FALSE(zkt::exists(root + "/never"));
  EXPECT_TRUE(zkt::exists(root + "/done"));
  EXPECT_EQ(zkt::stat_node(root + "/cfg").data, "new");
  expect_error([&] { s.commit({op::check(root + "/absent")}); }, errc::no_node, "check of a missing node");
  expect_error([&] { s.commit({op::remove(root + "/absent")}); }, errc::no_node, "remove of a missing node");
}

// Under a chroot the paths are the chroot's: a transaction and a guarded one report them so.
TEST(Transaction, UnderAChrootThePathsAreTheChroots) {
  const auto root = zkt::unique_path("data-chroot");
  zkt::create_path(root);
  auto o = zkt::options();
  o.connect += root;
  zklock::session s{o};
  s.create("/app");
  const auto r = s.commit({op::create("/app/q-", "x", zklock::create_mode::persistent_sequential), op::set("/app", "y")});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].path.substr(0, 7), "/app/q-");
  EXPECT_TRUE(zkt::exists(root + r[0].path));
  EXPECT_EQ(zkt::stat_node(root + "/app").data, "y");
  EXPECT_EQ(s.children("/"), (std::vector<std::string>{"app"}));
  zklock::mutex m{s, "/app/lock"};
  std::lock_guard g{m};
  EXPECT_EQ(m.fence().node.substr(0, 11), "/app/lock/_");
  s.commit_if_held(m.fence(), {op::set("/app", "z")});
  EXPECT_EQ(zkt::stat_node(root + "/app").data, "z");
}

// The mutex: a guarded write commits while held and, once released, is refused with lock_lost and
// writes nothing; the fence is the hold's node and token; without a hold there is no fence.
TEST(GuardedWrite, CommitsWhileHeldAndNothingAfterRelease) {
  zklock::session s{zkt::options()};
  const auto path = zkt::unique_path("guard-mutex");
  const auto cfg = path + "-cfg";
  s.create(cfg, "0");
  zklock::mutex m{s, path};
  expect_error([&] { (void)m.fence(); }, errc::not_held, "fence() without a hold");
  zklock::fence f;
  {
    std::lock_guard g{m};
    f = m.fence();
    EXPECT_EQ(f.token, m.fencing_token());
    EXPECT_EQ(f.node.substr(0, path.size() + 1), path + "/");
    const auto raw = zkt::stat_node(f.node);
    ASSERT_TRUE(raw.exists);
    EXPECT_EQ(raw.czxid, f.token);
    EXPECT_EQ(raw.ephemeral_owner, s.id());
    const auto r = s.commit_if_held(f, {op::set(cfg, "1"), op::create(cfg + "-log-", "1",
                                                                      zklock::create_mode::persistent_sequential)});
    ASSERT_EQ(r.size(), 2u);  // the check is not among the results
    EXPECT_EQ(r[0].stat->version, 1);
    EXPECT_TRUE(zkt::exists(r[1].path));
    EXPECT_EQ(zkt::stat_node(cfg).data, "1");
    // A refused operation of a guarded transaction keeps its own code, counted among the caller's.
    std::string what;
    try {
      s.commit_if_held(f, {op::set(cfg, "x", 0)});
    } catch (const std::system_error& e) {
      EXPECT_EQ(e.code(), errc::bad_version);
      what = e.what();
    }
    EXPECT_NE(what.find("operation 1 of 1"), std::string::npos) << what;
  }
  std::string what;
  try {
    s.commit_if_held(f, {op::set(cfg, "2")});
    ADD_FAILURE() << "a guarded write committed after the release";
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), errc::lock_lost);
    what = e.what();
  }
  EXPECT_NE(what.find(f.node), std::string::npos) << what;
  EXPECT_EQ(zkt::stat_node(cfg).data, "1");
}

// Every lock kind gives the fence of its hold: both sides of a shared mutex, a semaphore's latest
// lease, a lock_hold of an asynchronous acquire.
TEST(GuardedWrite, EveryLockKindHasAFence) {
  zklock::session s{zkt::options()};
  const auto base = zkt::unique_path("guard-kinds");
  const auto cfg = base + "-cfg";
  s.create(cfg, "0");
  auto guarded = [&](const zklock::fence& f, const std::string& v) { s.commit_if_held(f, {op::set(cfg, v)}); };
  {
    zklock::shared_mutex rw{s, base + "-rw"};
    {
      std::unique_lock w{rw};
      guarded(rw.fence(), "w");
      expect_error([&] { (void)rw.fence_shared(); }, errc::not_held, "fence_shared() of a writer");
    }
    std::shared_lock r{rw};
    const auto f = rw.fence_shared();
    EXPECT_EQ(f.token, rw.fencing_token_shared());
    guarded(f, "r");
    r.unlock();
    expect_error([&] { guarded(f, "r2"); }, errc::lock_lost, "read fence after unlock_shared");
  }
  {
    zklock::counting_semaphore sem{s, base + "-sem", 2};
    sem.acquire();
    const auto first = sem.fence();
    sem.acquire();
    const auto second = sem.fence();
    EXPECT_NE(first, second);
    EXPECT_EQ(second.token, sem.fencing_token());
    guarded(first, "s1");
    sem.release();  // the latest: `second`
    expect_error([&] { guarded(second, "s2"); }, errc::lock_lost, "lease fence after release");
    guarded(first, "s3");
    sem.release();
  }
  {
    zklock::mutex m{s, base + "-async"};
    std::promise<std::pair<std::error_code, zklock::lock_hold>> p;
    m.async_lock([&](std::error_code ec, zklock::lock_hold h) { p.set_value({ec, std::move(h)}); });
    auto [ec, h] = p.get_future().get();
    ASSERT_FALSE(ec) << ec.message();
    const auto f = h.fence();
    EXPECT_EQ(f.token, h.fencing_token());
    guarded(f, "a");
    h.unlock();
    expect_error([&] { (void)h.fence(); }, errc::not_held, "fence() of an empty lock_hold");
    expect_error([&] { guarded(f, "a2"); }, errc::lock_lost, "lock_hold fence after unlock");
  }
  EXPECT_EQ(zkt::stat_node(cfg).data, "a");
}

// A holder whose session the server expired (as for a holder paused past its session timeout)
// commits nothing once another holder has the lock, through its own session or any other; the new
// holder's guarded write stands.
TEST(GuardedWrite, AHolderWhoseSessionExpiredCommitsNothing) {
  const auto path = zkt::unique_path("guard-expired");
  const auto cfg = path + "-cfg";
  zklock::session a{zkt::options()};
  zklock::session b{zkt::options()};
  a.create(cfg, "0");
  zklock::mutex ma{a, path};
  zklock::mutex mb{b, path};
  ma.lock();
  const auto stale = ma.fence();
  const auto lost = ma.lost_token();
  ASSERT_TRUE(zkt::expire(a));
  EXPECT_TRUE(lost.stop_requested());
  ASSERT_TRUE(mb.try_lock_for(10s));
  b.commit_if_held(mb.fence(), {op::set(cfg, "b")});
  const auto code = code_of([&] { a.commit_if_held(stale, {op::set(cfg, "a")}); });
  EXPECT_TRUE(code == errc::lock_lost || code == errc::session_expired) << code.message();
  expect_error([&] { b.commit_if_held(stale, {op::set(cfg, "a")}); }, errc::lock_lost, "the stale fence via b");
  EXPECT_EQ(zkt::stat_node(cfg).data, "b");
  mb.unlock();
  ma.unlock();
}

// An operator deletes the holder's node (breaking a stuck hold): the holder's guarded write is
// refused, and nothing of it is written.
TEST(GuardedWrite, AHoldBrokenByAnotherSessionCommitsNothing) {
  const auto path = zkt::unique_path("guard-broken");
  const auto cfg = path + "-cfg";
  zklock::session holder{zkt::options()};
  zklock::session op_s{zkt::options()};
  holder.create(cfg, "0");
  zklock::mutex m{holder, path};
  std::lock_guard g{m};
  const auto f = m.fence();
  ASSERT_TRUE(op_s.remove(f.node));
  expect_error([&] { holder.commit_if_held(f, {op::set(cfg, "late"), op::create(cfg + "-x")}); }, errc::lock_lost,
               "a guarded write after the node was deleted");
  EXPECT_EQ(zkt::stat_node(cfg).data, "0");
  EXPECT_FALSE(zkt::exists(cfg + "-x"));
}

}  // namespace
