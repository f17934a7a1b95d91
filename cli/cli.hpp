// SPDX-License-Identifier: Apache-2.0
// What the files of the `zklock` tool share: exit codes, options, messages, and each file's entry points.
//
//   main.cpp            the command line (CLI11): subcommands, options, help, usage errors
//   values.cpp          option values: durations and signals
//   session.cpp         opening the session, and which exit code a library error means
//   output.cpp          times, spans and JSON strings for `ls`
//   exec.cpp            `zklock exec`: acquire in the chosen mode, then hand CMD to supervise.cpp
//   supervise.cpp       CMD's process group: fork/exec, subreaper, signals, terminal, lost lock
//   ls.cpp              `zklock ls`: the queue and the holders' acquire records; -r: every lock below
//   holders.cpp         who holds a lock, for exec's conflict messages and its --verbose queue reports
//   wait.cpp            `zklock wait`: until the path has no contenders
//
// Include this after every other header of a file: it imports the zklock module.
#pragma once

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
import zklock;

namespace zkcli {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

// ---- exit codes (docs/cli.md) -------------------------------------------------------------------

namespace exit_code {
constexpr int ok = 0;
constexpr int unavailable = 69;     // EX_UNAVAILABLE: cannot reach ZooKeeper, no new session in time
constexpr int no_input = 66;        // EX_NOINPUT: ls: the path does not exist
constexpr int software = 70;        // EX_SOFTWARE: anything else that went wrong in zklock
constexpr int lost = 75;            // EX_TEMPFAIL: the lock was lost (CMD was stopped)
constexpr int no_permission = 77;   // EX_NOPERM: the server refused (ACL, authentication)
constexpr int timeout = 124;        // like timeout(1): the lock was not acquired in time
constexpr int usage = 125;          // bad command line or bad input
constexpr int cannot_execute = 126; // CMD found but not executable
constexpr int not_found = 127;      // CMD not found
constexpr int signal_base = 128;    // + signal number
}  // namespace exit_code

// ---- messages (session.cpp) ---------------------------------------------------------------------

/// --verbose: progress messages on stderr.
extern bool g_verbose;
/// --verbose twice: the ZooKeeper C client's log too. Not with one --verbose: the C client formats
/// a server's address into one static buffer for every handle, and zklock has two handles at once
/// while it replaces a session, so their log lines race (and may garble).
extern bool g_client_log;

/// Effects: prints "zklock: " and the printf-formatted message on stderr, with a newline.
template <class... A>
void say(const char* fmt, A... a) {
  std::fprintf(stderr, "zklock: ");
  std::fprintf(stderr, fmt, a...);
  std::fputc('\n', stderr);
}

/// A failure that ends zklock with `code` after printing `message`.
struct exit_error {
  int code;
  std::string message;
};

/// Returns: a library message without its "zklock: " or "zklock::session: " prefix (say() adds one).
std::string tidy(std::string_view what);

/// Throws: exit_error (usage) with `message` and a pointer to --help.
[[noreturn]] void usage_error(const std::string& message);

// ---- options ------------------------------------------------------------------------------------

/// exec's lock modes. `write` (the default) and `shared` are the two sides of one read/write lock,
/// so they exclude each other like flock -x and -s; `mutex` and `permits` use node kinds of their own.
enum class lock_mode { write, shared, mutex, permits };

/// The parsed command line (main.cpp).
struct options {
  std::string path;
  std::vector<std::string> argv;  // exec: CMD and its arguments
  lock_mode mode = lock_mode::write;
  bool mode_given = false;
  std::ptrdiff_t permits = 0;
  std::optional<ms> timeout;  // none: forever
  std::optional<std::string> connect;
  ms session_timeout = 10s;
  ms connect_timeout = 5s;
  int kill_signal = SIGTERM;
  ms grace = 5s;
  bool json = false;
  bool recursive = false;  // ls -r: every lock at or below PATH
};

// ---- option values (values.cpp) -----------------------------------------------------------------

/// Returns: D as milliseconds (rounded up). Throws: exit_error (usage) naming `option`.
ms parse_duration(std::string_view option, std::string_view text, bool zero_ok);
/// Returns: the signal named by `text` ("TERM", "SIGTERM", "term", "15"). Throws: exit_error (usage).
int parse_signal(std::string_view text);
/// Returns: "SIGTERM" for 15, "signal N" for a signal without a name.
std::string signal_name(int sig);
/// Returns: the lease count in `text` (1..1000000). Throws: exit_error (usage).
std::ptrdiff_t parse_permits(std::string_view text);

// ---- the session (session.cpp) ------------------------------------------------------------------

/// Returns: the exit code and message for an exception from the library.
exit_error classify(const std::exception& e);
/// Returns: a session as `o` says; warns (always) if the server granted another session timeout
/// than the one asked for. Throws: exit_error (usage for a bad connect string, else 69).
std::unique_ptr<zklock::session> open_session(const options& o);

// ---- output for ls (output.cpp) -----------------------------------------------------------------

/// Returns: `ms` since the epoch as ISO 8601 UTC, e.g. "2025-01-31T12:00:00.250Z".
std::string iso_time(long long ms_since_epoch);
/// Returns: `s` as a JSON string literal, quotes included.
std::string json_string(std::string_view s);
/// Returns: a duration for people: "850ms", "12.3s", "4m05s", "2h07m".
std::string span(long long ms_count);

// ---- who holds it (holders.cpp) -----------------------------------------------------------------

/// Returns: whether a lock of mode `m` queues with (and so waits for) contenders of side `k`.
bool counts(lock_mode m, zklock::contender_side k);
/// Returns: who `c` is, for people: "host db-1, pid 4127, since 2025-01-31T02:00:00.114Z, token 42"
/// (the parts it stored; Curator stores only its IP address, as the host).
std::string describe(const zklock::contender_info& c);
/// Returns: who holds `o.path` in `o.mode` now, for a message: "held by host ..., token 42" (several
/// holders separated by "; "), then in parentheses a semaphore's leases used and the waiters queued
/// (others than this session's); "" if it cannot be read (the message is then said without it).
std::string holders_of(zklock::session& s, const options& o);

/// exec --verbose: a thread that watches the queue of `o.path` while exec waits for it and says,
/// for each node that exec queues (again, on a new session), its position and whom it waits
/// behind. Best effort: a failure ends the reports only.
class queue_reporter {
 public:
  queue_reporter(zklock::session& s, const options& o);
  /// Effects: stops the thread and waits for it. Never throws.
  ~queue_reporter();
  queue_reporter(const queue_reporter&) = delete;
  queue_reporter& operator=(const queue_reporter&) = delete;

