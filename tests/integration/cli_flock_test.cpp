// SPDX-License-Identifier: Apache-2.0
// The `zklock` binary for users who bring flock(1) and etcdctl habits (issue 24): exec -c STRING,
// -n / -w / -s / -x / -E, `zklock lock PATH` (prints the token, holds until a signal or the end of
// stdin, a lost lock exits 75), the common options before the command; and the messages: a host
// that does not resolve, a refused connection and a server that never answers told apart, a
// missing chroot with its own exit code (78), -v naming the server reached, no message that
// repeats itself.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "child_process.hpp"
#include "cli_run.hpp"
#include "zk_test.hpp"

namespace {

using namespace zkcli_test;

/// Returns: `zklock CMD --connect <server> ARGS...`.
std::vector<std::string> with_server(const std::string& command, std::vector<std::string> args) {
  args.insert(args.begin(), {command, "--connect", zkt::connect()});
  return args;
}

constexpr std::string_view token_prefix = "ZKLOCK_FENCING_TOKEN=";

/// Returns: the token of a `zklock lock` line "ZKLOCK_FENCING_TOKEN=<n>", or 0 if the line is not one.
std::int64_t token_of(const std::optional<std::string>& line) {
  if (!line || !line->starts_with(token_prefix)) return 0;
  const std::string digits = line->substr(token_prefix.size());
  if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos) return 0;
  return std::stoll(digits);
}

/// `zklock lock [OPTIONS] PATH`, with held() waiting for its token line.
struct lock_run {
  zklock_run run;
  explicit lock_run(const std::string& path, std::vector<std::string> options = {},
                    zkt::stream in = zkt::stream::pipe)
      : run([&] {
          auto a = with_server("lock", std::move(options));
          a.push_back(path);
          return a;
        }(), {}, in) {}
  /// Returns: the token it printed once it held (0, with a test failure, if it printed no token line).
  std::int64_t held() {
    const auto line = run.read_line();
    const auto token = token_of(line);
    EXPECT_GT(token, 0) << "not a token line: " << (line ? *line : "(none)") << "\n" << run.err();
    return token;
  }
};

/// Returns: the exit code of `zklock exec -n [OPTIONS] PATH -- echo ran`; `ran` says whether CMD ran.
int try_exec(const std::string& path, std::vector<std::string> options, bool& ran) {
  auto a = with_server("exec", {"-n"});
  a.insert(a.end(), options.begin(), options.end());
  a.insert(a.end(), {path, "--", "echo", "ran"});
  zklock_run r{a};
  const int code = run(r);
  const auto out = r.out();
  ran = out == "ran\n";
  EXPECT_TRUE(out.empty() || ran) << out;
  return code;
}

int try_exec(const std::string& path, std::vector<std::string> options = {}) {
  bool ran = false;
  const int code = try_exec(path, std::move(options), ran);
  EXPECT_EQ(ran, code == 0) << "CMD ran " << (ran ? "without" : "despite") << " exit 0";
  return code;
}

/// Returns: what is wrong with zklock's stderr `err` as messages ("" if nothing): "zklock: " other
/// than at a line's start, or a clause (between ": " and "; ") said twice in one line.
std::string repeats(const std::string& err) {
  std::string problems;
  for (const auto& line : lines(err)) {
    std::string rest = line.starts_with("zklock: ") ? line.substr(8) : line;
    if (rest.find("zklock: ") != std::string::npos) problems += "\"zklock: \" inside: " + line + "\n";
    std::vector<std::string> clauses;
    for (std::size_t at = 0; at <= rest.size();) {
      std::size_t end = std::min(rest.find(": ", at), rest.find("; ", at));
      if (end == std::string::npos) end = rest.size();
      std::string clause = rest.substr(at, end - at);
      if (clause.size() >= 8) {
        if (std::find(clauses.begin(), clauses.end(), clause) != clauses.end())
          problems += "\"" + clause + "\" twice: " + line + "\n";
        clauses.push_back(clause);
      }
      at = end + 2;
    }
  }
  return problems;
}

/// Returns: how often `what` occurs in `text`.
std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (auto at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++n;
  return n;
}

// ---- exec: flock's options -----------------------------------------------------------------------

