// SPDX-License-Identifier: Apache-2.0
// ACLs on lock nodes. With credentials, every node zklock creates (lock node, missing parents,
// contender nodes, semaphore nodes) gives the creator's identity all permissions and everybody
// else only READ: a stranger can watch the queue, but neither queue under the lock (NOAUTH on
// create → errc::no_auth) nor delete a holder's node (ZooKeeper checks DELETE on the parent).
// Sessions of the same digest user share the rights. Without credentials everything stays open.
// session_options::acl chooses another ACL for the nodes zklock creates (stored as given, with
// "auth" expanded to every identity of the session); a malformed one, or one that would not let
// the session read, create and delete children, is refused before anything is sent. A refusal for
// lack of permission names the node and the permission the call needed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <tuple>
#include <vector>
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

constexpr int znoauth = static_cast<int>(zklock::errc::no_auth);  // the C client's ZNOAUTH, -102

zklock::session_options as(std::string_view user) {
  auto o = zkt::options();
  if (!user.empty()) o.auth = {zklock::digest(user, "pw")};
  return o;
}

using zkt::expect_error;

/// Expects `path`'s ACL to be creator-all for digest `user` plus world-read.
void expect_private_acl(const std::string& path, std::string_view user) {
  SCOPED_TRACE("ACL of " + path);
  const auto acl = zkt::acl_of(path);
  ASSERT_TRUE(acl) << "cannot read the ACL";
  ASSERT_EQ(acl->size(), 2u);
  bool creator = false, world = false;
  for (const auto& e : *acl) {
    if (e.scheme == "digest" && e.id.starts_with(std::string{user} + ":")) creator = e.perms == zkt::perm::all;
    if (e.scheme == "world" && e.id == "anyone") world = e.perms == zkt::perm::read;
  }
  EXPECT_TRUE(creator) << "no digest " << user << " entry with every permission";
  EXPECT_TRUE(world) << "no world entry with READ only";
}

/// Expects `path`'s ACL to be open (world: all).
void expect_open_acl(const std::string& path) {
  const auto acl = zkt::acl_of(path);
  ASSERT_TRUE(acl) << path;
  ASSERT_EQ(acl->size(), 1u) << path;
  EXPECT_EQ((*acl)[0].scheme, "world");
  EXPECT_EQ((*acl)[0].id, "anyone");
  EXPECT_EQ((*acl)[0].perms, zkt::perm::all);
}

/// Effects: deletes `path` and below as `user` (the nodes of these tests are not open).
void remove_as(std::string_view user, const std::string& path) {
  zkt::raw_client c{user, "pw"};
  for (const auto& kid : zkt::children(path)) remove_as(user, path + "/" + kid);
  c.remove(path);
}

class Acl : public ::testing::Test {
 protected:
  void SetUp() override {
    // An open, persistent /zklock-test: if alice's session created it (as a container), the other
    // tests of this server could not create their nodes under it.
    zkt::create_path("/zklock-test");
  }
};