 private:
  std::stop_source stop_;
  std::thread thread_;
};

// ---- the commands -------------------------------------------------------------------------------

/// Each returns zklock's exit code; throws exit_error or the library's exceptions (see classify).
int run_exec(const options& o);
int run_ls(const options& o);
int run_wait(const options& o);


/// Effects: zklock::on_live_session(s, {deadline}, f): runs `f`, and again on the next session each
/// time the session ends under it; with --verbose, says so. Returns: what `f` returns.
/// Throws: what `f` throws; session_expired if no next session is connected before `deadline`.
template <class F>
auto on_live_session(zklock::session& s, steady::time_point deadline, F f) {
  bool again = false;
  auto told = [&] {
    if (std::exchange(again, true) && g_verbose)
      say("on a new session (0x%llx)", static_cast<unsigned long long>(s.id()));
    try {
      return f();
    } catch (const std::system_error& e) {
      if (g_verbose && e.code() == zklock::make_error_code(zklock::errc::session_expired))
        say("%s", "session expired: waiting for the next one");
      throw;
    }
  };
  return *zklock::on_live_session(s, {deadline}, told);  // no stop token: never nullopt
}

// ---- CMD's process group (supervise.cpp) --------------------------------------------------------

/// A file descriptor that closes itself.
class fd_t {
 public:
  fd_t() = default;
  explicit fd_t(int fd) : fd_(fd) {}
  ~fd_t() { reset(); }
  fd_t(fd_t&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_t& operator=(fd_t&& o) noexcept {
    if (this != &o) {
      reset();
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const noexcept { return fd_; }

 private:
  void reset() noexcept;  // closes the descriptor, if any
  int fd_ = -1;
};

/// Effects: notes the descriptors zklock was started with: CMD inherits them (and no other).
void remember_inherited_fds();
/// Returns: the file to execute for `cmd` (searched in PATH unless it has a '/').
/// Throws: exit_error 127 (not found) or 126 (not executable).
std::string resolve_command(const std::string& cmd);
/// Effects: blocks the forwarded signals, SIGCHLD, SIGCONT and SIGTTOU in this thread (and every
/// thread it starts). Returns: a signalfd that reads the forwarded signals, SIGCHLD and SIGCONT.
fd_t block_signals();

/// While the lock is being acquired on the main thread, a signal ends the wait: this thread reads
/// the signalfd and closes the session, which makes the acquire throw.
class acquire_interrupter {
 public:
  acquire_interrupter(zklock::session& s, int sigfd);
  ~acquire_interrupter() { stop(); }
  acquire_interrupter(const acquire_interrupter&) = delete;
  acquire_interrupter& operator=(const acquire_interrupter&) = delete;
  /// Effects: ends the watching. Returns: the signal that interrupted the acquire, or 0.
  int stop();

 private:
  void run();
  zklock::session& s_;
  int sigfd_;
  fd_t stop_r_, stop_w_;
  std::atomic<int> signal_{0};
  std::thread thread_;
};

/// What supervise() runs, and how it stops it.
struct child_command {
  std::string file;               ///< the resolved executable
  std::vector<std::string> argv;  ///< CMD and its arguments
  std::vector<std::string> env;   ///< "NAME=value" set for CMD, replacing inherited ones
  std::string path;               ///< the lock path (for messages)
  int kill_signal = SIGTERM;      ///< stops CMD's group when the lock is lost
  ms grace = 5s;                  ///< between the kill signal and SIGKILL
};

/// Effects: runs CMD in a process group of its own (zklock a subreaper, the terminal handed over),
/// passes the signals of `sigfd` on to the group, stops the group when `lost` fires, waits until
/// the group is gone, then calls `release`. Returns: CMD's exit status (128+N if killed by N),
/// 75 if the lock was lost, 126/127 if CMD could not be executed.
int supervise(const child_command& cmd, int sigfd, std::stop_token lost, const std::function<void()>& release);

}  // namespace zkcli
