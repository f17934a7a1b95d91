// SPDX-License-Identifier: Apache-2.0
// What the tests of the `zklock` binary share (cli_test.cpp, cli_auth_test.cpp, cli_flock_test.cpp): one run of the
// binary (ZKLOCK_CLI_BIN) in a process group of its own with its stdout on a pipe and its stderr
// in a file, scratch directories, the contender nodes of a path, and splitting output.
#pragma once
#include <sys/wait.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>
#include "child_process.hpp"
#include "posix_io.hpp"
#include "scratch_dir.hpp"
#include "zk_test.hpp"

extern char** environ;

namespace zkcli_test {

using namespace std::chrono_literals;
using std::chrono::steady_clock;

#ifndef ZKLOCK_CLI_BIN
#error "ZKLOCK_CLI_BIN (the path of the zklock binary) must be defined"
#endif

/// A scratch directory, removed with its contents.
struct scratch_dir : zkt::scratch_dir {
  scratch_dir() : zkt::scratch_dir("zklock-cli") {}
};

inline std::string slurp(const std::filesystem::path& p) { return zkt::read_file(p); }

/// Environment changes for a run: a value sets the variable, nullopt removes it.
using env_changes = std::map<std::string, std::optional<std::string>>;

/// One run of the zklock binary in a process group of its own (with CMD and whatever CMD starts),
/// stdout on a pipe, stderr in a file, stdin on a pipe kept by the test (closing it ends a CMD
/// that waits with `read`). The destructor SIGKILLs the whole group and reaps: nothing is left
/// behind, even when a test fails halfway. ZOOKEEPER_HOSTS and ZKLOCK_AUTH are removed unless `env`
/// sets them. `in`:
/// stdin from /dev/null (stream::null) instead of the pipe.
class zklock_run {
 public:
  explicit zklock_run(std::vector<std::string> args, env_changes env = {}, zkt::stream in = zkt::stream::pipe)
      : proc_(command(std::move(args)), options(std::move(env), err_dir_.path / "stderr", in)) {}

  ~zklock_run() {
    for (pid_t g : groups_) ::kill(-g, SIGKILL);  // CMD's group, and what CMD left in it
  }  // then proc_ kills zklock's group and reaps zklock
  zklock_run(const zklock_run&) = delete;
  zklock_run& operator=(const zklock_run&) = delete;

  pid_t pid() const noexcept { return proc_.pid(); }

  /// Effects: the destructor SIGKILLs process group `pgid` too (CMD runs in a group of its own,
  /// whose id is CMD's pid).
  void kill_group_at_end(pid_t pgid) { groups_.push_back(pgid); }

  /// Returns: the next line of stdout (the last one may lack its newline), or nullopt at its end
  /// or after `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout = 60s) { return proc_.read_line(timeout); }

  /// Effects: closes CMD's stdin (ends a `read`).
  void close_stdin() { proc_.close_stdin(); }

  /// Effects: sends `sig` to the zklock process alone.
  void signal(int sig) { proc_.signal(sig); }

  /// Returns: whether zklock has exited.
  bool exited() { return proc_.exited(); }

  /// Effects: waits at most `timeout` for zklock to exit. Returns: its exit code, 256 + N if
  /// killed by signal N, or -1 if still running.
  int wait(std::chrono::milliseconds timeout = 60s) {
    const auto status = proc_.wait(timeout);
    if (!status) return -1;
    if (WIFEXITED(*status)) return WEXITSTATUS(*status);
    if (WIFSIGNALED(*status)) return 256 + WTERMSIG(*status);
    return -2;
  }

  /// Returns: stdout not yet returned by read_line (all of it once zklock has exited).
  std::string out() { return proc_.read_available(); }

  /// Returns: what zklock wrote to stderr so far.
  std::string err() const { return slurp(err_dir_.path / "stderr"); }