TEST_F(Acl, AStrangerCanNeitherRemoveTheHoldersNodeNorQueue) {
  const std::string base = zkt::unique_path("acl-mutex");
  const std::string path = base + "/lock";
  zklock::session alice{as("alice")};
  zklock::mutex held{alice, path};
  held.lock();
  const auto kids = zkt::children(path);  // world READ: anybody may list the queue
  ASSERT_EQ(kids.size(), 1u);
  const std::string node = path + "/" + kids[0];
  expect_private_acl(base, "alice");
  expect_private_acl(path, "alice");
  expect_private_acl(node, "alice");

  for (const std::string_view who : {"bob", ""}) {
    SCOPED_TRACE(who.empty() ? "no auth" : who);
    {  // raw, bypassing zklock
      zkt::raw_client stranger{who, "pw"};
      EXPECT_EQ(stranger.remove(node), znoauth) << "a stranger deleted the holder's node";
      EXPECT_EQ(stranger.remove(path), znoauth);  // nor the lock node (once empty)
    }
    EXPECT_TRUE(zkt::exists(node));
    EXPECT_TRUE(held.still_owned());

    zklock::session s{as(who)};
    zklock::mutex m{s, path};
    expect_error([&] { m.lock(); }, zklock::errc::no_auth, "lock()");
    expect_error([&] { (void)m.try_lock(); }, zklock::errc::no_auth, "try_lock()");
    expect_error([&] { (void)m.try_lock_for(100ms); }, zklock::errc::no_auth, "try_lock_for()");
    EXPECT_FALSE(m.owns_lock());
    EXPECT_EQ(zkt::children(path), kids) << "the refused attempt left a node";
    EXPECT_EQ(s.state(), zklock::session_state::connected) << "the session is still usable";
  }

  held.unlock();
  EXPECT_EQ(zkt::children(path), std::vector<std::string>{});
  remove_as("alice", base);
}

TEST_F(Acl, SessionsOfTheSameUserContendNormally) {
  const std::string base = zkt::unique_path("acl-shared-user");
  const std::string path = base + "/lock";
  zklock::session a1{as("alice")}, a2{as("alice")};
  zklock::mutex m1{a1, path}, m2{a2, path};

  m1.lock();
  EXPECT_FALSE(m2.try_lock()) << "no mutual exclusion between two alice sessions";
  m1.unlock();
  ASSERT_TRUE(m2.try_lock()) << "the second alice session cannot queue";
  m2.unlock();

  // Mutual exclusion under contention; every release (a delete under a node the other session
  // created) works, or the other would wait forever.
  std::atomic<int> inside{0}, overlaps{0};
  auto worker = [&](zklock::mutex& m) {
    for (int i = 0; i < 20; ++i) {
      std::lock_guard lk{m};
      if (inside.fetch_add(1) != 0) ++overlaps;
      std::this_thread::yield();
      inside.fetch_sub(1);
    }
  };
  std::thread t1{[&] { worker(m1); }}, t2{[&] { worker(m2); }};
  t1.join();
  t2.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(zkt::children(path), std::vector<std::string>{});

  // Rights are the user's, not the session's: a raw alice handle may delete a1's node.
  m1.lock();
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  EXPECT_EQ(zkt::raw_client("alice", "pw").remove(path + "/" + kids[0]), 0);
  m1.unlock();  // its node is gone already: nothing to do, nothing thrown
  remove_as("alice", base);
}

