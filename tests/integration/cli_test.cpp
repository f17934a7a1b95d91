// SPDX-License-Identifier: Apache-2.0
// The `zklock` command-line tool (cli/zklock.cpp), driven as a binary against the standalone
// server: exec runs CMD under the lock with its fencing token, passes its exit status and signals,
// excludes concurrent execs (a plain exec and --shared like flock -x and -s; --mutex among its own),
// lets --shared holders hold at once, times out, stops CMD when the lock is lost; ls lists holders
// and waiters in order; wait returns once the lock is free; bad input and an unreachable server
// give their own exit codes.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "child_process.hpp"
#include "cli_run.hpp"
#include "posix_io.hpp"
#include "scratch_dir.hpp"
#include "zk_test.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using namespace zkcli_test;
using std::chrono::steady_clock;

/// Returns: the node kind that `ls` shows for exec's lock `mode` (no option, --write, --shared, --mutex).
std::string kind_of(const std::vector<std::string>& mode) {
  if (mode.empty() || mode.front() == "--write") return "write";
  if (mode.front() == "--shared") return "read";
  if (mode.front() == "--mutex") return "lock";
  return "lease";
}

/// Returns: a shell script for CMD that appends "begin KIND TOKEN" to `log`, runs `middle`, then
/// appends "end KIND TOKEN" (TOKEN: the hold's fencing token, unique per hold).
std::string logged(const std::string& log, const std::string& kind, const std::string& middle) {
  const std::string mark = " " + kind + " $ZKLOCK_FENCING_TOKEN >> '" + log + "'";
  return "echo begin" + mark + "; " + middle + "; echo end" + mark;
}

/// Returns: whether holders of kinds `a` and `b` (as kind_of() names them) must not hold at once.
bool conflict(const std::string& a, const std::string& b) {
  return a != "read" || b != "read";  // a --mutex holder is a writer: only readers share
}

/// Returns: what is wrong in a log written by logged() CMDs ("" if nothing): a hold that began
/// while a conflicting one had begun and not ended, an end without its begin, a hold never ended.
/// `holds` gets the number of holds.
std::string log_problems(const std::string& text, std::size_t& holds) {
  std::map<std::string, std::string> active;  // token -> kind
  std::string problems;
  holds = 0;
  for (const auto& line : lines(text)) {
    const auto w = words(line);
    if (w.size() != 3 || (w[0] != "begin" && w[0] != "end")) {
      problems += "bad line: " + line + "\n";
    } else if (w[0] == "begin") {
      ++holds;
      for (const auto& [token, kind] : active)
        if (conflict(w[1], kind)) problems += line + " while " + kind + " " + token + " held\n";
      if (!active.emplace(w[2], w[1]).second) problems += "token seen twice: " + line + "\n";
    } else if (active.erase(w[2]) != 1) {
      problems += "end without begin: " + line + "\n";
    }
  }
  for (const auto& [token, kind] : active) problems += kind + " " + token + " never ended\n";
  return problems;
}

/// Expects a holder in mode `first` to keep out an exec in mode `second` on one path: with
/// --timeout 0 it gives up (124) without running CMD; without, it queues (ls: a waiter) and runs
/// CMD only after the holder's CMD has ended (both CMDs log their hold, see logged()).
void expect_excludes(const std::vector<std::string>& first, const std::vector<std::string>& second) {
  const auto path = zkt::unique_path("cli-excludes");
  scratch_dir dir;
  const auto log = (dir.path / "log").string();
  zklock_run holder{exec_args(first, {path, "--", "sh", "-c", logged(log, kind_of(first), "echo held; read x")})};
  ASSERT_EQ(holder.read_line(), "held") << holder.err();

  zklock_run now{
      exec_args(second, {"--timeout", "0", path, "--", "sh", "-c", logged(log, kind_of(second), "echo ran")})};
  EXPECT_EQ(run(now), 124) << now.err();
  EXPECT_EQ(now.out(), "") << "CMD ran beside the holder";

  zklock_run later{exec_args(second, {path, "--", "sh", "-c", logged(log, kind_of(second), "echo ran")})};
  ASSERT_TRUE(await_children(path, 2, later)) << "did not queue: " << later.err();
  zklock_run ls{{"ls", "--connect", zkt::connect(), "--json", path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  ASSERT_EQ(rows.size(), 2u) << ls.out();
  EXPECT_NE(rows[1].find("\"state\":\"waiter\",\"kind\":\"" + kind_of(second) + "\""), std::string::npos) << rows[1];
  holder.close_stdin();  // the holder's CMD logs its end, then zklock releases the lock
  EXPECT_EQ(run(holder), 0) << holder.err();
  EXPECT_EQ(run(later), 0) << later.err();
  EXPECT_EQ(later.out(), "ran\n");

  std::size_t holds = 0;
  EXPECT_EQ(log_problems(slurp(log), holds), "") << slurp(log);
  EXPECT_EQ(holds, 2u) << slurp(log);
  EXPECT_TRUE(zkt::children(path).empty());
}


// ---- help ------------------------------------------------------------------------------------

TEST(CliHelp, HelpPrintsUsageAndExitCodes) {
  for (const auto& args : std::vector<std::vector<std::string>>{{"--help"}, {"-h"}, {"help"}, {"exec", "--help"}}) {
    zklock_run r{args};
    ASSERT_EQ(run(r), 0) << args.front();
    const auto out = r.out();
    for (const char* want : {"Usage:", "zklock exec", "zklock ls", "zklock wait", "--timeout", "--shared", "--write",
                             "--mutex", "--permits", "--connect", "--kill-signal", "--grace", "ZOOKEEPER_HOSTS",
                             "ZKLOCK_FENCING_TOKEN", "69", "75", "124", "125", "126", "127"})
      EXPECT_NE(out.find(want), std::string::npos) << "help lacks " << want;
  }
  zklock_run v{{"--version"}};
  EXPECT_EQ(run(v), 0);
  EXPECT_TRUE(v.out().starts_with("zklock "));
}

// ---- exec -------------------------------------------------------------------------------------

TEST(CliExec, RunsCommandWithTokenAndPassesItsExitCode) {
  const auto path = zkt::unique_path("cli-exec");
  zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c",
                "echo token=$ZKLOCK_FENCING_TOKEN path=$ZKLOCK_PATH; exit 7"}};
  EXPECT_EQ(run(r), 7) << r.err();
  const auto out = r.out();
  EXPECT_GT(token_in(out), 0) << out;
  EXPECT_NE(out.find("path=" + path + "\n"), std::string::npos) << out;
  EXPECT_TRUE(zkt::children(path).empty());

  // The connect string from the environment; CMD killed by a signal: 128 + N.
  zklock_run e{{"exec", path, "sh", "-c", "kill -KILL $$"}, {{"ZOOKEEPER_HOSTS", zkt::connect()}}};
  EXPECT_EQ(run(e), 128 + SIGKILL) << e.err();
  EXPECT_TRUE(zkt::children(path).empty());
}

// --verbose says what zklock does; the ZooKeeper client's log only comes with a second -v.
TEST(CliExec, VerboseOnceForZklockTwiceForTheClientLog) {
  const auto path = zkt::unique_path("cli-verbose");
  for (const auto& verbose : std::vector<std::vector<std::string>>{{"--verbose"}, {"-v", "--verbose"}}) {
    auto args = verbose;
    args.insert(args.end(), {path, "--", "true"});
    zklock_run r{exec_args({}, args)};
    EXPECT_EQ(run(r), 0) << r.err();
    EXPECT_NE(r.err().find("zklock: connected to "), std::string::npos) << r.err();
    EXPECT_EQ(r.err().find("ZOO_INFO@") != std::string::npos, verbose.size() == 2) << r.err();
  }
}