 private:
  static std::vector<std::string> command(std::vector<std::string> args) {
    args.insert(args.begin(), ZKLOCK_CLI_BIN);
    return args;
  }
  static zkt::spawn_options options(env_changes env, std::filesystem::path err_file, zkt::stream in) {
    env.try_emplace("ZOOKEEPER_HOSTS", std::nullopt);
    env.try_emplace("ZKLOCK_AUTH", std::nullopt);
    zkt::spawn_options o;
    o.in = in;
    o.env.emplace();
    for (char** e = environ; *e; ++e) {
      const std::string_view v = *e;
      if (!env.contains(std::string{v.substr(0, v.find('='))})) o.env->emplace_back(v);
    }
    for (const auto& [k, v] : env)
      if (v) o.env->push_back(k + "=" + *v);
    o.err_file = std::move(err_file);
    o.new_group = true;
    o.die_with_parent = true;
    return o;
  }

  scratch_dir err_dir_;
  zkt::child_process proc_;
  std::vector<pid_t> groups_;
};

/// Runs zklock to the end. Returns: its exit code (see zklock_run::wait).
inline int run(zklock_run& r, std::chrono::milliseconds timeout = 60s) { return r.wait(timeout); }

/// Returns: the contender nodes under `path`: its children but the acquire records that `zklock
/// exec` holders add beside their nodes ("zkstats-<token>").
inline std::vector<std::string> contender_nodes(const std::string& path) {
  auto kids = zkt::children(path);
  std::erase_if(kids, [](const std::string& k) { return k.starts_with("zkstats-"); });
  return kids;
}

/// Returns: whether `r`'s stderr shows `text` `n` times within 30 s (false once `r` has exited
/// without writing it that often).
inline bool await_err(zklock_run& r, const std::string& text, std::size_t n = 1) {
  const auto limit = steady_clock::now() + 30s;
  for (;;) {
    const bool exited = r.exited();  // first: what it wrote before it exited is in the file now
    const auto err = r.err();
    std::size_t seen = 0;
    for (auto at = err.find(text); at != std::string::npos; at = err.find(text, at + 1)) ++seen;
    if (seen >= n) return true;
    if (exited || steady_clock::now() > limit) return false;
    std::this_thread::sleep_for(2ms);  // polling a file the process writes, not a synchronisation
  }
}

/// Returns: whether `path` has `n` contender nodes within 30 s (false at once if `r` exited).
inline bool await_children(const std::string& path, std::size_t n, zklock_run& r) {
  const auto limit = steady_clock::now() + 30s;
  while (contender_nodes(path).size() != n) {
    if (r.exited() || steady_clock::now() > limit) return false;
    std::this_thread::sleep_for(2ms);  // polling interval, not a synchronisation
  }
  return true;
}

inline std::vector<std::string> words(const std::string& line) {
  std::istringstream in{line};
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

inline std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in{text};
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

/// Returns: the number after "token=" in `line` (0 if none).
inline std::int64_t token_in(const std::string& line) {
  const auto pos = line.find("token=");
  return pos == std::string::npos ? 0 : std::stoll(line.substr(pos + 6));
}

inline std::string hostname() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

/// Returns: `zklock exec --connect ... MODE... REST...`.
inline std::vector<std::string> exec_args(const std::vector<std::string>& mode, const std::vector<std::string>& rest) {
  std::vector<std::string> a{"exec", "--connect", zkt::connect()};
  a.insert(a.end(), mode.begin(), mode.end());
  a.insert(a.end(), rest.begin(), rest.end());
  return a;
}

/// A holder: `zklock exec [mode...] PATH -- sh -c 'echo held token=...; read x; exit 0'`. It holds until
/// release(); held() waits for CMD to start and returns its token.
struct holder {
  zklock_run run;
  holder(const std::string& path, std::vector<std::string> mode = {})
      : run([&] {
          std::vector<std::string> a{"exec", "--connect", zkt::connect()};
          a.insert(a.end(), mode.begin(), mode.end());
          a.insert(a.end(), {path, "--", "sh", "-c", "echo held token=$ZKLOCK_FENCING_TOKEN; read x; exit 0"});
          return a;
        }()) {}
  std::int64_t held() {
    const auto line = run.read_line();
    EXPECT_TRUE(line && line->starts_with("held token=")) << (line ? *line : "(no line)") << "\n" << run.err();
    return line ? token_in(*line) : 0;
  }
  int release() {
    run.close_stdin();
    return run.wait();
  }
};

}  // namespace zkcli_test