TEST_F(Acl, SemaphoreAndSharedMutexNodesGetTheSameAcl) {
  const std::string base = zkt::unique_path("acl-kinds");
  zklock::session alice{as("alice")}, bob{as("bob")}, nobody{as("")};

  {  // semaphore: the semaphore node and every lease node
    const std::string path = base + "/sem";
    zklock::counting_semaphore sem{alice, path, 2};
    sem.acquire();
    const auto kids = zkt::children(path);
    ASSERT_EQ(kids.size(), 1u);
    expect_private_acl(path, "alice");
    expect_private_acl(path + "/" + kids[0], "alice");
    for (zklock::session* s : {&bob, &nobody}) {
      zklock::counting_semaphore other{*s, path, 2};  // reading the lease count is allowed
      expect_error([&] { other.acquire(); }, zklock::errc::no_auth, "semaphore acquire()");
      expect_error([&] { (void)other.try_acquire(); }, zklock::errc::no_auth, "semaphore try_acquire()");
      EXPECT_EQ(other.held_leases(), 0);
    }
    EXPECT_EQ(zkt::raw_client("bob", "pw").remove(path + "/" + kids[0]), znoauth);
    EXPECT_EQ(zkt::raw_client().remove(path + "/" + kids[0]), znoauth);
    EXPECT_EQ(zkt::children(path), kids);
    // (while a lease is held: once idle, the server may reap the node, a container)
    EXPECT_EQ(zkt::raw_client().remove(path), znoauth) << "a stranger deleted the semaphore node";
    EXPECT_TRUE(zkt::exists(path));
    sem.release();
  }

  {  // shared mutex: write and read nodes
    const std::string path = base + "/rw";
    zklock::shared_mutex rw{alice, path};
    rw.lock();
    auto kids = zkt::children(path);
    ASSERT_EQ(kids.size(), 1u);
    expect_private_acl(path, "alice");
    expect_private_acl(path + "/" + kids[0], "alice");
    EXPECT_EQ(zkt::raw_client("bob", "pw").remove(path + "/" + kids[0]), znoauth);
    rw.unlock();
    rw.lock_shared();
    kids = zkt::children(path);
    ASSERT_EQ(kids.size(), 1u);
    expect_private_acl(path + "/" + kids[0], "alice");
    EXPECT_EQ(zkt::raw_client().remove(path + "/" + kids[0]), znoauth);
    for (zklock::session* s : {&bob, &nobody}) {
      zklock::shared_mutex other{*s, path};
      expect_error([&] { other.lock_shared(); }, zklock::errc::no_auth, "lock_shared()");
      expect_error([&] { other.lock(); }, zklock::errc::no_auth, "lock()");
    }
    EXPECT_EQ(zkt::children(path), kids);
    rw.unlock_shared();
    EXPECT_EQ(zkt::children(path), std::vector<std::string>{});
  }
  remove_as("alice", base);
}

TEST_F(Acl, WithoutCredentialsEverythingStaysOpen) {
  const std::string base = zkt::unique_path("acl-open");
  const std::string path = base + "/lock";
  zklock::session s1{as("")}, s2{as("")}, bob{as("bob")};
  zklock::mutex m1{s1, path}, m2{s2, path};
  m1.lock();
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  expect_open_acl(base);
  expect_open_acl(path);
  expect_open_acl(path + "/" + kids[0]);
  EXPECT_FALSE(m2.try_lock());
  m1.unlock();
  ASSERT_TRUE(m2.try_lock()) << "another session without credentials cannot lock";
  {  // a session with credentials may queue under an open lock node too
    zklock::mutex b{bob, path};
    EXPECT_FALSE(b.try_lock());
  }
  // Open means open: anybody may delete anybody's node (that is why credentials matter).
  const auto now = zkt::children(path);
  ASSERT_EQ(now.size(), 1u);
  EXPECT_EQ(zkt::raw_client().remove(path + "/" + now[0]), 0);
  m2.unlock();  // already gone: a no-op
  EXPECT_EQ(zkt::children(path), std::vector<std::string>{});
  zkt::remove(path);
  zkt::remove(base);
}