TEST(CliExec, EveryModeGivesCommandAToken) {
  for (const auto& mode :
       std::vector<std::vector<std::string>>{{}, {"--shared"}, {"--write"}, {"--mutex"}, {"--permits", "2"}}) {
    const auto path = zkt::unique_path("cli-modes");
    std::vector<std::string> args{"exec", "--connect", zkt::connect()};
    args.insert(args.end(), mode.begin(), mode.end());
    args.insert(args.end(), {path, "--", "sh", "-c", "echo token=$ZKLOCK_FENCING_TOKEN"});
    zklock_run r{args};
    EXPECT_EQ(run(r), 0) << r.err();
    EXPECT_GT(token_in(r.out()), 0) << (mode.empty() ? "exclusive" : mode.front());
    EXPECT_TRUE(zkt::children(path).empty());
  }
}

TEST(CliExec, ConcurrentExecsDoNotOverlap) {
  for (const auto& mode : std::vector<std::vector<std::string>>{{}, {"--mutex"}}) {
    SCOPED_TRACE(mode.empty() ? "plain" : mode.front());
    const auto path = zkt::unique_path("cli-overlap");
    scratch_dir dir;
    const auto log = (dir.path / "log").string();
    // Each CMD appends "begin TOKEN", works a little, appends "end TOKEN".
    const std::string body = "echo begin $ZKLOCK_FENCING_TOKEN >> '" + log +
                             "'; i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done; "
                             "echo end $ZKLOCK_FENCING_TOKEN >> '" + log + "'";
    constexpr int procs = 6;
    std::vector<std::unique_ptr<zklock_run>> runs;
    for (int i = 0; i < procs; ++i)
      runs.push_back(std::make_unique<zklock_run>(exec_args(mode, {path, "--", "sh", "-c", body})));
    for (auto& r : runs) EXPECT_EQ(r->wait(120s), 0) << r->err();
    const auto text = lines(slurp(log));
    ASSERT_EQ(text.size(), 2u * procs) << slurp(log);
    std::int64_t last = 0;
    for (std::size_t i = 0; i < text.size(); i += 2) {
      const auto b = words(text[i]), e = words(text[i + 1]);
      ASSERT_EQ(b.size(), 2u);
      ASSERT_EQ(e.size(), 2u);
      EXPECT_EQ(b[0], "begin") << "line " << i;
      EXPECT_EQ(e[0], "end") << "line " << i + 1;
      EXPECT_EQ(b[1], e[1]) << "overlap at line " << i;
      const std::int64_t token = std::stoll(b[1]);
      EXPECT_GT(token, last) << "fencing tokens must grow from holder to holder";
      last = token;
    }
    EXPECT_TRUE(zkt::children(path).empty());
  }
}

// flock -x and -s on one file: a plain exec and an exec --shared of one path exclude each other.
TEST(CliExec, PlainAndSharedExcludeEachOther) {
  {
    SCOPED_TRACE("plain holder, --shared contender");
    expect_excludes({}, {"--shared"});
  }
  {
    SCOPED_TRACE("--shared holder, plain contender");
    expect_excludes({"--shared"}, {});
  }
  {
    SCOPED_TRACE("--shared holder, --write contender (the default's synonym)");
    expect_excludes({"--shared"}, {"--write"});
  }
  {
    SCOPED_TRACE("plain holder, --write contender");
    expect_excludes({}, {"--write"});
  }
}