TEST(CliFlock, DashCRunsTheStringWithSh) {
  const auto path = zkt::unique_path("flock-c");
  zklock_run r{with_server("exec", {"-c", "echo token=$ZKLOCK_FENCING_TOKEN; exit 3", path})};
  EXPECT_EQ(run(r), 3) << r.err();
  const auto out = r.out();
  ASSERT_TRUE(out.starts_with("token=")) << out;
  EXPECT_GT(std::stoll(out.substr(6)), 0) << out;

  // After PATH too, and as --command: one shell word, with its pipes and quotes.
  zklock_run after{with_server("exec", {path, "--command", "printf '%s\\n' \"a b\" | tr a-z A-Z"})};
  EXPECT_EQ(run(after), 0) << after.err();
  EXPECT_EQ(after.out(), "A B\n");

  // -c and CMD, or an empty STRING: usage errors.
  zklock_run both{with_server("exec", {"-c", "true", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(both), 125) << both.err();
  EXPECT_NE(both.err().find("not both"), std::string::npos) << both.err();
  EXPECT_EQ(both.out(), "");
  zklock_run empty{with_server("exec", {"-c", "", path})};
  EXPECT_EQ(run(empty), 125) << empty.err();
  zklock_run ls{with_server("ls", {"-c", "true", path})};
  EXPECT_EQ(run(ls), 125) << ls.err();
  EXPECT_NE(ls.err().find("option -c does not apply to ls"), std::string::npos) << ls.err();
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliFlock, NonblockAndWaitBoundTheWait) {
  const auto path = zkt::unique_path("flock-nw");
  lock_run holder{path};
  holder.held();

  zklock_run n{with_server("exec", {"-n", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(n), 124) << n.err();
  EXPECT_EQ(n.out(), "");
  EXPECT_NE(n.err().find(path + " is taken (--nonblock: no waiting)"), std::string::npos) << n.err();

  // -w in seconds (flock's fractions included) or in the CLI's durations.
  for (const char* w : {"0.3", ".3", "300ms"}) {
    zklock_run r{with_server("exec", {"-w", w, path, "--", "echo", "ran"})};
    EXPECT_EQ(run(r), 124) << w << ": " << r.err();
    EXPECT_EQ(r.out(), "") << w;
    EXPECT_NE(r.err().find("timed out after 300 ms waiting for " + path), std::string::npos) << w << ": " << r.err();
  }
  zklock_run nonblock{with_server("exec", {"--nonblock", path, "--", "true"})};
  EXPECT_EQ(run(nonblock), 124) << nonblock.err();
  zklock_run wait{with_server("exec", {"--wait=1", path, "--", "true"})};
  EXPECT_EQ(run(wait), 124) << wait.err();
  EXPECT_NE(wait.err().find("timed out after 1000 ms"), std::string::npos) << wait.err();
  EXPECT_EQ(contender_nodes(path).size(), 1u) << "only the holder's node is left";

  // Two bounds: a usage error, whatever their order.
  for (const auto& args : std::vector<std::vector<std::string>>{{"-n", "--timeout", "5s"}, {"-w", "2", "-n"}}) {
    auto a = with_server("exec", args);
    a.insert(a.end(), {path, "--", "true"});
    zklock_run r{a};
    EXPECT_EQ(run(r), 125) << r.err();
    EXPECT_NE(r.err().find("exclude each other"), std::string::npos) << r.err();
  }
  zklock_run bad{with_server("exec", {"-w", "soon", path, "--", "true"})};
  EXPECT_EQ(run(bad), 125) << bad.err();
  EXPECT_NE(bad.err().find("bad --wait \"soon\""), std::string::npos) << bad.err();

  holder.run.close_stdin();
  EXPECT_EQ(run(holder.run), 0) << holder.run.err();
  EXPECT_EQ(try_exec(path), 0);
}

TEST(CliFlock, SharedAndExclusiveShortFlags) {
  const auto path = zkt::unique_path("flock-sx");
  lock_run a{path, {"-s"}}, b{path, {"--shared"}};
  EXPECT_NE(a.held(), b.held());  // two readers hold at once
  EXPECT_EQ(try_exec(path, {"-s"}), 0) << "a third reader gets in";
  EXPECT_EQ(try_exec(path, {"-x"}), 124) << "-x is exclusive";
  EXPECT_EQ(try_exec(path, {"--exclusive"}), 124);
  EXPECT_EQ(try_exec(path), 124) << "so is the default";
  zklock_run both{with_server("exec", {"-s", "-x", path, "--", "true"})};
  EXPECT_EQ(run(both), 125) << both.err();
  EXPECT_NE(both.err().find("exclude each other"), std::string::npos) << both.err();
  a.run.close_stdin();
  b.run.close_stdin();
  EXPECT_EQ(run(a.run), 0) << a.run.err();
  EXPECT_EQ(run(b.run), 0) << b.run.err();
  EXPECT_EQ(try_exec(path, {"-x"}), 0);
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliFlock, ConflictExitCode) {
  const auto path = zkt::unique_path("flock-E");
  lock_run holder{path};
  holder.held();
  bool ran = true;
  EXPECT_EQ(try_exec(path, {"-E", "0"}, ran), 0) << "taken, and -E 0 says so with 0";
  EXPECT_FALSE(ran) << "CMD must not run when the lock is taken, whatever the exit code";
  EXPECT_EQ(try_exec(path, {"-E", "1"}, ran), 1);
  EXPECT_EQ(try_exec(path, {"--conflict-exit-code=42"}, ran), 42);
  zklock_run timed{with_server("exec", {"-w", "200ms", "-E", "3", path, "--", "true"})};
  EXPECT_EQ(run(timed), 3) << "a timeout is a conflict too: " << timed.err();
  zklock_run wait{with_server("wait", {"-n", "-E", "5", path})};
  EXPECT_EQ(run(wait), 5) << wait.err();
  lock_run second{path, {"-n", "-E", "9"}};
  EXPECT_EQ(run(second.run), 9) << second.run.err();
  EXPECT_EQ(second.run.out(), "") << "no token without the lock";

  // 0..255, and none of zklock's own codes.
  const std::vector<std::pair<std::string, std::string>> refused{
      {"256", "from 0 to 255"},   {"-1", "from 0 to 255"}, {"x", "from 0 to 255"},
      {"", "from 0 to 255"},      {"75", "the lock was lost"}, {"69", "cannot reach ZooKeeper"},
      {"78", "chroot"},           {"125", "usage error"},  {"127", "CMD not found"},
      {"130", "signal"},          {"255", "signal"}};
  for (const auto& [code, why] : refused) {
    zklock_run r{with_server("exec", {"-E", code, path, "--", "true"})};
    EXPECT_EQ(run(r), 125) << code << ": " << r.err();
    EXPECT_NE(r.err().find("bad --conflict-exit-code \"" + code + "\""), std::string::npos) << r.err();
    EXPECT_NE(r.err().find(why), std::string::npos) << code << ": " << r.err();
  }
  holder.run.signal(SIGTERM);
  EXPECT_EQ(run(holder.run), 0) << holder.run.err();
}

// ---- lock ------------------------------------------------------------------------------------------

// exec --max-hold: a CMD that runs past the bound loses the lock (its node deleted: nobody waits on
// it), its group is stopped, and exec exits 75 saying why (long before CMD's own end).
TEST(CliExec, MaxHoldStopsACommandThatHoldsTooLong) {
  const auto path = zkt::unique_path("cli-max-hold");
  zklock_run r{exec_args({}, {"--max-hold", "500ms", path, "--", "sleep", "120"})};
  EXPECT_EQ(run(r, 60s), 75) << r.err();
  EXPECT_NE(r.err().find("--max-hold"), std::string::npos) << r.err();
  EXPECT_TRUE(contender_nodes(path).empty());
}

// exec --hold-at-least: a CMD that ends sooner keeps the lock until the floor (a second exec -n is
// refused meanwhile); exec then exits with CMD's code and the lock is free. A floor over
// --max-hold is a usage error.
TEST(CliExec, HoldAtLeastKeepsTheLockAfterAnEarlyEnd) {
  const auto path = zkt::unique_path("cli-hold-least");
  zklock_run first{exec_args({}, {"--hold-at-least", "4s", path, "--", "sh", "-c", "echo done; exit 3"})};
  ASSERT_EQ(first.read_line(), "done") << first.err();
  zklock_run second{exec_args({}, {"-n", path, "--", "true"})};
  EXPECT_EQ(run(second), 124) << "a second run started inside the first one's floor: " << second.err();
  EXPECT_EQ(run(first), 3) << first.err();
  zklock_run third{exec_args({}, {"-n", path, "--", "true"})};
  EXPECT_EQ(run(third), 0) << third.err();
  zklock_run bad{exec_args({}, {"--hold-at-least", "2s", "--max-hold", "1s", path, "--", "true"})};
  EXPECT_EQ(run(bad), 125);
  EXPECT_NE(bad.err().find("--hold-at-least"), std::string::npos) << bad.err();
}

// zklock revoke: an exec holder is asked and stops CMD (exit 75, saying it was revoked): released on
// request. With --on-revoke ignore it goes on until the grace period is over: forced. Nobody
// holding: nothing to revoke.
TEST(CliRevoke, AnExecHolderIsAskedThenForced) {
  const auto path = zkt::unique_path("cli-revoke");
  zklock_run holder{exec_args({}, {path, "--", "sh", "-c", "echo held; sleep 120"})};
  ASSERT_EQ(holder.read_line(), "held") << holder.err();
  const auto node = contender_nodes(path).at(0);
  zklock_run r{{"revoke", "--connect", zkt::connect(), "--grace", "30s", path}};
  EXPECT_EQ(run(r), 0) << r.err();
  EXPECT_EQ(r.out(), node + ": released on request\n");
  EXPECT_EQ(run(holder), 75) << holder.err();
  EXPECT_NE(holder.err().find("revoked"), std::string::npos) << holder.err();

  zklock_run stubborn{exec_args({}, {"--on-revoke", "ignore", path, "--", "sh", "-c", "echo held; sleep 120"})};
  ASSERT_EQ(stubborn.read_line(), "held") << stubborn.err();
  const auto node2 = contender_nodes(path).at(0);
  zklock_run forced{{"revoke", "--connect", zkt::connect(), "--grace", "300ms", path}};
  EXPECT_EQ(run(forced), 0) << forced.err();
  EXPECT_EQ(forced.out(), node2 + ": forced (its node deleted)\n");
  EXPECT_EQ(run(stubborn), 75) << stubborn.err();
  EXPECT_NE(stubborn.err().find("lost the lock"), std::string::npos) << stubborn.err();

  zklock_run none{{"revoke", "--connect", zkt::connect(), path}};
  EXPECT_EQ(run(none), 0) << none.err();
  EXPECT_NE(none.err().find("nobody holds"), std::string::npos) << none.err();
  zklock_run bad{{"exec", "--connect", zkt::connect(), "--on-revoke", "later", path, "--", "true"}};
  EXPECT_EQ(run(bad), 125);
}

// zklock rm: a busy path is refused (exit 124, naming the holder); an idle one is removed, saying
// what it was; a missing one exits 66; a node that is no lock is refused (125).
// zklock permits PATH [N]: prints the lease count with the permits used and free, and changes it
// for every process at once: a waiter the new N makes room for is granted with no release.
TEST(CliPermits, PrintsAndChangesTheLeaseCount) {
  const auto path = zkt::unique_path("cli-permits-n");
  auto permits = [&](std::vector<std::string> more) {
    std::vector<std::string> a{"permits", "--connect", zkt::connect(), path};
    a.insert(a.end(), more.begin(), more.end());
    return a;
  };
  zklock_run missing{permits({})};
  EXPECT_EQ(run(missing), 66) << missing.err();
  zklock_run made{permits({"3"})};
  ASSERT_EQ(run(made), 0) << made.err();
  EXPECT_EQ(made.out(), path + ": made with N = 3\n");
  holder h{path, {"--permits", "3", "--take", "2"}};
  h.held();
  zklock_run shown{permits({})};
  ASSERT_EQ(run(shown), 0) << shown.err();
  EXPECT_EQ(shown.out(), path + ": N = 3 (2 used, 1 free)\n");
  zklock_run waiter{{"exec", "--connect", zkt::connect(), "--permits", "3", "--take", "2", path, "--", "echo", "in"}};
  ASSERT_TRUE(await_children(path, 2, waiter)) << waiter.err();  // contenders (not the hold record)
  zklock_run grown{permits({"4"})};
  ASSERT_EQ(run(grown), 0) << grown.err();
  EXPECT_EQ(grown.out(), path + ": N = 3 -> 4\n");
  EXPECT_EQ(run(waiter), 0) << "granted by the new N while the holder still held: " << waiter.err();
  EXPECT_EQ(waiter.out(), "in\n");
  EXPECT_EQ(h.release(), 0);
  zklock_run bad{permits({"0"})};
  EXPECT_EQ(run(bad), 125);
  EXPECT_NE(bad.err().find("bad N \"0\""), std::string::npos) << bad.err();
  // A lock's path is no semaphore.
  lock_run lock{path + "-lock"};
  lock.held();
  zklock_run not_sem{{"permits", "--connect", zkt::connect(), path + "-lock", "2"}};
  EXPECT_EQ(run(not_sem), 125);
  EXPECT_NE(not_sem.err().find("is not a semaphore"), std::string::npos) << not_sem.err();
  lock.run.close_stdin();
  EXPECT_EQ(run(lock.run), 0);
}

TEST(CliRm, RemovesAnIdlePathAndRefusesABusyOne) {
  const auto path = zkt::unique_path("cli-rm");
  lock_run holder{path};
  holder.held();
  const auto node = contender_nodes(path).at(0);
  zklock_run busy{{"rm", "--connect", zkt::connect(), path}};
  EXPECT_EQ(run(busy), 124) << busy.err();
  EXPECT_NE(busy.err().find("zklock: the lock " + path + " is in use: held by " + node), std::string::npos)
      << busy.err();
  EXPECT_EQ(busy.out(), "");
  holder.run.close_stdin();
  EXPECT_EQ(run(holder.run), 0) << holder.run.err();
  // Free now: removed, unless the server reaped the lock node first (a container: the test
  // servers look every second).
  zklock_run idle{{"rm", "--connect", zkt::connect(), path}};
  const int idle_code = run(idle);
  EXPECT_TRUE(idle_code == 0 || idle_code == 66) << idle_code << ": " << idle.err();
  if (idle_code == 0) EXPECT_EQ(idle.out(), "removed lock " + path + "\n");
  EXPECT_FALSE(zkt::exists(path));
  zklock_run gone{{"rm", "--connect", zkt::connect(), path}};
  EXPECT_EQ(run(gone), 66) << gone.err();

  // Nodes the server does not reap: an empty node (as a lock node not reaped yet), and a
  // semaphore opened but not used yet.
  zklock::session s{zkt::options()};
  s.create(path + "-empty");
  zklock_run empty{{"rm", "--connect", zkt::connect(), path + "-empty"}};
  EXPECT_EQ(run(empty), 0) << empty.err();
  EXPECT_EQ(empty.out(), "removed lock " + path + "-empty\n");
  zklock::counting_semaphore fresh{s, path + "-sem", 2};
  zklock_run sem{{"rm", "--connect", zkt::connect(), path + "-sem"}};
  EXPECT_EQ(run(sem), 0) << sem.err();
  EXPECT_EQ(sem.out(), "removed semaphore " + path + "-sem (N = 2)\n");
  EXPECT_FALSE(zkt::exists(path + "-sem"));

  s.create(path + "-dir");
  s.create(path + "-dir/data");
  zklock_run other{{"rm", "--connect", zkt::connect(), path + "-dir"}};
  EXPECT_EQ(run(other), 125) << other.err();
  EXPECT_NE(other.err().find("other nodes below it (data)"), std::string::npos) << other.err();
}

// zklock ls shows a holder whose node carries a revocation request.
TEST(CliRevoke, LsShowsAPendingRequest) {
  const auto path = zkt::unique_path("cli-revoke-ls");
  zklock::session s{zkt::options()};
  zklock::mutex m{s, path};
  m.set_on_revoke(zklock::on_revoke::ignore);
  std::lock_guard g{m};
  (void)zklock::revoke(s, path, {.grace = std::chrono::milliseconds{0}, .force = false});
  zklock_run ls{{"ls", "--connect", zkt::connect(), path}};
  EXPECT_EQ(run(ls), 0) << ls.err();
  EXPECT_NE(ls.out().find("revoke-requested"), std::string::npos) << ls.out();
  zklock_run json{{"ls", "--json", "--connect", zkt::connect(), path}};
  EXPECT_EQ(run(json), 0) << json.err();
  EXPECT_NE(json.out().find("\"revocation_requested\":true"), std::string::npos) << json.out();
}

TEST(CliLock, PrintsTheTokenOnceHeldAndReleasesWhenStdinCloses) {
  const auto path = zkt::unique_path("lock-stdin");
  lock_run l{path};
  const auto token = l.held();
  EXPECT_EQ(zkt::stat_node(path + "/" + contender_nodes(path).at(0)).czxid, token) << "the token is the node's czxid";
  EXPECT_EQ(try_exec(path), 124) << "a second exec -n gets the conflict code";
  EXPECT_EQ(try_exec(path, {"-E", "7"}), 7);
  zklock_run ls{with_server("ls", {"--json", path})};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  ASSERT_EQ(rows.size(), 1u) << ls.out();
  EXPECT_NE(rows[0].find("\"state\":\"holder\",\"kind\":\"write\",\"token\":" + std::to_string(token) + ","),
            std::string::npos)
      << rows[0];
  EXPECT_NE(rows[0].find("\"pid\":" + std::to_string(l.run.pid()) + ","), std::string::npos) << rows[0];
  EXPECT_FALSE(l.run.exited());

  l.run.close_stdin();
  EXPECT_EQ(run(l.run), 0) << l.run.err();
  EXPECT_EQ(l.run.out(), "") << "one line only";
  EXPECT_TRUE(zkt::children(path).empty()) << "released, acquire record included";
  EXPECT_EQ(try_exec(path), 0);
}

TEST(CliLock, SigtermAndSigintRelease) {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(sig);
    const auto path = zkt::unique_path("lock-signal");
    lock_run l{path, {"--verbose"}};
    l.held();
    EXPECT_EQ(try_exec(path), 124);
    l.run.signal(sig);
    EXPECT_EQ(run(l.run), 0) << l.run.err();
    EXPECT_NE(l.run.err().find(": released " + path), std::string::npos) << l.run.err();
    EXPECT_EQ(try_exec(path), 0);
    EXPECT_TRUE(zkt::children(path).empty());
  }
}

// A background job of a script gets /dev/null as stdin: its end must not release the lock.
TEST(CliLock, StdinFromDevNullDoesNotRelease) {
  const auto path = zkt::unique_path("lock-null");
  lock_run l{path, {}, zkt::stream::null};
  l.held();
  EXPECT_EQ(try_exec(path), 124);
  EXPECT_FALSE(l.run.exited()) << l.run.err();
  l.run.signal(SIGTERM);
  EXPECT_EQ(run(l.run), 0) << l.run.err();
  EXPECT_EQ(try_exec(path), 0);
}

TEST(CliLock, WaitEndsWithASignalOrTheEndOfStdin) {
  const auto path = zkt::unique_path("lock-wait");
  lock_run holder{path};
  holder.held();
  {
    lock_run waiter{path};
    ASSERT_TRUE(await_children(path, 2, waiter.run)) << waiter.run.err();
    waiter.run.close_stdin();
    EXPECT_EQ(run(waiter.run), 124) << waiter.run.err();
    EXPECT_NE(waiter.run.err().find("standard input ended while waiting for " + path), std::string::npos)
        << waiter.run.err();
    EXPECT_EQ(waiter.run.out(), "");
  }
  EXPECT_EQ(contender_nodes(path).size(), 1u) << "the waiter left the queue";
  {
    lock_run waiter{path, {"-E", "3"}};
    ASSERT_TRUE(await_children(path, 2, waiter.run)) << waiter.run.err();
    waiter.run.signal(SIGINT);
    EXPECT_EQ(run(waiter.run), 128 + SIGINT) << waiter.run.err();
    EXPECT_EQ(waiter.run.out(), "");
  }
  EXPECT_EQ(contender_nodes(path).size(), 1u);
  {  // a waiter that gets the lock when the holder lets go
    lock_run waiter{path, {"--timeout", "60s"}};
    ASSERT_TRUE(await_children(path, 2, waiter.run)) << waiter.run.err();
    holder.run.close_stdin();
    EXPECT_EQ(run(holder.run), 0) << holder.run.err();
    waiter.held();
    waiter.run.close_stdin();
    EXPECT_EQ(run(waiter.run), 0) << waiter.run.err();
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliLock, LostLockIsToldAndExits75) {
  const auto path = zkt::unique_path("lock-lost");
  lock_run l{path};
  l.held();
  const auto kids = contender_nodes(path);
  ASSERT_EQ(kids.size(), 1u);
  ASSERT_TRUE(zkt::remove(path + "/" + kids.front()));  // someone else deletes our node
  EXPECT_EQ(run(l.run, 30s), 75) << l.run.err();
  EXPECT_NE(l.run.err().find("zklock: lost the lock on " + path), std::string::npos) << l.run.err();
  EXPECT_EQ(repeats(l.run.err()), "");
}

TEST(CliLock, UsageErrors) {
  const auto path = zkt::unique_path("lock-usage");
  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {with_server("lock", {}), "lock needs a lock PATH"},
           {with_server("lock", {path, "extra"}), "unexpected argument \"extra\""},
           {with_server("lock", {"--kill-signal", "TERM", path}), "option --kill-signal does not apply to lock"},
           {with_server("lock", {"-c", "true", path}), "option -c does not apply to lock"},
           {with_server("lock", {"--mutex", "--shared", path}), "--shared, --write, --mutex and --permits exclude each other"}}) {
    zklock_run r{args};
    EXPECT_EQ(run(r), 125) << r.err();
    EXPECT_NE(r.err().find("zklock: " + message), std::string::npos) << r.err();
    EXPECT_EQ(r.out(), "");
  }
  EXPECT_FALSE(zkt::exists(path));
}

// ---- the common options before the command ---------------------------------------------------------

TEST(CliGlobal, CommonOptionsMayComeBeforeTheCommand) {
  const auto path = zkt::unique_path("global");
  // Nothing given before the command reaches CMD.
  zklock_run r{{"-v", "--connect", zkt::connect(), "--session-timeout=5s", "exec", path, "--", "echo", "a", "-v"}};
  EXPECT_EQ(run(r), 0) << r.err();
  EXPECT_EQ(r.out(), "a -v\n");
  EXPECT_NE(r.err().find("zklock: connected to "), std::string::npos) << "-v before exec: " << r.err();

  zklock_run l{{"--connect", zkt::connect(), "lock", "-n", path}};
  EXPECT_GT(token_of(l.read_line()), 0) << l.err();
  // Listed while held (a free lock's node is removed by the server within a second: it may be gone).
  zklock_run ls{{"--connect=" + zkt::connect(), "-vv", "ls", path}};
  EXPECT_EQ(run(ls), 0) << ls.err();
  EXPECT_NE(ls.err().find("ZOO_INFO@"), std::string::npos) << "-vv: the client's log too: " << ls.err();
  zklock_run w{{"--connect-timeout", "5s", "--connect", zkt::connect(), "wait", "-n", path}};
  EXPECT_EQ(run(w), 124) << w.err();
  l.close_stdin();
  EXPECT_EQ(run(l), 0) << l.err();

  for (const auto& [args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--timeout", "5s", "exec", path, "--", "true"}, "the command comes first: zklock exec --timeout"},
           {{"-n", "lock", path}, "the command comes first: zklock"},
           {{"-v"}, "no command given after the options"},
           {{"--connect"}, "option --connect needs a value"},
           {{"--bogus", "ls", path}, "unknown option \"--bogus\""},
           {{"-v", "frob", path}, "unknown command \"frob\""},
           {{"-v", "--", "exec", path}, "the command comes first"}}) {
    zklock_run bad{args, {{"ZOOKEEPER_HOSTS", zkt::connect()}}};
    EXPECT_EQ(run(bad), 125) << bad.err();
    EXPECT_NE(bad.err().find("zklock: " + message), std::string::npos) << bad.err();
    EXPECT_EQ(bad.out(), "");
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

// ---- messages --------------------------------------------------------------------------------------

/// A TCP listener on 127.0.0.1 that accepts connections (the kernel completes them) and never
/// answers: a server that is silent.
struct silent_server {
  int fd = -1;
  int port = 0;
  silent_server() {
    fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(fd, 64) != 0 ||
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
      zkt::throw_errno("silent_server");
    port = ntohs(a.sin_port);
  }
  ~silent_server() { ::close(fd); }
  silent_server(const silent_server&) = delete;
  silent_server& operator=(const silent_server&) = delete;
};

TEST(CliMessages, AHostThatDoesNotResolveSaysSo) {
  const std::string connect = "zklock-no-such-host.invalid:2181";
  zklock_run r{{"ls", "--connect", connect, "--connect-timeout", "2s", zkt::unique_path("msg-dns")}};
  EXPECT_EQ(run(r), 69) << r.err();
  const auto err = r.err();
  EXPECT_NE(err.find("host \"zklock-no-such-host.invalid\" does not resolve"), std::string::npos) << err;
  EXPECT_EQ(err.find("No such file or directory"), std::string::npos) << err;
  EXPECT_EQ(occurrences(err, connect), 1u) << err;
  EXPECT_EQ(repeats(err), "");
}

TEST(CliMessages, RefusedAndSilentServersAreToldApart) {
  const std::string refused = "127.0.0.1:" + std::to_string(zkt::free_port());
  silent_server silent;
  const std::string quiet = "127.0.0.1:" + std::to_string(silent.port);

  zklock_run a{{"exec", "--connect", refused, "--connect-timeout", "500ms", zkt::unique_path("msg"), "--", "true"}};
  EXPECT_EQ(run(a), 69) << a.err();
  EXPECT_NE(a.err().find("no session within 500 ms; " + refused + " refused the connection"), std::string::npos)
      << a.err();
  EXPECT_EQ(a.err().find("never answered"), std::string::npos) << a.err();
  EXPECT_EQ(occurrences(a.err(), refused), 2u) << "in the connect string, and as the server that refused: " << a.err();
  EXPECT_EQ(repeats(a.err()), "");

  zklock_run b{{"ls", "--connect", quiet, "--connect-timeout", "500ms", zkt::unique_path("msg")}};
  EXPECT_EQ(run(b), 69) << b.err();
  EXPECT_NE(b.err().find("no session within 500 ms; " + quiet + " accepts TCP connections but never answered"),
            std::string::npos)
      << b.err();
  EXPECT_EQ(b.err().find("refused"), std::string::npos) << b.err();
  EXPECT_EQ(repeats(b.err()), "");

  // Both in one connect string: each server is named with what it did.
  zklock_run c{{"wait", "--connect", refused + "," + quiet, "--connect-timeout", "500ms", zkt::unique_path("msg")}};
  EXPECT_EQ(run(c), 69) << c.err();
  EXPECT_NE(c.err().find(refused + " refused the connection"), std::string::npos) << c.err();
  EXPECT_NE(c.err().find(quiet + " accepts TCP connections but never answered"), std::string::npos) << c.err();
  EXPECT_EQ(repeats(c.err()), "");

  // With a live server too: the client may try the silent one first and stay there past the
  // connect timeout. Then the live one is told apart from it: it answers.
  const std::string live = zkt::connect();
  for (int i = 0; i < 4; ++i) {
    zklock_run d{{"wait", "--connect", quiet + "," + live, "--connect-timeout", "300ms", zkt::unique_path("msg")}};
    const int code = run(d);
    ASSERT_TRUE(code == 0 || code == 69) << code << ": " << d.err();
    if (code == 0) continue;  // it reached the live server first
    EXPECT_NE(d.err().find(quiet + " accepts TCP connections but never answered"), std::string::npos) << d.err();
    EXPECT_NE(d.err().find(live + " answers (the server is up"), std::string::npos) << d.err();
    EXPECT_EQ(repeats(d.err()), "");
  }
}

TEST(CliMessages, AMissingChrootHasItsOwnExitCode) {
  const auto chroot = zkt::unique_path("msg-chroot");
  zklock_run r{{"exec", "--connect", zkt::connect() + chroot, "/locks/x", "--", "echo", "ran"}};
  EXPECT_EQ(run(r), 78) << r.err();
  EXPECT_EQ(r.out(), "");
  const auto err = r.err();
  EXPECT_NE(err.find("zklock: the chroot " + chroot + " does not exist on ZooKeeper at \"" + zkt::connect() + "\""),
            std::string::npos)
      << err;
  EXPECT_EQ(occurrences(err, chroot), 1u) << err;
  EXPECT_EQ(repeats(err), "");
  EXPECT_FALSE(zkt::exists(chroot));
}

TEST(CliMessages, ALeaseCountMismatchIsSaidOnce) {
  const auto path = zkt::unique_path("msg-permits");
  lock_run holder{path, {"--permits", "2"}};
  holder.held();
  zklock_run other{with_server("exec", {"--permits", "3", "-n", path, "--", "true"})};
  EXPECT_EQ(run(other), 125) << other.err();
  const auto err = other.err();
  EXPECT_NE(err.find("is a semaphore with N = 2 leases, opened here with N = 3"), std::string::npos) << err;
  EXPECT_NE(err.find("zklock rm " + path), std::string::npos) << "says what to do: " << err;
  EXPECT_EQ(err.find("lease count other than the stored one"), std::string::npos) << "said twice: " << err;
  EXPECT_EQ(repeats(err), "");
  holder.run.close_stdin();
  EXPECT_EQ(run(holder.run), 0) << holder.run.err();
}

TEST(CliMessages, VerboseNamesTheServerReached) {
  const std::string live = zkt::connect();
  ASSERT_EQ(live.find(','), std::string::npos) << "the fixture is one server";
  const std::string dead = "127.0.0.1:" + std::to_string(zkt::free_port());
  zklock_run r{{"-v", "wait", "--connect", dead + "," + live, zkt::unique_path("msg-v")}};
  EXPECT_EQ(run(r), 0) << r.err();
  const auto err = r.err();
  EXPECT_NE(err.find("zklock: connected to " + live + " (session 0x"), std::string::npos) << err;
  EXPECT_EQ(err.find(dead), std::string::npos) << "names the server reached, not the connect string: " << err;

  // A name is named as given, with the address it reached.
  const std::string port = live.substr(live.rfind(':') + 1);
  zklock_run named{{"-v", "wait", "--connect", "localhost:" + port, zkt::unique_path("msg-v")}};
  EXPECT_EQ(run(named), 0) << named.err();
  EXPECT_NE(named.err().find("zklock: connected to localhost:" + port + " at "), std::string::npos) << named.err();
}

TEST(CliMessages, HelpListsTheNewOptionsAndEveryExitCode) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"lock", "--help"}}) {
    zklock_run r{args};
    ASSERT_EQ(run(r), 0) << r.err();
    const auto out = r.out();
    for (const char* want : {"zklock lock", "-c STRING", "--nonblock", "--wait", "--conflict-exit-code", "--exclusive",
                             "ZKLOCK_FENCING_TOKEN", " 69 ", " 70 ", " 75 ", " 77 ", " 78 ", " 124 ", " 125 ",
                             " 126 ", " 127 ", "128+N"})
      EXPECT_NE(out.find(want), std::string::npos) << args.front() << ": help lacks " << want;
  }
}

}  // namespace