// The lock node's ACL changes under a holder so that its delete is refused (NOAUTH): unlock()
// cannot throw, so the refusal goes to the log handler, clearly, and unlock(ec) / unlock_shared(ec)
// / release(ec) report errc::no_auth; the node stays until the session ends, and the session goes
// on working.
TEST_F(Acl, ARefusedReleaseIsReportedToTheLogHandler) {
  const std::string path = zkt::unique_path("acl-refused-delete");
  std::mutex mu;
  std::vector<std::string> lines;
  zklock::set_log_handler([&](std::string_view line) {
    std::lock_guard lk{mu};
    lines.emplace_back(line);
  });
  {
    zklock::session s{as("alice")};
    zklock::mutex m{s, path};
    m.lock();
    const auto held = zkt::children(path);
    ASSERT_EQ(held.size(), 1u);
    zkt::raw_client alice_raw{"alice", "pw"};  // alice's identity has ADMIN on the lock node
    ASSERT_EQ(alice_raw.set_world_acl(path, zkt::perm::all & ~zkt::perm::remove), 0);
    std::error_code ec;
    m.unlock(ec);  // never throws; the error_code twin says what the server answered
    EXPECT_EQ(ec, std::error_code{zklock::errc::no_auth}) << ec.message();
    EXPECT_FALSE(m.owns_lock());
    s.flush();
    EXPECT_EQ(zkt::children(path), held) << "the server refused the delete: the node stays";
    {
      std::lock_guard lk{mu};
      bool reported = false;
      for (const auto& l : lines)
        if (l.find("refused to delete " + path + "/" + held[0]) != std::string::npos &&
            l.find(std::to_string(znoauth)) != std::string::npos)
          reported = true;
      EXPECT_TRUE(reported) << "no log line reports the refused delete";
    }
    // The same for a semaphore's lease and a read hold.
    zklock::counting_semaphore sem{s, path + "-sem", 2};
    sem.acquire();
    ASSERT_EQ(alice_raw.set_world_acl(path + "-sem", zkt::perm::all & ~zkt::perm::remove), 0);
    sem.release(ec);
    EXPECT_EQ(ec, std::error_code{zklock::errc::no_auth}) << ec.message();
    EXPECT_EQ(sem.held_leases(), 0);
    zklock::shared_mutex rw{s, path + "-rw"};
    rw.lock_shared();
    ASSERT_EQ(alice_raw.set_world_acl(path + "-rw", zkt::perm::all & ~zkt::perm::remove), 0);
    rw.unlock_shared(ec);
    EXPECT_EQ(ec, std::error_code{zklock::errc::no_auth}) << ec.message();
    zklock::mutex other{s, path + "-other"};  // the session still works
    other.lock();
    other.unlock(ec);
    EXPECT_FALSE(ec) << ec.message();
    ASSERT_EQ(alice_raw.set_world_acl(path, zkt::perm::all), 0);
    ASSERT_EQ(alice_raw.set_world_acl(path + "-sem", zkt::perm::all), 0);
    ASSERT_EQ(alice_raw.set_world_acl(path + "-rw", zkt::perm::all), 0);
  }  // the session ends: its ephemeral node goes with it
  zklock::set_log_handler({});
  EXPECT_TRUE(zkt::children(path).empty());
  EXPECT_TRUE(zkt::children(path + "-sem").empty());
  EXPECT_TRUE(zkt::children(path + "-rw").empty());
  zkt::remove(path + "-sem");
  zkt::default_client_log_level();
}

TEST_F(Acl, ALockNodeThatWouldRefuseOurDeleteRefusesToQueue) {
  // A lock node whose ACL lets others create children but not delete them (not one zklock makes):
  // a contender could queue and then never leave. At its first use of the path in a session zklock
  // creates its contender in a transaction that also creates and deletes a probe node there, which
  // the server refuses as a whole: no_auth, and nothing created.
  const std::string base = zkt::unique_path("acl-no-delete");
  zkt::raw_client alice_raw{"alice", "pw"};
  ASSERT_EQ(alice_raw.create_with_world(base, zkt::perm::read | zkt::perm::create), 0);
  {
    zklock::session s{as("")};
    zklock::mutex m{s, base};
    expect_error([&] { m.lock(); }, zklock::errc::no_auth, "lock() where we could not delete");
    expect_error([&] { (void)m.try_lock(); }, zklock::errc::no_auth, "try_lock() there");
    zklock::shared_mutex rw{s, base};
    expect_error([&] { rw.lock_shared(); }, zklock::errc::no_auth, "lock_shared() there");
    EXPECT_FALSE(m.owns_lock());
    EXPECT_EQ(zkt::children(base), std::vector<std::string>{}) << "a contender was left behind";
    zklock::mutex other{s, base + "-other"};  // the session still works elsewhere
    other.lock();
    other.unlock();
  }
  {
    // bob is a stranger to the ACL: refused as well.
    zklock::session bob{as("bob")};
    zklock::mutex m{bob, base};
    expect_error([&] { m.lock(); }, zklock::errc::no_auth, "lock() as bob");
  }
  {
    // alice's digest entry holds DELETE: her sessions queue and leave as usual (this also checks
    // that zklock computes the digest identity exactly as the server stores it).
    zklock::session a1{as("alice")}, a2{as("alice")};
    zklock::mutex m1{a1, base}, m2{a2, base};
    m1.lock();
    EXPECT_FALSE(m2.try_lock());
    ASSERT_EQ(zkt::children(base).size(), 1u);
    m1.unlock();
    EXPECT_TRUE(m2.try_lock());
    m2.unlock();
    EXPECT_EQ(zkt::children(base), std::vector<std::string>{});
  }
  alice_raw.remove(base);
  zkt::remove(base + "-other");
}