TEST(CliExec, ConcurrentPlainAndSharedExecsNeverOverlapAWriter) {
  const auto path = zkt::unique_path("cli-rw-overlap");
  scratch_dir dir;
  const auto log = (dir.path / "log").string();
  const std::string work = "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done";
  const std::vector<std::vector<std::string>> modes{{}, {"--shared"}, {"--shared"}, {}, {"--shared"},
                                                    {"--shared"}, {"--write"}, {"--shared"}};
  std::vector<std::unique_ptr<zklock_run>> runs;
  for (const auto& mode : modes)
    runs.push_back(
        std::make_unique<zklock_run>(exec_args(mode, {path, "--", "sh", "-c", logged(log, kind_of(mode), work)})));
  for (auto& r : runs) EXPECT_EQ(r->wait(120s), 0) << r->err();
  std::size_t holds = 0;
  EXPECT_EQ(log_problems(slurp(log), holds), "") << slurp(log);
  EXPECT_EQ(holds, modes.size()) << slurp(log);
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliExec, SharedHoldersHoldAtOnce) {
  const auto path = zkt::unique_path("cli-shared");
  scratch_dir dir;
  const std::string d = dir.path.string();
  // Each CMD marks that it runs, then waits until the other one runs too (for at most about 20 s,
  // polling every 10 ms), says "both" and holds until its stdin closes.
  auto reader = [&](const std::string& me, const std::string& other) {
    return std::make_unique<zklock_run>(exec_args(
        {"--shared"}, {path, "--", "sh", "-c",
                       "touch '" + d + "/" + me + "'; n=0; while [ ! -e '" + d + "/" + other +
                           "' ]; do n=$((n+1)); if [ $n -gt 2000 ]; then echo alone; exit 3; fi; sleep 0.01; done; "
                           "echo both; read x; exit 0"}));
  };
  auto a = reader("a", "b");
  auto b = reader("b", "a");
  EXPECT_EQ(a->read_line(), "both") << a->err();
  EXPECT_EQ(b->read_line(), "both") << b->err();

  // Both hold now: ls says so, and an exclusive exec cannot get in.
  zklock_run ls{{"ls", "--connect", zkt::connect(), "--json", path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  EXPECT_EQ(rows.size(), 2u) << ls.out();
  for (const auto& row : rows) EXPECT_NE(row.find("\"state\":\"holder\",\"kind\":\"read\""), std::string::npos) << row;
  zklock_run writer{exec_args({}, {"--timeout", "0", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(writer), 124) << writer.err();
  EXPECT_EQ(writer.out(), "");

  a->close_stdin();
  b->close_stdin();
  EXPECT_EQ(a->wait(), 0) << a->err();
  EXPECT_EQ(b->wait(), 0) << b->err();
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliExec, MutexHoldersExcludeEachOther) {
  expect_excludes({"--mutex"}, {"--mutex"});

  // --mutex takes zklock::mutex's nodes (lock-), which ls shows as kind "lock".
  const auto path = zkt::unique_path("cli-mutex");
  holder m{path, {"--mutex"}};
  const auto token = m.held();
  zklock_run ls{{"ls", "--connect", zkt::connect(), "--json", path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  ASSERT_EQ(rows.size(), 1u) << ls.out();
  EXPECT_NE(rows[0].find("\"state\":\"holder\",\"kind\":\"lock\",\"token\":" + std::to_string(token) + ","),
            std::string::npos)
      << rows[0];
  EXPECT_NE(rows[0].find("-lock-"), std::string::npos) << rows[0];

  // One path, one meaning: a --mutex holder is a writer to the read/write sides, both ways.
  for (const auto& other : std::vector<std::vector<std::string>>{{}, {"--shared"}}) {
    zklock_run r{exec_args(other, {"--timeout", "0", path, "--", "echo", "ran"})};
    EXPECT_EQ(run(r), 124) << r.err();
    EXPECT_EQ(r.out(), "");
    EXPECT_EQ(r.err().find("warning"), std::string::npos) << r.err();
  }
  EXPECT_EQ(m.release(), 0);

  holder w{path};
  w.held();
  zklock_run mutex{exec_args({"--mutex"}, {"--timeout", "0", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(mutex), 124) << mutex.err();
  EXPECT_EQ(mutex.out(), "");
  EXPECT_EQ(w.release(), 0);
  EXPECT_TRUE(zkt::children(path).empty());

  // --mutex and --shared together: a usage error, before anything reaches the server.
  const auto untouched = zkt::unique_path("cli-mutex-shared");
  for (const auto& modes : std::vector<std::vector<std::string>>{{"--mutex", "--shared"}, {"--shared", "--mutex"}}) {
    zklock_run r{exec_args(modes, {untouched, "--", "echo", "ran"})};
    EXPECT_EQ(run(r), 125) << modes.front() << " " << modes.back() << ": " << r.err();
    EXPECT_NE(r.err().find("exclude each other"), std::string::npos) << r.err();
    EXPECT_EQ(r.out(), "");
  }
  EXPECT_FALSE(zkt::exists(untouched));
}

TEST(CliExec, TimeoutWhileHeldExits124AndLeavesNothing) {
  const auto path = zkt::unique_path("cli-timeout");
  holder h{path};
  h.held();
  for (const char* timeout : {"300ms", "0"}) {
    zklock_run r{{"exec", "--connect", zkt::connect(), "--timeout", timeout, path, "--", "echo", "ran"}};
    EXPECT_EQ(run(r), 124) << timeout << ": " << r.err();
    EXPECT_EQ(r.out(), "") << "CMD must not run without the lock";
    EXPECT_NE(r.err().find(std::string{timeout} == "0" ? "is taken" : "timed out"), std::string::npos) << r.err();
    EXPECT_EQ(contender_nodes(path).size(), 1u) << "only the holder's node is left";
  }
  EXPECT_EQ(h.release(), 0);
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliExec, PermitsLetNHoldersInAtOnce) {
  const auto path = zkt::unique_path("cli-permits");
  holder a{path, {"--permits", "2"}}, b{path, {"--permits", "2"}};
  const auto ta = a.held(), tb = b.held();
  EXPECT_NE(ta, tb);
  zklock_run third{{"exec", "--connect", zkt::connect(), "--permits", "2", "--timeout", "0", path, "--", "true"}};
  EXPECT_EQ(run(third), 124) << third.err();

  zklock_run ls{{"ls", "--connect", zkt::connect(), "--json", path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  ASSERT_EQ(rows.size(), 2u);
  for (const auto& row : rows) {
    EXPECT_NE(row.find("\"state\":\"holder\""), std::string::npos) << row;
    EXPECT_NE(row.find("\"kind\":\"lease\""), std::string::npos) << row;
  }
  // Another lease count than the stored one is bad input.
  zklock_run other{{"exec", "--connect", zkt::connect(), "--permits", "3", path, "--", "true"}};
  EXPECT_EQ(run(other), 125);
  EXPECT_NE(other.err().find("a semaphore with N = 2 leases"), std::string::npos) << other.err();

  EXPECT_EQ(a.release(), 0);
  EXPECT_EQ(b.release(), 0);
  EXPECT_TRUE(zkt::children(path).empty());
}

// --take K: one lease of K permits, all at once; a later smaller one does not pass a waiting one.
TEST(CliExec, TakeHoldsManyPermitsAsOneLease) {
  const auto path = zkt::unique_path("cli-take");
  holder a{path, {"--permits", "4", "--take", "3"}};
  a.held();
  zklock_run two{{"exec", "--connect", zkt::connect(), "--permits", "4", "--take", "2", "--timeout", "0", path, "--",
                  "true"}};
  EXPECT_EQ(run(two), 124) << "2 permits do not fit beside 3: " << two.err();
  EXPECT_NE(two.err().find("3 of 4 leases used"), std::string::npos) << two.err();
  zklock_run one{{"exec", "--connect", zkt::connect(), "--permits", "4", "--take", "1", "--timeout", "0", path, "--",
                  "echo", "in"}};
  EXPECT_EQ(run(one), 0) << one.err();
  EXPECT_EQ(one.out(), "in\n");
  zklock_run ls{{"ls", "--connect", zkt::connect(), "--json", path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const std::string json = ls.out();
  EXPECT_NE(json.find("\"kind\":\"lease\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"permits\":3}"), std::string::npos) << json;
  zklock_run table{{"ls", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(table), 0) << table.err();
  const std::string text = table.out();
  EXPECT_NE(text.find("lease x3"), std::string::npos) << text;
  EXPECT_NE(text.find("3 of 4 leases used"), std::string::npos) << text;
  EXPECT_EQ(a.release(), 0);
  EXPECT_TRUE(zkt::children(path).empty());
}

TEST(CliExec, ForwardsSignalsToCommand) {
  const auto path = zkt::unique_path("cli-signal");
  {  // CMD traps SIGTERM and exits with its own code.
    zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c",
                  "trap 'kill $p; echo trapped; exit 42' TERM; sleep 30 & p=$!; echo ready; wait $p"}};
    ASSERT_EQ(r.read_line(), "ready") << r.err();
    r.signal(SIGTERM);
    EXPECT_EQ(run(r), 42) << r.err();
    EXPECT_EQ(r.out(), "trapped\n");
  }
  {  // CMD dies of it: 128 + 15.
    zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c", "echo ready; exec sleep 30"}};
    ASSERT_EQ(r.read_line(), "ready") << r.err();
    r.signal(SIGTERM);
    EXPECT_EQ(run(r), 128 + SIGTERM) << r.err();
  }
  {  // USR1 too, and zklock keeps waiting for CMD.
    zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c",
                  "trap 'echo usr1' USR1; echo ready; read x; exit 3"}};
    ASSERT_EQ(r.read_line(), "ready") << r.err();
    r.signal(SIGUSR1);
    EXPECT_EQ(r.read_line(), "usr1") << r.err();
    r.close_stdin();
    EXPECT_EQ(run(r), 3) << r.err();
  }
  EXPECT_TRUE(zkt::children(path).empty());
}

// Every signal zklock passes on (HUP, INT, QUIT, TERM, USR1, USR2) reaches CMD while it runs; the
// ones CMD traps leave it running and zklock waiting for it.
TEST(CliExec, ForwardsEveryPassedSignal) {
  const auto path = zkt::unique_path("cli-signal-all");
  scratch_dir dir;
  const std::string stop = (dir.path / "stop").string();
  // CMD runs until the file `stop` appears (a trap would end a `read`, so it looks every 20 ms).
  zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c",
                "for s in HUP INT QUIT USR1 USR2; do trap \"echo $s\" $s; done; echo ready; "
                "while [ ! -e '" + stop + "' ]; do sleep 0.02; done; exit 7"}};
  ASSERT_EQ(r.read_line(), "ready") << r.err();
  for (const auto& [sig, name] : std::vector<std::pair<int, std::string>>{
           {SIGHUP, "HUP"}, {SIGINT, "INT"}, {SIGQUIT, "QUIT"}, {SIGUSR1, "USR1"}, {SIGUSR2, "USR2"}}) {
    r.signal(sig);
    EXPECT_EQ(r.read_line(), name) << r.err();
  }
  EXPECT_FALSE(r.exited());
  std::ofstream{stop}.put('\n');
  EXPECT_EQ(run(r), 7) << r.err();
  EXPECT_TRUE(zkt::children(path).empty());
}

// zklock killed outright (SIGKILL: nothing can be passed on): CMD is stopped with the kill signal,
// since nothing guarantees its lock any more.
TEST(CliExec, CommandIsStoppedWhenZklockDies) {
  const auto path = zkt::unique_path("cli-orphan");
  zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c", "echo $$; exec sleep 60"}};
  const auto line = r.read_line();
  ASSERT_TRUE(line) << r.err();
  const pid_t cmd = static_cast<pid_t>(std::stol(*line));
  const int cmd_fd = static_cast<int>(::syscall(SYS_pidfd_open, cmd, 0));
  ASSERT_GE(cmd_fd, 0) << "CMD is not running";
  r.signal(SIGKILL);
  EXPECT_EQ(run(r), 256 + SIGKILL);
  pollfd p{cmd_fd, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 30'000), 1) << "CMD outlived zklock";
  ::close(cmd_fd);
}

TEST(CliExec, SignalWhileWaitingGivesUpTheWait) {
  const auto path = zkt::unique_path("cli-signal-wait");
  holder h{path};
  h.held();
  zklock_run waiter{{"exec", "--connect", zkt::connect(), path, "--", "echo", "ran"}};
  ASSERT_TRUE(await_children(path, 2, waiter)) << waiter.err();
  waiter.signal(SIGINT);
  EXPECT_EQ(run(waiter), 128 + SIGINT) << waiter.err();
  EXPECT_EQ(waiter.out(), "");
  EXPECT_EQ(contender_nodes(path).size(), 1u) << "the waiter's node must be gone";
  EXPECT_EQ(h.release(), 0);
}

TEST(CliExec, LostLockStopsCommandAndExits75) {
  const auto path = zkt::unique_path("cli-lost");
  {  // The kill signal (TERM) ends CMD.
    zklock_run r{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c", "echo ready; exec sleep 30"}};
    ASSERT_EQ(r.read_line(), "ready") << r.err();
    const auto kids = contender_nodes(path);
    ASSERT_EQ(kids.size(), 1u);
    ASSERT_TRUE(zkt::remove(path + "/" + kids.front()));  // someone else deletes our node
    EXPECT_EQ(run(r, 30s), 75) << r.err();
    EXPECT_NE(r.err().find("lost the lock"), std::string::npos) << r.err();
  }
  {  // CMD survives --kill-signal USR1: SIGKILL after --grace.
    zklock_run r{{"exec", "--connect", zkt::connect(), "--kill-signal", "USR1", "--grace", "200ms", path, "--", "sh", "-c",
                  "trap 'echo usr1' USR1; echo ready; while :; do sleep 5 & wait $!; done"}};
    ASSERT_EQ(r.read_line(), "ready") << r.err();
    const auto kids = contender_nodes(path);
    ASSERT_EQ(kids.size(), 1u);
    ASSERT_TRUE(zkt::remove(path + "/" + kids.front()));
    EXPECT_EQ(r.read_line(), "usr1") << r.err();
    EXPECT_EQ(run(r, 30s), 75) << r.err();
    EXPECT_NE(r.err().find("SIGKILL"), std::string::npos) << r.err();
  }
}

// ---- exec: CMD's process group ---------------------------------------------------------------

/// Returns: the session id that a --verbose zklock printed ("connected to ... (session 0x...)"), 0 if none.
std::uint64_t session_of(const zklock_run& r) {
  const auto err = r.err();
  const auto at = err.find("(session 0x");
  return at == std::string::npos ? 0 : std::stoull(err.substr(at + 11), nullptr, 16);
}

/// Returns: whether `file` exists within 30 s (false at once if `r` exited).
bool await_file(const std::filesystem::path& file, zklock_run& r) {
  const auto limit = steady_clock::now() + 30s;
  while (!std::filesystem::exists(file)) {
    if (r.exited() || steady_clock::now() > limit) return false;
    std::this_thread::sleep_for(2ms);  // polling for a file the process writes, not a synchronisation
  }
  return true;
}

/// Returns: the parent pid of `pid` (from /proc), -1 if it is gone.
pid_t parent_of(pid_t pid) {
  std::ifstream in{"/proc/" + std::to_string(pid) + "/stat"};
  std::string line;
  if (!std::getline(in, line)) return -1;
  std::istringstream rest{line.substr(line.rfind(')') + 2)};  // after "pid (comm) "
  char state = 0;
  pid_t ppid = -1;
  rest >> state >> ppid;
  return ppid;
}

/// `zklock exec [options] PATH -- sh cmd.sh`, CMD's process group made for the signal tests: three
/// shell scripts in a scratch directory, cmd.sh (CMD, which prints its pid, the group's id),
/// child.sh (started by CMD in the background) and grand.sh (started by child.sh in a subshell that
/// ends at once: an orphan, re-parented to zklock). Each appends a line "TERM" to NAME.count for
/// every SIGTERM it gets and goes on, and once its trap is set writes its pid to NAME.ready. They
/// wait in `wait` on a `sleep` of their own (in the group too: a signal to the group ends it),
/// never polling; the test ends them with a SIGKILL to the group.
struct counting_group {
  scratch_dir dir;
  std::unique_ptr<zklock_run> run;
  pid_t group = 0;  ///< CMD's pid, the id of its group (0: CMD never said it)

  counting_group(const std::string& path, std::vector<std::string> options) {
    write("cmd", "echo $$; sh '" + (dir.path / "child.sh").string() + "' &");
    write("child", "( sh '" + (dir.path / "grand.sh").string() + "' & )");
    write("grand", "");
    options.insert(options.end(), {path, "--", "sh", (dir.path / "cmd.sh").string()});
    run = std::make_unique<zklock_run>(exec_args({}, options));
    if (const auto line = run->read_line()) {
      group = static_cast<pid_t>(std::stol(*line));
      run->kill_group_at_end(group);
    }
  }
  /// Returns: the pids of the three, once all three are ready (nullopt if not within 30 s).
  std::optional<std::vector<pid_t>> ready() const {
    std::vector<pid_t> pids;
    for (const char* name : {"cmd", "child", "grand"}) {
      if (!await_file(dir.path / (std::string{name} + ".ready"), *run)) return std::nullopt;
      pids.push_back(static_cast<pid_t>(std::stol(slurp(dir.path / (std::string{name} + ".ready")))));
    }
    return pids;
  }
  /// Returns: how many SIGTERMs each of the three counted, once each counted one (within 30 s).
  std::vector<std::size_t> terms_counted() const {
    const auto limit = steady_clock::now() + 30s;
    std::vector<std::size_t> n;
    for (const char* name : {"cmd", "child", "grand"}) {
      const auto file = dir.path / (std::string{name} + ".count");
      while (slurp(file).empty() && steady_clock::now() < limit)
        std::this_thread::sleep_for(2ms);  // polling a file the process writes
      n.push_back(lines(slurp(file)).size());
    }
    return n;
  }

 private:
  void write(const std::string& name, const std::string& start) const {
    const auto base = (dir.path / name).string();
    std::ofstream{base + ".sh"} << "trap 'echo TERM >> \"" << base << ".count\"' TERM\n"
                                << start << "\n"
                                << "echo $$ > '" << base << ".tmp' && mv '" << base << ".tmp' '" << base << ".ready'\n"
                                << "while :; do sleep 1000 & wait $!; done\n";
  }
};

// flock(1) keeps a lock while a descendant holds the descriptor; zklock exec keeps it while anything
// CMD started runs in CMD's process group. CMD starts a child and an orphaned grandchild, both
// reading CMD's stdin, and exits 5 at once. While they run, another exec cannot get the lock; once
// the test closes that stdin, they end, and so does the hold, with CMD's exit status.
TEST(CliExecGroup, BackgroundDescendantsKeepTheLock) {
  const auto path = zkt::unique_path("cli-group-keeps");
  zklock_run r{exec_args({}, {path, "--", "sh", "-c",
                              "exec 3<&0; (read x <&3; echo child ends) & ( (read x <&3; echo grandchild ends) & ); "
                              "echo $$; exit 5"})};
  const auto line = r.read_line();
  ASSERT_TRUE(line) << r.err();
  const pid_t cmd = static_cast<pid_t>(std::stol(*line));
  r.kill_group_at_end(cmd);
  // CMD has ended (and zklock reaped it) before the second exec tries.
  const auto limit = steady_clock::now() + 30s;
  while (::kill(cmd, 0) == 0) {
    ASSERT_LT(steady_clock::now(), limit) << "CMD did not end";
    std::this_thread::sleep_for(2ms);  // polling for CMD's end, not a synchronisation
  }
  EXPECT_EQ(::getpgid(cmd), -1);
  EXPECT_FALSE(r.exited()) << "zklock ended with CMD while CMD's children ran: " << r.err();
  zklock_run now{exec_args({}, {"--timeout", "0", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(now), 124) << "the lock was free while CMD's descendants ran: " << now.err();
  EXPECT_EQ(now.out(), "");

  r.close_stdin();  // the child and the grandchild read the end of their stdin, and end
  EXPECT_EQ(r.wait(), 5) << "exec's status is CMD's: " << r.err();
  auto out = lines(r.out());
  std::sort(out.begin(), out.end());
  EXPECT_EQ(out, (std::vector<std::string>{"child ends", "grandchild ends"}));
  zklock_run after{exec_args({}, {"--timeout", "0", path, "--", "echo", "ran"})};
  EXPECT_EQ(run(after), 0) << after.err();
  EXPECT_EQ(after.out(), "ran\n");
  EXPECT_TRUE(zkt::children(path).empty());
}

// A lost lock stops the whole group: CMD, its child and its orphaned grandchild each get the kill
// signal, once. (They trap it and run on; a forwarded SIGUSR1 then ends them.)
TEST(CliExecGroup, LostLockSignalsEveryProcessOfTheGroupOnce) {
  const auto path = zkt::unique_path("cli-group-lost");
  counting_group g{path, {"--grace", "60s"}};
  auto& r = *g.run;
  ASSERT_NE(g.group, 0) << r.err();
  const auto pids = g.ready();
  ASSERT_TRUE(pids) << r.err();
  for (pid_t p : *pids) EXPECT_EQ(::getpgid(p), g.group) << "pid " << p << " is not in CMD's group";
  EXPECT_EQ(parent_of(pids->at(2)), r.pid()) << "the orphaned grandchild was not re-parented to zklock";

  const auto kids = contender_nodes(path);
  ASSERT_EQ(kids.size(), 1u);
  ASSERT_TRUE(zkt::remove(path + "/" + kids.front()));  // someone else deletes our node: lost
  EXPECT_EQ(g.terms_counted(), (std::vector<std::size_t>{1, 1, 1})) << r.err();
  EXPECT_FALSE(r.exited()) << "zklock ended while its group ran: " << r.err();
  ::kill(-g.group, SIGKILL);  // the group ends (long before --grace would end it)
  EXPECT_EQ(r.wait(), 75) << r.err();
  EXPECT_EQ(g.terms_counted(), (std::vector<std::size_t>{1, 1, 1})) << r.err();
  EXPECT_NE(r.err().find("lost the lock on " + path + ": stopping sh and its process group (" +
                         std::to_string(g.group) + ") with SIGTERM"),
            std::string::npos)
      << r.err();
  EXPECT_TRUE(zkt::children(path).empty());
}

// A signal sent to zklock reaches each process of CMD's group exactly once: the group gets it from
// zklock alone (zklock is not in the group, so a signal to zklock's own group is not seen twice).
TEST(CliExecGroup, ForwardedSignalReachesEachProcessOfTheGroupOnce) {
  const auto path = zkt::unique_path("cli-group-signal");
  counting_group g{path, {"--verbose"}};
  auto& r = *g.run;
  ASSERT_NE(g.group, 0) << r.err();
  ASSERT_TRUE(g.ready()) << r.err();
  EXPECT_NE(g.group, ::getpgid(r.pid())) << "CMD runs in zklock's own process group";

  ::kill(-r.pid(), SIGTERM);  // zklock's own group (the test made it one): zklock alone is in it
  EXPECT_EQ(g.terms_counted(), (std::vector<std::size_t>{1, 1, 1})) << r.err();
  EXPECT_FALSE(r.exited()) << "zklock ended while its group ran: " << r.err();
  ::kill(-g.group, SIGKILL);
  EXPECT_EQ(r.wait(), 128 + SIGKILL) << "exec's status is CMD's: " << r.err();
  EXPECT_EQ(g.terms_counted(), (std::vector<std::size_t>{1, 1, 1})) << r.err();
  const auto err = r.err();
  const std::string passed = "passing SIGTERM on to process group " + std::to_string(g.group);
  ASSERT_NE(err.find(passed), std::string::npos) << err;
  EXPECT_EQ(err.find(passed, err.find(passed) + 1), std::string::npos) << "passed on twice: " << err;
  EXPECT_TRUE(zkt::children(path).empty());
}

// With a terminal. zklock, in the foreground process group of its terminal (here a pseudo-terminal
// whose session it leads), hands the terminal to CMD's group: CMD reads from it (in a background
// group it would be stopped by SIGTTIN), and Ctrl-C reaches CMD's group from the terminal alone,
// never through zklock as well.
TEST(CliExecGroup, CommandGroupGetsTheTerminal) {
  const auto path = zkt::unique_path("cli-group-tty");
  scratch_dir dir;
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  char name[128] = {};
  ASSERT_EQ(::ptsname_r(master, name, sizeof name), 0);
  termios t{};
  ASSERT_EQ(::tcgetattr(master, &t), 0);
  t.c_lflag &= ~static_cast<tcflag_t>(ECHO);  // only CMD's output comes back
  ASSERT_EQ(::tcsetattr(master, TCSANOW, &t), 0);

  std::vector<std::string> args_s{ZKLOCK_CLI_BIN, "exec", "--verbose", "--connect", zkt::connect(), path, "--",
                                  "sh", "-c",
                                  "trap 'echo INT' INT; echo pid $$; read x; echo \"got $x\"; "
                                  "while :; do sleep 1000 & wait $!; done"};
  std::vector<char*> argv;
  for (auto& a : args_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string err_file = (dir.path / "stderr").string();
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {  // async-signal-safe calls only
    ::setsid();
    const int tty = ::open(name, O_RDWR);  // the session leader's first terminal: its controlling one
    const int err = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (tty < 0 || err < 0 || ::ioctl(tty, TIOCSCTTY, 0) != 0) ::_exit(98);
    ::dup2(tty, 0);
    ::dup2(tty, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), environ);
    ::_exit(99);
  }
  pid_t group = 0;
  struct cleanup {
    pid_t pid;
    pid_t& group;
    int master;
    ~cleanup() {
      if (group > 0) ::kill(-group, SIGKILL);
      ::kill(pid, SIGKILL);
      int st = 0;
      ::waitpid(pid, &st, 0);
      ::close(master);
    }
  } done{pid, group, master};

  std::string out;
  auto await_output = [&](const std::string& text) {  // reads the terminal until `text` shows
    const auto limit = steady_clock::now() + 30s;
    while (out.find(text) == std::string::npos && steady_clock::now() < limit) {
      pollfd p{master, POLLIN, 0};
      if (::poll(&p, 1, 100) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(master, buf, sizeof buf);
      if (n <= 0) break;
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out.find(text) != std::string::npos;
  };
  ASSERT_TRUE(await_output("pid ")) << out << slurp(err_file);
  ASSERT_TRUE(await_output("\n")) << out;
  group = static_cast<pid_t>(std::stol(out.substr(out.find("pid ") + 4)));
  EXPECT_EQ(::tcgetpgrp(master), group) << "CMD's group is not the terminal's foreground group";

  ASSERT_EQ(::write(master, "hello\n", 6), 6);
  EXPECT_TRUE(await_output("got hello")) << out << slurp(err_file);
  ASSERT_EQ(::write(master, "\x03", 1), 1);  // Ctrl-C
  EXPECT_TRUE(await_output("INT")) << out << slurp(err_file);
  ::kill(pid, SIGUSR1);  // passed on: CMD's shell and its sleep end
  int st = 0;
  ASSERT_EQ(::waitpid(pid, &st, 0), pid);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 128 + SIGUSR1) << std::hex << st << "\n" << slurp(err_file);
  const auto err = slurp(err_file);
  EXPECT_EQ(err.find("passing SIGINT"), std::string::npos) << "Ctrl-C reached CMD through zklock too: " << err;
  EXPECT_NE(err.find("passing SIGUSR1 on to process group " + std::to_string(group)), std::string::npos) << err;
  EXPECT_TRUE(zkt::children(path).empty());
  done.pid = pid;  // reaped: the cleanup's kill and waitpid find nothing
}

// ---- exec, wait: session expiry -------------------------------------------------------------

// A waiting exec whose session expires (zklock is stopped until the server has expired the session
// and deleted its waiting node) queues again on a new session and runs CMD once the holder is done,
// with and without --timeout.
TEST(CliFaults, WaiterWhoseSessionExpiresQueuesAgainAndRunsCommand) {
  for (const auto& timeout : std::vector<std::vector<std::string>>{{}, {"--timeout", "120s"}}) {
    SCOPED_TRACE(timeout.empty() ? "no --timeout" : "--timeout");
    const auto path = zkt::unique_path("cli-requeue");
    holder h{path};
    const auto held = h.held();
    auto args = timeout;
    for (const char* a : {"--verbose", "--session-timeout", "2s"}) args.push_back(a);
    args.insert(args.end(), {path, "--", "sh", "-c", "echo ran token=$ZKLOCK_FENCING_TOKEN"});
    zklock_run w{exec_args({}, args)};
    ASSERT_TRUE(await_children(path, 2, w)) << w.err();
    const auto sid = session_of(w);
    ASSERT_NE(sid, 0u) << w.err();
    std::string node;
    for (const auto& k : contender_nodes(path))
      if (static_cast<std::uint64_t>(zkt::stat_node(path + "/" + k).ephemeral_owner) == sid) node = path + "/" + k;
    ASSERT_FALSE(node.empty()) << "no node of the waiter's session";

    w.signal(SIGSTOP);
    const auto limit = steady_clock::now() + 30s;
    while (zkt::exists(node)) {
      ASSERT_LT(steady_clock::now(), limit) << "the server did not expire the stopped waiter's session";
      std::this_thread::sleep_for(10ms);  // polling the server, not a synchronisation
    }
    w.signal(SIGCONT);
    ASSERT_TRUE(await_children(path, 2, w)) << "did not queue again: " << w.err();
    EXPECT_EQ(h.release(), 0);
    EXPECT_EQ(run(w), 0) << w.err();
    const auto out = w.out();
    EXPECT_TRUE(out.starts_with("ran token=")) << out;
    EXPECT_GT(token_in(out), held);
    EXPECT_TRUE(zkt::children(path).empty());
  }
}

/// Returns: whether the server has closed the connection of session `sid` (it expired) within 30 s.
bool await_session_gone(std::uint64_t sid) {
  std::ostringstream text;
  text << "sid=0x" << std::hex << sid << ",";
  const auto limit = steady_clock::now() + 30s;
  while (zkt::four_letter("cons").find(text.str()) != std::string::npos) {
    if (steady_clock::now() > limit) return false;
    std::this_thread::sleep_for(10ms);  // polling the server, not a synchronisation
  }
  return true;
}

// `zklock wait` whose session expires while it waits looks again on a new session, and returns
// once the path is free. The server (one of this test alone) is paused when the stopped wait is
// resumed, so that zklock finds its session gone before a new one can be had, every time.
TEST(CliFaults, WaitRidesThroughSessionExpiry) {
  zkt::private_server zk;  // zkt::connect() names it while it lives
  const auto path = zkt::unique_path("cli-wait-expiry");
  holder h{path, {"--session-timeout", "30s"}};  // rides through the pause below
  h.held();
  zklock_run w{{"wait", "--verbose", "--session-timeout", "2s", "--connect", zkt::connect(), path}};
  const std::string waiting = path + " has 1 contender(s): waiting";
  ASSERT_TRUE(await_err(w, waiting)) << w.err();
  const auto sid = session_of(w);
  ASSERT_NE(sid, 0u) << w.err();
  w.signal(SIGSTOP);
  ASSERT_TRUE(await_session_gone(sid)) << "the server did not expire the stopped wait's session";
  zk.pause();
  w.signal(SIGCONT);  // no server: zklock gives its session up and waits for a new one
  EXPECT_TRUE(await_err(w, "session expired: waiting for the next one")) << "wait ended on the expiry: " << w.err();
  zk.resume();
  EXPECT_TRUE(await_err(w, waiting, 2)) << "not waiting again: " << w.err();
  EXPECT_NE(w.err().find("on a new session"), std::string::npos) << w.err();
  EXPECT_EQ(h.release(), 0);
  EXPECT_EQ(run(w), 0) << w.err();
}

// The session expires while CMD runs. The session's password never leaves the zklock process, so
// the test cannot take the session over with a second handle (as tests/faults do with their own
// children); it stops zklock (SIGSTOP) instead: a stopped client sends no pings, and the server
// expires its session after --session-timeout, deleting its ephemeral node. Once resumed, zklock
// learns of the loss, stops CMD and exits 75. CMD itself keeps running while zklock is stopped.
TEST(CliExec, SessionExpiryWhileCommandRunsStopsItAndExits75) {
  for (const auto& mode : std::vector<std::vector<std::string>>{{}, {"--shared"}, {"--mutex"}, {"--permits", "2"}}) {
    SCOPED_TRACE(mode.empty() ? "plain" : mode.front());
    const auto path = zkt::unique_path("cli-expiry");
    zklock_run r{exec_args(mode, {"--verbose", "--session-timeout", "2s", path, "--", "sh", "-c",
                                  "trap 'kill $p; echo stopped; exit 1' TERM; sleep 60 & p=$!; echo ready; wait $p"})};
    ASSERT_EQ(r.read_line(), "ready") << r.err();
    const auto kids = contender_nodes(path);
    ASSERT_EQ(kids.size(), 1u);
    const std::string node = path + "/" + kids.front();
    // The node belongs to zklock's session (--verbose: "connected to ... (session 0x...)").
    const auto err = r.err();
    const auto at = err.find("(session 0x");
    ASSERT_NE(at, std::string::npos) << err;
    EXPECT_EQ(static_cast<std::uint64_t>(zkt::stat_node(node).ephemeral_owner),
              std::stoull(err.substr(at + 11), nullptr, 16));

    r.signal(SIGSTOP);
    const auto limit = steady_clock::now() + 30s;
    while (zkt::exists(node)) {
      ASSERT_LT(steady_clock::now(), limit) << "the server did not expire the stopped zklock's session";
      std::this_thread::sleep_for(10ms);  // polling the server, not a synchronisation
    }
    EXPECT_FALSE(r.exited());
    EXPECT_EQ(r.read_line(0ms), std::nullopt) << "CMD was stopped while zklock was";
    r.signal(SIGCONT);
    EXPECT_EQ(r.read_line(30s), "stopped") << r.err();
    EXPECT_EQ(r.wait(30s), 75) << r.err();
    EXPECT_NE(r.err().find("lost the lock on " + path + ": stopping sh"), std::string::npos) << r.err();
  }
}

// ---- ls ---------------------------------------------------------------------------------------

TEST(CliLs, ShowsHolderAndWaiterInQueueOrder) {
  const auto path = zkt::unique_path("cli-ls");
  holder h{path};
  const auto token = h.held();
  zklock_run w{{"exec", "--connect", zkt::connect(), path, "--", "sh", "-c", "echo token=$ZKLOCK_FENCING_TOKEN"}};
  ASSERT_TRUE(await_children(path, 2, w)) << w.err();

  zklock_run ls{{"ls", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  ASSERT_EQ(rows.size(), 3u) << ls.out();
  EXPECT_EQ(words(rows[0]), (std::vector<std::string>{"POS", "STATE", "KIND", "TOKEN", "HOST", "PID", "SINCE", "WAITED",
                                                      "HELD", "WAKEUPS", "REQUESTS", "NODE"}));
  const auto first = words(rows[1]), second = words(rows[2]);
  ASSERT_EQ(first.size(), 12u) << rows[1];
  ASSERT_EQ(second.size(), 12u) << rows[2];
  EXPECT_EQ(first[0], "1");
  EXPECT_EQ(first[1], "holder");
  EXPECT_EQ(first[2], "write") << "a plain exec takes the write side of a read/write lock";
  EXPECT_NE(first[11].find("-__WRIT__"), std::string::npos) << first[11];
  // What the holder's acquire cost, as it recorded it: the lock was free, so no wake-up.
  EXPECT_TRUE(first[7].ends_with("s")) << "WAITED: " << first[7];
  EXPECT_TRUE(first[8].ends_with("s")) << "HELD: " << first[8];
  EXPECT_EQ(first[9], "0") << "WAKEUPS of an uncontended acquire";
  EXPECT_GE(std::stoi(first[10]), 2) << "REQUESTS: at least the create and the listing";
  EXPECT_EQ((std::vector<std::string>{second.begin() + 7, second.begin() + 11}),
            (std::vector<std::string>{"-", "-", "-", "-"}))
      << "a waiter has no acquire to show: " << rows[2];
  EXPECT_EQ(first[3], std::to_string(token));
  EXPECT_EQ(first[4], hostname());
  EXPECT_EQ(first[5], std::to_string(h.run.pid()));
  EXPECT_EQ(first[6].size(), 24u) << "ISO time like 2025-01-31T12:00:00.250Z: " << first[6];
  EXPECT_TRUE(first[6].ends_with("Z"));
  EXPECT_EQ(second[0], "2");
  EXPECT_EQ(second[1], "waiter");
  EXPECT_EQ(second[5], std::to_string(w.pid()));
  EXPECT_GT(std::stoll(second[3]), token);

  // JSON lines, the connect string from the environment.
  zklock_run js{{"ls", "--json", path}, {{"ZOOKEEPER_HOSTS", zkt::connect()}}};
  ASSERT_EQ(run(js), 0) << js.err();
  const auto objs = lines(js.out());
  ASSERT_EQ(objs.size(), 2u) << js.out();
  EXPECT_NE(objs[0].find("\"position\":1,\"state\":\"holder\",\"kind\":\"write\",\"token\":" + std::to_string(token) + ","),
            std::string::npos)
      << objs[0];
  EXPECT_NE(objs[0].find("\"pid\":" + std::to_string(h.run.pid()) + ","), std::string::npos) << objs[0];
  EXPECT_NE(objs[1].find("\"position\":2,\"state\":\"waiter\""), std::string::npos) << objs[1];
  EXPECT_NE(objs[1].find("\"pid\":" + std::to_string(w.pid()) + ","), std::string::npos) << objs[1];
  EXPECT_NE(objs[0].find("\"ahead\":0,\"wakeups\":0,\"requests\":"), std::string::npos) << objs[0];
  EXPECT_EQ(objs[0].find("\"granted\":null"), std::string::npos) << objs[0];
  EXPECT_NE(objs[1].find("\"granted\":null,\"granted_ms\":null,\"held_ms\":null,\"waited_ms\":null"),
            std::string::npos)
      << objs[1];

  EXPECT_EQ(h.release(), 0);
  EXPECT_EQ(run(w), 0) << w.err();
  EXPECT_GT(token_in(w.out()), token);
  // Free: the lock node is empty, or gone already (a container node: the server removes it).
  zklock_run empty{{"ls", "--connect", zkt::connect(), path}};
  const int free_code = run(empty);
  if (free_code == 0) EXPECT_EQ(empty.out(), "no contenders on " + path + "\n");
  else EXPECT_EQ(free_code, 66) << empty.err();
}

/// Returns: the whole number after "key": in a JSON line, if there is one.
std::optional<long long> json_number(const std::string& line, const std::string& key) {
  const auto at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nullopt;
  const auto from = at + key.size() + 3;
  const auto to = line.find_first_not_of("0123456789", from);
  if (to == from) return std::nullopt;
  return std::stoll(line.substr(from, to - from));
}

// A holder that waited: its acquire record (the figures a hooks policy gets) says so, and it goes
// with the hold.
TEST(CliLs, ShowsWhatTheHoldersAcquireCost) {
  const auto path = zkt::unique_path("cli-ls-cost");
  holder first{path};
  first.held();
  holder second{path, {"--verbose"}};
  ASSERT_TRUE(await_children(path, 2, second.run));
  // Release only once the second one watches the first one's node, so that it wakes up for it.
  std::string first_node;
  for (const auto& k : contender_nodes(path))
    if (k.find("__WRIT__") != std::string::npos && (first_node.empty() || k.substr(k.size() - 10) < first_node.substr(first_node.size() - 10)))
      first_node = k;
  ASSERT_FALSE(first_node.empty());
  first_node = path + "/" + first_node;
  const auto err = second.run.err();
  const auto at = err.find("(session 0x");
  ASSERT_NE(at, std::string::npos) << err;
  const auto sid = std::stoull(err.substr(at + 11), nullptr, 16);
  const auto limit = steady_clock::now() + 30s;
  while (!zkt::watches_below(first_node, sid).contains(first_node)) {
    ASSERT_LT(steady_clock::now(), limit) << "the second one never watched " << first_node;
    std::this_thread::sleep_for(2ms);  // polling the server's watch table
  }
  EXPECT_EQ(first.release(), 0);
  second.held();

  zklock_run js{{"ls", "--json", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(js), 0) << js.err();
  const auto objs = lines(js.out());
  ASSERT_EQ(objs.size(), 1u) << js.out();
  const auto& row = objs[0];
  EXPECT_NE(row.find("\"state\":\"holder\""), std::string::npos) << row;
  EXPECT_EQ(json_number(row, "ahead"), 1) << "one contender was ahead at its first listing: " << row;
  EXPECT_EQ(json_number(row, "wakeups"), 1) << "it woke once, for the first one's release: " << row;
  EXPECT_GE(json_number(row, "requests").value_or(-1), 3) << "create, listing and a watch at least: " << row;
  EXPECT_GE(json_number(row, "waited_ms").value_or(-1), 0) << row;
  const auto granted = json_number(row, "granted_ms"), since = json_number(row, "since_ms");
  ASSERT_TRUE(granted && since) << row;
  EXPECT_GE(*granted, *since) << "granted before it queued: " << row;
  EXPECT_GE(json_number(row, "held_ms").value_or(-1), 0) << row;
  EXPECT_EQ(second.release(), 0);
  EXPECT_TRUE(zkt::children(path).empty()) << "the record (or a contender) stayed after the hold";
}

TEST(CliLs, ReadWriteQueueStates) {
  const auto path = zkt::unique_path("cli-ls-rw");
  holder r1{path, {"--shared"}};
  r1.held();
  holder w1{path, {"--write"}};
  ASSERT_TRUE(await_children(path, 2, w1.run));
  holder r2{path, {"--shared"}};
  ASSERT_TRUE(await_children(path, 3, r2.run));

  zklock_run ls{{"ls", "--connect", zkt::connect(), path}};
  ASSERT_EQ(run(ls), 0) << ls.err();
  const auto rows = lines(ls.out());
  ASSERT_EQ(rows.size(), 4u) << ls.out();
  const std::vector<std::pair<std::string, std::string>> want{{"holder", "read"}, {"waiter", "write"}, {"waiter", "read"}};
  for (std::size_t i = 0; i < want.size(); ++i) {
    const auto w = words(rows[i + 1]);
    ASSERT_GE(w.size(), 3u);
    EXPECT_EQ(w[1], want[i].first) << rows[i + 1];
    EXPECT_EQ(w[2], want[i].second) << rows[i + 1];
  }
  EXPECT_EQ(r1.release(), 0);
  w1.held();  // the writer goes next, the reader behind it still waits
  EXPECT_FALSE(r2.run.exited());
  EXPECT_EQ(w1.release(), 0);
  r2.held();
  EXPECT_EQ(r2.release(), 0);
}

// ---- wait -------------------------------------------------------------------------------------

TEST(CliWait, ReturnsOnceTheLockIsFree) {
  const auto path = zkt::unique_path("cli-wait");
  zklock_run free_now{{"wait", "--connect", zkt::connect(), path}};
  EXPECT_EQ(run(free_now), 0) << free_now.err();
  zklock_run free_at_once{{"wait", "--connect", zkt::connect(), "--timeout", "0", path}};
  EXPECT_EQ(run(free_at_once), 0) << free_at_once.err();

  holder h{path};
  h.held();
  zklock_run bounded{{"wait", "--connect", zkt::connect(), "--timeout", "300ms", path}};
  EXPECT_EQ(run(bounded), 124) << bounded.err();
  zklock_run at_once{{"wait", "--connect", zkt::connect(), "--timeout", "0", path}};
  EXPECT_EQ(run(at_once), 124) << at_once.err();

  zklock_run waiter{{"wait", "--verbose", "--connect", zkt::connect(), path}};
  // --verbose says "waiting" once the children watch is armed (stderr is a file: poll it).
  const auto limit = steady_clock::now() + 30s;
  while (waiter.err().find(path + " has 1 contender(s): waiting") == std::string::npos) {
    ASSERT_FALSE(waiter.exited()) << waiter.err();
    ASSERT_LT(steady_clock::now(), limit) << "not waiting: " << waiter.err();
    std::this_thread::sleep_for(2ms);  // polling interval, not a synchronisation
  }
  EXPECT_EQ(h.release(), 0);
  EXPECT_EQ(run(waiter), 0) << waiter.err();
}

// ---- bad input, missing command, no server ------------------------------------------------------

TEST(CliErrors, BadInputExits125WithAMessage) {
  const auto path = zkt::unique_path("cli-bad");
  const std::string c = zkt::connect();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{}, "no command"},
      {{"frobnicate", path}, "unknown command"},
      {{"exec", "--connect", c, "relative/path", "--", "true"}, "not absolute"},
      {{"exec", "--connect", c, "/zookeeper/x", "--", "true"}, "/zookeeper"},
      {{"exec", "--connect", c, path + "/", "--", "true"}, "trailing"},
      {{"exec", "--connect", c, path}, "needs a command"},
      {{"exec", "--connect", c, path, "--"}, "needs a command"},
      {{"exec", "--connect", c}, "needs a lock PATH"},
      {{"exec", "--connect", c, "--timeout", "5parsecs", path, "--", "true"}, "bad --timeout"},
      {{"exec", "--connect", c, "--timeout", "-1", path, "--", "true"}, "bad --timeout"},
      {{"exec", "--connect", c, "--timeout", "", path, "--", "true"}, "bad --timeout"},
      {{"exec", "--connect", c, "--grace", "soon", path, "--", "true"}, "bad --grace"},
      {{"exec", "--connect", c, "--permits", "0", path, "--", "true"}, "bad --permits"},
      {{"exec", "--connect", c, "--permits", "two", path, "--", "true"}, "bad --permits"},
      {{"exec", "--connect", c, "--permits", "2", "--take", "0", path, "--", "true"}, "bad --take \"0\""},
      {{"exec", "--connect", c, "--permits", "2", "--take", "3", path, "--", "true"},
       "--take 3 is more than the semaphore's --permits 2"},
      {{"exec", "--connect", c, "--take", "2", path, "--", "true"}, "--take K needs --permits N"},
      {{"exec", "--connect", c, "--shared", "--permits", "2", path, "--", "true"}, "exclude each other"},
      {{"exec", "--connect", c, "--write", "--mutex", path, "--", "true"}, "exclude each other"},
      {{"exec", "--connect", c, "--mutex", "--permits", "2", path, "--", "true"}, "exclude each other"},
      {{"exec", "--connect", c, "--write", "--shared", path, "--", "true"}, "exclude each other"},
      {{"exec", "--connect", c, "--mutex=yes", path, "--", "true"}, "takes no value"},
      {{"ls", "--connect", c, "--mutex", path}, "does not apply"},
      {{"exec", "--connect", c, "--kill-signal", "NOPE", path, "--", "true"}, "bad --kill-signal"},
      {{"exec", "--connect", c, "--bogus", path, "--", "true"}, "unknown option"},
      {{"exec", "--connect", c, "--timeout"}, "needs a value"},
      {{"ls", "--connect", c, "--shared", path}, "does not apply"},
      {{"ls", "--connect", c, path, "extra"}, "unexpected argument"},
      {{"ls", path}, "no ZooKeeper"},
      {{"ls", "--connect", "localhost", path}, "bad connect string"},
      {{"ls", "--connect", "127.0.0.1:99999", path}, "65535"},
      {{"wait", "--connect", c, "--session-timeout", "0", path}, "bad --session-timeout"},
  };
  for (const auto& [args, message] : cases) {
    std::string shown;
    for (const auto& a : args) shown += " " + a;
    zklock_run r{args};
    EXPECT_EQ(run(r), 125) << "zklock" << shown << "\n" << r.err();
    const auto err = r.err();
    EXPECT_TRUE(err.starts_with("zklock: ")) << shown << ": " << err;
    EXPECT_NE(err.find(message), std::string::npos) << "zklock" << shown << ": " << err;
  }
  EXPECT_FALSE(zkt::exists(path)) << "bad input must not touch the server";
}

// Argument errors found by the command-line parser name the option (or word) that is wrong,
// wherever it stands: before PATH, after it, or with an inline value.
TEST(CliErrors, ArgumentErrorsNameTheOption) {
  const auto path = zkt::unique_path("cli-args");
  const std::string c = zkt::connect();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases{
      {{"--timeout", "5s", "exec", path, "--", "true"}, "the command comes first"},
      {{"nonsense", "exec", "--connect", c, path, "--", "true"}, "unknown command \"nonsense\""},
      {{"exec", "--connect", c, path, "--bogus", "--", "true"}, "unknown option \"--bogus\""},
      {{"ls", "--connect", c, "--frob=1", path}, "unknown option \"--frob\""},
      {{"exec", "--connect", c, "--permits=two", path, "--", "true"}, "bad --permits \"two\""},
      {{"exec", "--connect", c, path, "--timeout=1x", "true"}, "bad --timeout \"1x\""},
      {{"exec", "--connect", c, path, "--grace"}, "option --grace needs a value"},
      {{"wait", "--connect", c, "--json", path}, "option --json does not apply to wait"},
      {{"wait", "--connect", c, path, "--shared=1"}, "option --shared does not apply to wait"},
      {{"exec", "--connect", c, "--", path, "true"}, "exec needs a lock PATH"},
  };
  for (const auto& [args, message] : cases) {
    std::string shown;
    for (const auto& a : args) shown += " " + a;
    zklock_run r{args};
    EXPECT_EQ(run(r), 125) << "zklock" << shown << "\n" << r.err();
    EXPECT_NE(r.err().find("zklock: " + message), std::string::npos) << "zklock" << shown << ": " << r.err();
    EXPECT_EQ(r.out(), "") << shown;
  }
  EXPECT_FALSE(zkt::exists(path)) << "bad input must not touch the server";
}

TEST(CliErrors, CommandNotFound127NotExecutable126) {
  const auto path = zkt::unique_path("cli-cmd");
  scratch_dir dir;
  const auto script = (dir.path / "not-executable.sh").string();
  std::ofstream{script} << "#!/bin/sh\necho ran\n";
  ::chmod(script.c_str(), 0644);
  zklock_run missing{{"exec", "--connect", zkt::connect(), path, "--", "zklock-no-such-command-xyz"}};
  EXPECT_EQ(run(missing), 127) << missing.err();
  EXPECT_NE(missing.err().find("not found"), std::string::npos) << missing.err();
  zklock_run missing_file{{"exec", "--connect", zkt::connect(), path, "--", (dir.path / "nothing").string()}};
  EXPECT_EQ(run(missing_file), 127) << missing_file.err();
  zklock_run noexec{{"exec", "--connect", zkt::connect(), path, "--", script}};
  EXPECT_EQ(run(noexec), 126) << noexec.err();
  EXPECT_NE(noexec.err().find("not executable"), std::string::npos) << noexec.err();
  EXPECT_EQ(noexec.out(), "");
  EXPECT_FALSE(zkt::exists(path)) << "a command that cannot run must not take the lock";
}

TEST(CliErrors, UnreachableServerExits69) {
  const std::string nowhere = "127.0.0.1:" + std::to_string(zkt::free_port());
  const auto path = zkt::unique_path("cli-down");
  for (const auto& args : std::vector<std::vector<std::string>>{
           {"exec", "--connect", nowhere, "--connect-timeout", "500ms", path, "--", "echo", "ran"},
           {"ls", "--connect", nowhere, "--connect-timeout", "500ms", path},
           {"wait", "--connect-timeout", "500ms", path}}) {
    zklock_run r{args, {{"ZOOKEEPER_HOSTS", nowhere}}};
    EXPECT_EQ(run(r), 69) << args.front() << ": " << r.err();
    EXPECT_NE(r.err().find("cannot connect"), std::string::npos) << r.err();
    EXPECT_EQ(r.out(), "");
  }
}

}  // namespace
