// SPDX-License-Identifier: Apache-2.0
// ACLs on lock nodes. With credentials, every node zklock creates (lock node, missing parents,
// contender nodes, semaphore nodes) gives the creator's identity all permissions and everybody
// else only READ: a stranger can watch the queue, but neither queue under the lock (NOAUTH on
// create → errc::no_auth) nor delete a holder's node (ZooKeeper checks DELETE on the parent).
// Sessions of the same digest user share the rights. Without credentials everything stays open.
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
#include <vector>
#include "expect_error.hpp"
#include "zk_test.hpp"

namespace {

using namespace std::chrono_literals;

constexpr int znoauth = static_cast<int>(zklock::errc::no_auth);  // the C client's ZNOAUTH, -102

zklock::session_options as(std::string_view user) {
  auto o = zkt::options();
  if (!user.empty()) o.auth = zklock::digest(user, "pw");
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
    sem.release();
    EXPECT_EQ(zkt::raw_client().remove(path), znoauth) << "a stranger deleted the semaphore node";
    EXPECT_TRUE(zkt::exists(path));
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
  // a contender could queue and then never leave. zklock reads the lock node's ACL at its first
  // use in a session and refuses with no_auth before creating anything.
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

}  // namespace