/// Returns: `acl` in a canonical order, to compare ACLs as sets.
std::vector<zkt::acl_entry> sorted(std::vector<zkt::acl_entry> acl) {
  std::sort(acl.begin(), acl.end(), [](const auto& a, const auto& b) {
    return std::tie(a.scheme, a.id, a.perms) < std::tie(b.scheme, b.id, b.perms);
  });
  return acl;
}

/// Returns: `acl` as text, "scheme:id:perms" per line, for messages.
std::string text_of(const std::vector<zkt::acl_entry>& acl) {
  std::string out;
  for (const auto& e : acl) out += e.scheme + ":" + e.id + ":" + std::to_string(e.perms) + "\n";
  return out;
}

/// Expects the server to store `want` (in any order) as the ACL of `path` (read as alice, who has
/// ADMIN there: the server shows others digest ids as "user:x").
void expect_acl(const std::string& path, const std::vector<zkt::acl_entry>& want) {
  const auto acl = zkt::raw_client("alice", "pw").acl(path);
  ASSERT_TRUE(acl) << "cannot read the ACL of " << path;
  EXPECT_EQ(text_of(sorted(*acl)), text_of(sorted(want))) << "the ACL of " << path;
}

TEST_F(Acl, TheChosenAclIsTheOneTheServerStores) {
  const std::string base = zkt::unique_path("acl-chosen");
  const std::string path = base + "/lock";
  // Two credentials: "auth" stands for both identities. carol may read and administer; anybody
  // may read (so that the unauthenticated helpers can check what is stored).
  auto o = zkt::options();
  o.auth = {zklock::digest("alice", "pw"), zklock::digest("bob", "pw")};
  o.acl = {{zklock::perm::all, "auth", ""},
           {zklock::perm::read | zklock::perm::admin, "digest", zklock::digest_id("carol", "pw")},
           {zklock::perm::read, "world", "anyone"}};
  const std::vector<zkt::acl_entry> stored{{zkt::perm::all, "digest", zklock::digest_id("alice", "pw")},
                                           {zkt::perm::all, "digest", zklock::digest_id("bob", "pw")},
                                           {zkt::perm::read | zkt::perm::admin, "digest", zklock::digest_id("carol", "pw")},
                                           {zkt::perm::read, "world", "anyone"}};
  EXPECT_EQ(zklock::digest_id("alice", "pw"), "alice:V55/p2T0OpjQ+low3NVAH4aLvm0=");  // as the server computes it
  zklock::session s{o};
  zklock::mutex m{s, path};
  m.lock();
  const auto kids = zkt::children(path);
  ASSERT_EQ(kids.size(), 1u);
  expect_acl(base, stored);                  // a missing parent, created as a container
  expect_acl(path, stored);                  // the lock node
  expect_acl(path + "/" + kids[0], stored);  // the contender node
  {  // the semaphore node and a lease
    zklock::counting_semaphore sem{s, base + "/sem", 2};
    sem.acquire();
    const auto leases = zkt::children(base + "/sem");
    ASSERT_EQ(leases.size(), 1u);
    expect_acl(base + "/sem", stored);
    expect_acl(base + "/sem/" + leases[0], stored);
    sem.release();
  }
  {  // bob's identity is in the ACL: a session of bob alone queues and leaves
    zklock::session b{as("bob")};
    zklock::mutex other{b, path};
    EXPECT_FALSE(other.try_lock());
    m.unlock();
    EXPECT_TRUE(other.try_lock());
    other.unlock();
  }
  {  // carol may read but not queue
    zklock::session c{as("carol")};
    zklock::mutex other{c, path};
    expect_error([&] { other.lock(); }, zklock::errc::no_auth, "carol lock()");
  }
  EXPECT_EQ(zkt::children(path), std::vector<std::string>{});
  remove_as("alice", base);
}

