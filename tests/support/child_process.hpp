// SPDX-License-Identifier: Apache-2.0
// Test support: a child process the test owns (fork + exec), with optional pipes to its stdin and
// from its stdout, addressed through a pidfd (so a signal never hits a recycled pid), and killed
// and reaped by the destructor: no test leaves a process behind, even when it fails halfway.
#pragma once
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace zkt {

/// How a child's standard stream is connected.
enum class stream { inherit, pipe, null };

/// How child_process starts its child.
struct spawn_options {
  stream in = stream::pipe;             ///< stdin: a pipe from the test (see send, close_stdin)
  stream out = stream::pipe;            ///< stdout: a pipe to the test (see read_line, read_available)
  std::filesystem::path err_file;       ///< stderr into this file (truncated); empty: inherited
  std::optional<std::vector<std::string>> env;  ///< the whole environment; nullopt: this process's
  bool new_group = false;       ///< in a process group of its own, which the destructor kills whole
  bool die_with_parent = false;  ///< PR_SET_PDEATHSIG SIGKILL: dies with the thread that started it
};

/// One child process (see the file comment).
class child_process {
 public:
  /// Effects: starts `argv` (argv[0] found on PATH if it has no '/'). Throws: std::system_error.
  explicit child_process(std::vector<std::string> argv, const spawn_options& o = {});
  /// Effects: SIGKILLs it unless reaped (with new_group: its whole group, even after it exited),
  /// reaps it, closes the pipes.
  ~child_process();
  child_process(const child_process&) = delete;
  child_process& operator=(const child_process&) = delete;

  /// Returns: the argv that re-executes this test binary (ZKLOCK_TEST_BIN, else /proc/self/exe) as
  /// `<bin> FLAG PARENT_PID ROLE_ARGS...`, for a main() that runs roles (see child_main below).
  static std::vector<std::string> self(std::string_view flag, const std::vector<std::string>& role_args);

  /// Returns: the child's pid.
  pid_t pid() const noexcept { return pid_; }

  /// Effects: writes `line` and a newline to its stdin. Returns: false if the child no longer reads
  /// it (EPIPE: only where the test ignores SIGPIPE, which kills it otherwise). Throws:
  /// std::system_error on other errors.
  bool send(std::string_view line);

  /// Effects: closes its stdin (a child that reads it sees the end of file).
  void close_stdin() noexcept;

  /// Returns: its next stdout line without the newline (at the end of stdout, a last line that
  /// lacks one), or nullopt at the end of stdout or after `timeout`.
  std::optional<std::string> read_line(std::chrono::milliseconds timeout);

  /// Returns: what stdout holds now and read_line has not returned (all of it once the child exited).
  std::string read_available();

  /// Effects: sends `sig` unless the child was reaped. Throws: std::system_error on failure.
  void signal(int sig);

  /// Effects: SIGKILL unless reaped; errors ignored (for cleanup paths).
  void kill_quietly() noexcept;

  /// Effects: SIGSTOP, then waits until every thread of it has stopped.
  /// Returns: true once stopped; false if it exited instead (or was reaped).
  bool stop();

  /// Returns: whether its state in /proc is `state` ('T' stopped, 'S' sleeping, ...) within `limit`.
  bool await_state(char state, std::chrono::milliseconds limit) const;

  /// Returns: whether it has exited (without reaping it).
  bool exited() const;

  /// Effects: waits at most `timeout` for it to exit and reaps it.
  /// Returns: its wait status, or nullopt if it is still running.
  std::optional<int> wait(std::chrono::milliseconds timeout);

 private:
  void reap() noexcept;
  bool drain();
  void close_fds() noexcept;

  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1, pidfd_ = -1;
  bool new_group_ = false;
  bool reaped_ = false;
  bool eof_ = false;
  int status_ = 0;
  std::string buf_;
};

/// Returns: a wait status in words ("exit 0", "killed by signal 9").
std::string describe(int status);

/// The roles a test binary's children can run: a role's name, and its main() taking the role's
/// arguments and returning the exit code.
using role_table = std::map<std::string, std::function<int(const std::vector<std::string>& args)>, std::less<>>;

/// The main() of a child started through child_process::self: `argv` is `<bin> FLAG PARENT_PID
/// ROLE ARGS...`. Effects: sets PR_SET_PDEATHSIG SIGKILL (it dies with the test's spawning thread),
/// then runs ROLE from `roles`. Returns: the role's exit code; 3 if the parent died before the
/// prctl took hold; 2 after an exception or for an unknown role, reported on stderr as "`who` PID: what".
int child_main(int argc, char** argv, std::string_view who, const role_table& roles);

}  // namespace zkt
