// SPDX-License-Identifier: Apache-2.0
// What the `zklock` command tells about a lock (issue 24, "Visibility"), run as a binary against
// the standalone server: a conflict names the holders; --verbose says where exec queued and behind
// whom, how long it waited and the session timeout granted; a clamped session timeout is warned
// about without --verbose; `ls -r` lists every lock below a prefix (table and one JSON document)
// and `ls` of a node with locks below says so; a semaphore shows its leases used; a path that does
// not exist exits 66.
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>
#include "cli_run.hpp"

namespace {

using namespace std::chrono_literals;
using namespace zkcli_test;
using std::chrono::steady_clock;

/// Returns: the contender nodes of `path` in queue order (by their 10-digit sequence suffix).
std::vector<std::string> queue_of(const std::string& path) {
  auto kids = contender_nodes(path);
  std::sort(kids.begin(), kids.end(),
            [](const std::string& a, const std::string& b) { return a.substr(a.size() - 10) < b.substr(b.size() - 10); });
  return kids;
}

/// Returns: how zklock begins to describe the holder `h`: "host H, pid P, since ".
std::string holder_text(const holder& h) {
  return "host " + hostname() + ", pid " + std::to_string(h.run.pid()) + ", since ";
}

/// Returns: the value of `key=` in the server's "conf" answer (e.g. maxSessionTimeout), or -1.
long long server_conf(const std::string& key) {
  const std::string conf = zkt::four_letter("conf");
  const auto at = conf.find(key + "=");
  return at == std::string::npos ? -1 : std::stoll(conf.substr(at + key.size() + 1));
}

/// Returns: what python3 prints for `script` run on the file `input` (sys.argv[1]), "" if it fails.
std::string python_on(const std::string& script, const std::string& input) {
  const std::string cmd = "python3 -c '" + script + "' '" + input + "' 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {};
  std::string out;
  char buf[512];
  while (const std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  return ::pclose(p) == 0 ? out : "python3 failed: " + out;
}

// ---- a conflict names the holders -------------------------------------------------------------

TEST(CliVisibility, ATimeoutNamesTheHolder) {
  const auto path = zkt::unique_path("cli-vis-conflict");
  holder h{path};
  const auto token = h.held();
  for (const char* timeout : {"0", "300ms"}) {
    zklock_run r{exec_args({}, {"--timeout", timeout, path, "--", "echo", "ran"})};
    EXPECT_EQ(run(r), 124) << r.err();
    const auto err = r.err();
    const std::string start = std::string{timeout} == "0" ? "zklock: " + path + " is taken (--timeout 0: no waiting): "
                                                          : "zklock: timed out after 300 ms waiting for " + path + ": ";
    EXPECT_NE(err.find(start + "held by " + holder_text(h)), std::string::npos) << err;
    EXPECT_NE(err.find(", token " + std::to_string(token)), std::string::npos) << err;
  }
  // Others waiting are counted (not the one that gives up).
  zklock_run waiter{exec_args({}, {path, "--", "true"})};
  ASSERT_TRUE(await_children(path, 2, waiter)) << waiter.err();
  zklock_run r{exec_args({}, {"--timeout", "0", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(r), 124) << r.err();
  EXPECT_NE(r.err().find(", token " + std::to_string(token) + " (1 waiter queued)\n"), std::string::npos) << r.err();
  EXPECT_EQ(h.release(), 0);
  EXPECT_EQ(run(waiter), 0) << waiter.err();
}

// Two readers hold: a writer that gives up names both; a lease taker names the leases used.
TEST(CliVisibility, AConflictNamesEveryHolderAndTheLeasesUsed) {
  const auto path = zkt::unique_path("cli-vis-readers");
  holder r1{path, {"--shared"}}, r2{path, {"--shared"}};
  const auto t1 = r1.held(), t2 = r2.held();
  zklock_run w{exec_args({}, {"--timeout", "0", path, "--", "true"})};
  EXPECT_EQ(run(w), 124) << w.err();
  const auto err = w.err();
  const auto first = err.find(holder_text(t1 < t2 ? r1 : r2)), second = err.find(holder_text(t1 < t2 ? r2 : r1));
  EXPECT_NE(first, std::string::npos) << err;
  EXPECT_NE(second, std::string::npos) << err;
  EXPECT_LT(first, second) << "holders in queue order: " << err;
  EXPECT_NE(err.find("token " + std::to_string(std::min(t1, t2)) + "; host "), std::string::npos) << err;
  EXPECT_EQ(r1.release(), 0);
  EXPECT_EQ(r2.release(), 0);

  const auto sem = zkt::unique_path("cli-vis-sem-conflict");
  holder l{sem, {"--permits", "1"}};
  l.held();
  zklock_run t{exec_args({"--permits", "1"}, {"--timeout", "0", sem, "--", "true"})};
  EXPECT_EQ(run(t), 124) << t.err();
  EXPECT_NE(t.err().find("held by " + holder_text(l)), std::string::npos) << t.err();
  EXPECT_NE(t.err().find("(1 of 1 leases used)"), std::string::npos) << t.err();
  EXPECT_EQ(l.release(), 0);
}

// ---- --verbose: the queue, the wait, the session timeout ---------------------------------------

// Each waiter says where it queued and whom it waits behind: the first behind the holder, the
// second behind the first waiter (and who holds); once granted, how long it waited.
TEST(CliVisibility, VerboseSaysWhereItQueuedBehindWhomAndHowLongItWaited) {
  const auto path = zkt::unique_path("cli-vis-queue");
  holder h{path};
  const auto token = h.held();
  const auto holder_node = queue_of(path).at(0);

  zklock_run w1{exec_args({}, {"--verbose", path, "--", "true"})};
  ASSERT_TRUE(await_err(w1, "zklock: queued for " + path + " at position 2 (1 contender ahead), behind " +
                                holder_node + " (holder, write; " + holder_text(h)))
      << w1.err();
  EXPECT_NE(w1.err().find(", token " + std::to_string(token) + ")\n"), std::string::npos) << w1.err();
  EXPECT_NE(w1.err().find("(session 0x"), std::string::npos) << w1.err();
  EXPECT_NE(w1.err().find(", session timeout 10000 ms granted)"), std::string::npos) << w1.err();
  const auto nodes = queue_of(path);
  ASSERT_EQ(nodes.size(), 2u);
  const auto w1_node = nodes[1];

  zklock_run w2{exec_args({"--shared"}, {"--verbose", path, "--", "true"})};
  ASSERT_TRUE(await_err(w2, "zklock: queued for " + path + " at position 3 (2 contenders ahead), behind " +
                                w1_node + " (waiter, write; host " + hostname() + ", pid " +
                                std::to_string(w1.pid()) + ", since "))
      << w2.err();
  EXPECT_TRUE(await_err(w2, "zklock: " + path + " is held by " + holder_text(h))) << w2.err();
  EXPECT_EQ(w1.err().find(" is held by "), std::string::npos) << "the one just ahead holds: " << w1.err();

  EXPECT_EQ(h.release(), 0);
  EXPECT_EQ(run(w1), 0) << w1.err();
  EXPECT_EQ(run(w2), 0) << w2.err();
  for (auto* w : {&w1, &w2}) EXPECT_NE(w->err().find(" after waiting "), std::string::npos) << w->err();
  // Granted at once: no queue report.
  zklock_run at_once{exec_args({}, {"--verbose", path, "--", "true"})};
  EXPECT_EQ(run(at_once), 0) << at_once.err();
  EXPECT_EQ(at_once.err().find("queued for"), std::string::npos) << at_once.err();
  EXPECT_NE(at_once.err().find("zklock: holding " + path + " (token "), std::string::npos) << at_once.err();
}

// A session timeout above the server's maximum (20 ticks by default; the fixture's zoo.cfg sets
// it) is clamped by the server: zklock warns, with or without --verbose, and says what it got.
TEST(CliVisibility, AClampedSessionTimeoutIsWarnedAbout) {
  const long long max = server_conf("maxSessionTimeout");
  ASSERT_GT(max, 0) << zkt::four_letter("conf");
  ASSERT_LT(max, 600'000) << "the test needs a server whose maximum is below 10m";
  const auto path = zkt::unique_path("cli-vis-clamp");
  const std::string warning = "zklock: warning: the server granted a session timeout of " + std::to_string(max) +
                              " ms, not the 600000 ms asked for (its maxSessionTimeout): a dead zklock keeps its "
                              "lock for up to " + std::to_string(max) + " ms\n";
  zklock_run quiet{{"wait", "--connect", zkt::connect(), "--session-timeout", "10m", path}};
  EXPECT_EQ(run(quiet), 0) << quiet.err();
  EXPECT_EQ(quiet.err(), warning);
  zklock_run exec{exec_args({}, {"--session-timeout", "10m", path, "--", "true"})};
  EXPECT_EQ(run(exec), 0) << exec.err();
  EXPECT_NE(exec.err().find(warning), std::string::npos) << exec.err();
  zklock_run verbose{{"wait", "--verbose", "--connect", zkt::connect(), "--session-timeout", "10m", path}};
  EXPECT_EQ(run(verbose), 0) << verbose.err();
  EXPECT_NE(verbose.err().find("session timeout " + std::to_string(max) + " ms granted)"), std::string::npos)
      << verbose.err();
  EXPECT_NE(verbose.err().find(warning), std::string::npos) << verbose.err();

  // Within the server's bounds: granted as asked, no warning.
  zklock_run within{{"wait", "--verbose", "--connect", zkt::connect(), "--session-timeout", "4s", path}};
  EXPECT_EQ(run(within), 0) << within.err();
  EXPECT_NE(within.err().find("session timeout 4000 ms granted)"), std::string::npos) << within.err();
  EXPECT_EQ(within.err().find("warning"), std::string::npos) << within.err();
}

// ---- ls -r, and ls of a node with locks below ---------------------------------------------------

TEST(CliVisibility, LsRecursiveListsEveryLockBelowAPrefix) {
  const auto prefix = zkt::unique_path("cli-vis-tree");
  holder a{prefix + "/a"};
  const auto ta = a.held();
  zklock_run a_waiter{exec_args({}, {prefix + "/a", "--", "true"})};
  ASSERT_TRUE(await_children(prefix + "/a", 2, a_waiter)) << a_waiter.err();
  holder b{prefix + "/sub/b", {"--mutex"}};
  b.held();
  holder sem{prefix + "/sem", {"--permits", "2"}};
  sem.held();
  zkt::create_path(prefix + "/sub/empty");  // no lock: not listed

  zklock_run ls{{"ls", "-r", "--connect", zkt::connect(), prefix}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto out = lines(ls.out());
  std::vector<std::string> titles;
  for (const auto& l : out)
    if (l.starts_with(prefix)) titles.push_back(l);
  EXPECT_EQ(titles, (std::vector<std::string>{prefix + "/a (1 holder, 1 waiter)",
                                              prefix + "/sem (semaphore, 1 of 2 leases used)",
                                              prefix + "/sub/b (1 holder, 0 waiters)"}))
      << ls.out();
  // Each title is followed by its table: the heading, then one row per contender.
  const auto at = std::find(out.begin(), out.end(), titles.at(0));
  ASSERT_LT(at + 3, out.end());
  EXPECT_TRUE(at[1].starts_with("POS ")) << at[1];
  const auto row = words(at[2]);
  ASSERT_EQ(row.size(), 12u) << at[2];
  EXPECT_EQ(row[1], "holder");
  EXPECT_EQ(row[3], std::to_string(ta));
  EXPECT_EQ(row[5], std::to_string(a.run.pid()));
  EXPECT_EQ(words(at[3]).at(5), std::to_string(a_waiter.pid()));

  // One JSON document (python3's parser agrees), with the same locks.
  zklock_run js{{"ls", "--recursive", "--json", "--connect", zkt::connect(), prefix}};
  ASSERT_EQ(run(js), 0) << js.err();
  scratch_dir dir;
  const auto file = (dir.path / "tree.json").string();
  std::ofstream{file} << js.out();
  EXPECT_EQ(python_on("import json,sys\n"
                      "d = json.load(open(sys.argv[1]))\n"
                      "print(d[\"path\"])\n"
                      "for l in d[\"locks\"]:\n"
                      "  print(l[\"path\"], l[\"leases\"], l[\"holders\"], l[\"waiters\"],\n"
                      "        [(c[\"state\"], c[\"kind\"], c[\"pid\"]) for c in l[\"contenders\"]])",
                      file),
            prefix + "\n" + prefix + "/a None 1 1 [('holder', 'write', " + std::to_string(a.run.pid()) +
                "), ('waiter', 'write', " + std::to_string(a_waiter.pid()) + ")]\n" + prefix +
                "/sem 2 1 0 [('holder', 'lease', " + std::to_string(sem.run.pid()) + ")]\n" + prefix +
                "/sub/b None 1 0 [('holder', 'lock', " + std::to_string(b.run.pid()) + ")]\n")
      << js.out();

  // The prefix itself has no contenders: ls says what is below it.
  zklock_run top{{"ls", "--connect", zkt::connect(), prefix}};
  ASSERT_EQ(run(top), 0) << top.err();
  EXPECT_EQ(top.out(), "no contenders on " + prefix + ", but 3 locks below it (list them with zklock ls -r " +
                           prefix + ")\n");
  zklock_run sub{{"ls", "--connect", zkt::connect(), prefix + "/sub"}};
  ASSERT_EQ(run(sub), 0) << sub.err();
  EXPECT_EQ(sub.out(), "no contenders on " + prefix + "/sub, but 1 lock below it (list them with zklock ls -r " +
                           prefix + "/sub)\n");
  zklock_run none{{"ls", "-r", "--connect", zkt::connect(), prefix + "/sub/empty"}};
  ASSERT_EQ(run(none), 0) << none.err();
  EXPECT_EQ(none.out(), "no locks at or below " + prefix + "/sub/empty\n");

  EXPECT_EQ(a.release(), 0);
  EXPECT_EQ(run(a_waiter), 0) << a_waiter.err();
  EXPECT_EQ(b.release(), 0);
  EXPECT_EQ(sem.release(), 0);
}

// ---- a semaphore's leases ----------------------------------------------------------------------

TEST(CliVisibility, ASemaphoreShowsItsLeasesUsed) {
  const auto path = zkt::unique_path("cli-vis-sem");
  holder first{path, {"--permits", "2"}};
  first.held();
  zklock_run one{{"ls", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(one), 0) << one.err();
  auto out = lines(one.out());
  ASSERT_EQ(out.size(), 3u) << one.out();
  EXPECT_EQ(out.back(), "1 of 2 leases used");
  zklock_run js{{"ls", "--json", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(js), 0) << js.err();
  EXPECT_NE(js.out().find(",\"leases\":2,\"permits\":1}\n"), std::string::npos) << js.out();

  holder second{path, {"--permits", "2"}};
  second.held();
  zklock_run third{exec_args({"--permits", "2"}, {path, "--", "true"})};
  ASSERT_TRUE(await_children(path, 3, third)) << third.err();
  zklock_run full{{"ls", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(full), 0) << full.err();
  out = lines(full.out());
  ASSERT_EQ(out.size(), 5u) << full.out();
  EXPECT_EQ(out.back(), "2 of 2 leases used, 1 waiting");

  EXPECT_EQ(first.release(), 0);
  EXPECT_EQ(run(third), 0) << third.err();
  EXPECT_EQ(second.release(), 0);
  // A semaphore opened and not used yet (a used one goes once idle: a container) shows no lease used.
  zklock::session s{zkt::options()};
  zklock::counting_semaphore fresh{s, path + "-fresh", 2};
  zklock_run idle{{"ls", "--connect", zkt::connect(), path + "-fresh"}};
  ASSERT_EQ(run(idle), 0) << idle.err();
  EXPECT_EQ(idle.out(), "no contenders on " + path + "-fresh (semaphore: 0 of 2 leases used)\n");
}

// ---- a path that does not exist ----------------------------------------------------------------

TEST(CliVisibility, LsOfAPathThatDoesNotExistExits66) {
  const auto path = zkt::unique_path("cli-vis-missing");
  for (const auto& extra : std::vector<std::vector<std::string>>{{}, {"--json"}, {"-r"}, {"-r", "--json"}}) {
    std::vector<std::string> args{"ls", "--connect", zkt::connect()};
    args.insert(args.end(), extra.begin(), extra.end());
    args.push_back(path);
    zklock_run r{args};
    EXPECT_EQ(run(r), 66) << r.err();
    EXPECT_EQ(r.out(), "") << "nothing listed";
    EXPECT_TRUE(r.err().starts_with("zklock: " + path + " does not exist")) << r.err();
  }
  EXPECT_FALSE(zkt::exists(path));
  zklock_run help{{"ls", "--help"}};
  ASSERT_EQ(run(help), 0);
  const auto text = help.out();
  EXPECT_NE(text.find("66   ls, rm, permits: PATH does not exist"), std::string::npos) << text;
  EXPECT_NE(text.find("--recursive"), std::string::npos) << text;
}

}  // namespace