TEST_F(Acl, AnAclThatCannotWorkIsRefused) {
  using zklock::perm::all;
  struct bad_acl {
    const char* what;
    std::vector<zklock::auth_info> auth;
    std::vector<zklock::acl_entry> acl;
  };
  const auto alice = zklock::digest("alice", "pw");
  const std::vector<bad_acl> cases = {
      {"empty scheme", {}, {{all, "", "anyone"}}},
      {"perms 0", {}, {{0, "world", "anyone"}}},
      {"perms 32", {}, {{32, "world", "anyone"}}},
      {"perms -1", {}, {{-1, "world", "anyone"}}},
      {"NUL in the id", {}, {{all, "world", std::string{"any\0one", 7}}}},
      {"NUL in the scheme", {}, {{all, std::string{"wor\0ld", 6}, "anyone"}}},
      {"world but not anyone", {}, {{all, "world", "someone"}}},
      {"digest id without its hash", {alice}, {{all, "digest", "alice"}}},
      {"digest id with an empty user", {alice}, {{all, "digest", ":abc="}}},
      {"auth without credentials", {}, {{all, "auth", ""}}},
      {"no DELETE for us", {}, {{zklock::perm::read | zklock::perm::create, "world", "anyone"}}},
      {"no READ for us", {alice}, {{zklock::perm::create | zklock::perm::remove, "auth", ""}}},
      {"someone else's digest only", {alice}, {{all, "digest", zklock::digest_id("bob", "pw")}}},
      {"over 64 KiB", {}, {{all, "world", "anyone"}, {all, "ip", std::string(70'000, '1')}}},
      {"a digest credential without ':'", {{"digest", "alice"}}, {}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    auto o = zkt::options();
    o.auth = c.auth;
    o.acl = c.acl;
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW({ zklock::session s{o}; }, std::invalid_argument);
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "refused only after talking to the server";
  }
  // The ones that work: this digest user, or a scheme zklock cannot judge (the server decides).
  for (const auto& acl : std::vector<std::vector<zklock::acl_entry>>{
           {{all, "digest", zklock::digest_id("alice", "pw")}},
           {{zklock::perm::read, "world", "anyone"}, {zklock::perm::create | zklock::perm::remove, "auth", ""}}}) {
    auto o = as("alice");
    o.acl = acl;
    EXPECT_NO_THROW({ zklock::session s{o}; }) << acl.front().scheme;
  }
  // The server refuses what only it can judge, e.g. an ip entry that is no address.
  const std::string path = zkt::unique_path("acl-server-refuses");
  auto o = as("");
  o.acl = {{all, "ip", "not-an-address"}};
  zklock::session s{o};
  zklock::mutex m{s, path};
  expect_error([&] { m.lock(); }, zklock::errc::invalid_acl, "lock() with an ip entry that is no address");
  EXPECT_FALSE(zkt::exists(path));
}

using zkt::message_of;

TEST_F(Acl, AnAclZklockCannotJudgeIsJudgedByTheServer) {
  // An ip entry: whether it counts this session in, only the server knows (zklock's own reading of
  // an ACL lets such entries pass). The ACL probe lets the server judge: an entry for another host
  // leaves this session only CREATE (from world), so it is refused and nothing is left behind...
  zkt::raw_client raw;
  const std::string elsewhere = zkt::unique_path("acl-ip-elsewhere");
  ASSERT_EQ(raw.create_with_acl(elsewhere, {{zkt::perm::all, "ip", "10.255.255.1"},
                                            {zkt::perm::read | zkt::perm::create, "world", "anyone"}}),
            0);
  // ...while one for the loopback address lets it queue and leave as usual.
  const std::string here = zkt::unique_path("acl-ip-here");
  ASSERT_EQ(raw.create_with_acl(here, {{zkt::perm::all, "ip", "127.0.0.1"}}), 0);
  {
    zklock::session s{as("")};
    zklock::mutex m{s, elsewhere};
    const std::string what = message_of([&] { m.lock(); });
    EXPECT_NE(what.find("needs DELETE permission on " + elsewhere), std::string::npos) << what;
    EXPECT_EQ(zkt::children(elsewhere), std::vector<std::string>{}) << "a contender was left behind";
    zklock::mutex ok{s, here};
    ok.lock();
    EXPECT_EQ(zkt::children(here).size(), 1u);
    ok.unlock();
    EXPECT_EQ(zkt::children(here), std::vector<std::string>{});
  }
  EXPECT_EQ(raw.remove(elsewhere), 0);
  EXPECT_EQ(raw.remove(here), 0);
}

TEST_F(Acl, ARefusalNamesTheNodeAndThePermission) {
  const std::string base = zkt::unique_path("acl-message");
  zkt::raw_client alice_raw{"alice", "pw"};
  ASSERT_EQ(alice_raw.create_with_world(base, zkt::perm::read), 0);  // alice: all; others: READ
  zklock::session bob{as("bob")};
  {  // a missing lock node under it: its create needs CREATE on base
    zklock::mutex m{bob, base + "/job"};
    const std::string what = message_of([&] { m.lock(); });
    EXPECT_NE(what.find("creating " + base + "/job (needs CREATE permission on " + base + ")"), std::string::npos)
        << what;
    EXPECT_NE(what.find("not authorised"), std::string::npos) << what;
    // (the constructor creates the semaphore node)
    const std::string sem_what = message_of([&] { zklock::counting_semaphore sem{bob, base + "/sem", 2}; });
    EXPECT_NE(sem_what.find("creating semaphore " + base + "/sem (needs CREATE permission on " + base + ")"),
              std::string::npos)
        << sem_what;
  }
  {  // the lock node itself, whose ACL would not let bob queue under it (nor delete there)
    zklock::mutex m{bob, base};
    const std::string what = message_of([&] { m.lock(); });
    EXPECT_NE(what.find("creating a contender under " + base + " (needs CREATE permission on " + base + ")"),
              std::string::npos)
        << what;
  }
  {  // a lock node that lets bob create children but not delete them: the DELETE is named
    const std::string no_delete = base + "-no-delete";
    ASSERT_EQ(alice_raw.create_with_world(no_delete, zkt::perm::read | zkt::perm::create), 0);
    zklock::mutex m{bob, no_delete};
    const std::string what = message_of([&] { m.lock(); });
    EXPECT_NE(what.find("needs DELETE permission on " + no_delete), std::string::npos) << what;
    EXPECT_EQ(zkt::children(no_delete), std::vector<std::string>{}) << "a contender was left behind";
    EXPECT_EQ(alice_raw.remove(no_delete), 0);
  }
  {  // an unreadable lock node: listing it needs READ
    const std::string hidden = base + "-hidden";
    ASSERT_EQ(alice_raw.create_with_world(hidden, zkt::perm::create | zkt::perm::remove), 0);
    const std::string what = message_of([&] { (void)zklock::contenders(bob, hidden); });
    EXPECT_NE(what.find("listing " + hidden + " (needs READ permission on " + hidden + ")"), std::string::npos) << what;
    EXPECT_EQ(alice_raw.remove(hidden), 0);
  }
  EXPECT_EQ(alice_raw.remove(base), 0);
}

}  // namespace
