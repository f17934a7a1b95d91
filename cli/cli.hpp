// SPDX-License-Identifier: Apache-2.0
// What the files of the `zklock` tool share: exit codes, options, messages, and each file's entry points.
//
//   main.cpp            the command line (CLI11): subcommands, options, help, usage errors
//   values.cpp          option values: durations and signals
//   auth.cpp            credentials (--auth, --auth-file, $ZKLOCK_AUTH) and exec's --acl
//   session.cpp         opening the session, and which exit code a library error means
//   diagnose.cpp        the servers of a connect string: which one was reached, why none was
//   output.cpp          times, spans and JSON strings for `ls`
//   exec.cpp            acquiring in the chosen mode (for exec and lock); `zklock exec`: then hand
//                       CMD to supervise.cpp
//   lock.cpp            `zklock lock`: hold until a signal or the end of stdin
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
constexpr int config = 78;          // EX_CONFIG: the chroot does not exist on the server; TLS refused or not built in
constexpr int timeout = 124;        // like timeout(1): the lock was not acquired in time (default of -E)
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
/// Returns: `e.what()` tidied, and for a std::system_error without its code's message when the
/// text before it already says the same ("authentication failed: authentication failed (...)").
std::string tidy(const std::exception& e);

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
  std::optional<std::string> shell_command;  // exec -c STRING (run as /bin/sh -c STRING)
  lock_mode mode = lock_mode::write;
  bool mode_given = false;
  std::ptrdiff_t permits = 0;
  std::ptrdiff_t take = 1;  // --take K: the permits of the one lease taken (1..permits)
  bool take_given = false;
  std::optional<std::ptrdiff_t> new_max;  // permits PATH N: the lease count to store
  std::optional<ms> timeout;  // none: forever
  std::string timeout_by;     // the option that set it (--timeout, --wait or --nonblock)
  int conflict_code = exit_code::timeout;  // -E: not acquired (taken, timed out), wait: not free
  std::optional<std::string> connect;
  ms session_timeout = 10s;
  ms connect_timeout = 5s;
  int kill_signal = SIGTERM;
  ms grace = 5s;
  ms max_hold{0};       // exec --max-hold: the hold ends (CMD's group is stopped, exit 75) after it; 0: never
  ms hold_at_least{0};  // exec --hold-at-least: a CMD that ends sooner keeps the lock until then; 0: no floor
  bool revoke_ignore = false;  // exec --on-revoke ignore: a revocation request does not stop CMD
  ms revoke_grace = 10s;       // revoke --grace: how long holders have to let go once asked
  bool revoke_force = false;   // revoke --force: delete at once, no grace
  std::string revoke_node;     // revoke --node: that contender node only
  bool json = false;
  std::vector<zklock::auth_info> auth;  // --auth, --auth-file; else $ZKLOCK_AUTH
  bool auth_given = false;              // --auth or --auth-file given: $ZKLOCK_AUTH is not read
  std::vector<zklock::acl_entry> acl;   // exec --acl: of the nodes it creates (empty: the library's default)
  zklock::tls_options tls;  // --tls-ca, --tls-cert, --tls-key, --tls-key-password-file or $ZKLOCK_TLS_KEY_PASSWORD
  zklock::sasl_options sasl;  // --sasl-*, the password from --sasl-password-file or $ZKLOCK_SASL_PASSWORD
  bool sasl_given = false;    // --sasl-mechanism or --sasl-user given
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
std::ptrdiff_t parse_permits(std::string_view text, const char* option = "--permits");
/// Returns: the exit code of -E in `text`: 0..127 but none of zklock's own codes (69, 70, 75, 77,
/// 78, 125, 126, 127). Throws: exit_error (usage) naming the option and why.
int parse_conflict_code(std::string_view text);

// ---- credentials and ACLs (auth.cpp) ------------------------------------------------------------

/// An option whose values auth.cpp parses; main.cpp declares it with CLI11 and calls `take` with
/// each value given, in order.
struct option_spec {
  std::string name, type, help;
  std::function<void(const std::string&)> take;
};
/// Returns: --auth and --auth-file (every command), which add to o.auth. Each `take` throws
/// exit_error (usage) for bad input: a malformed credential, an --auth-file that cannot be read,
/// holds none, or that group or others may access.
std::vector<option_spec> auth_options(options& o);
/// Returns: --tls-ca, --tls-cert, --tls-key and --tls-key-password-file (every command), which
/// fill o.tls. Each `take` throws exit_error (usage) for a password file that cannot be read, or
/// that group or others may access.
std::vector<option_spec> tls_options(options& o);
/// Effects: checks the TLS options given (all three files or none) and, if the key's passphrase
/// was not given in a file, takes $ZKLOCK_TLS_KEY_PASSWORD. Returns: the session's TLS options,
/// or nothing for plain TCP. Throws: exit_error (usage).
std::optional<zklock::tls_options> tls_from_options(const options& o);
/// Returns: --sasl-mechanism, --sasl-user, --sasl-password-file, --sasl-service, --sasl-host and
/// --sasl-realm (every command), which fill o.sasl. Each `take` throws exit_error (usage) for a
/// password file that cannot be read, or that group or others may access.
std::vector<option_spec> sasl_options(options& o);
/// Effects: if SASL was asked for and the password not given in a file, takes
/// $ZKLOCK_SASL_PASSWORD. Returns: the session's SASL options, or nothing. Throws: exit_error (usage).
std::optional<zklock::sasl_options> sasl_from_options(const options& o);
/// Returns: --acl (exec), which adds entries to o.acl. Its `take` throws exit_error (usage).
option_spec acl_option(options& o);
/// Effects: unless --auth or --auth-file was given, adds the credentials of $ZKLOCK_AUTH (one
/// SCHEME:CREDENTIALS per line) to o.auth. Throws: exit_error (usage).
void auth_from_environment(options& o);
/// Returns: who `auth` says the session is, without secrets: "digest user alice, ip".
std::string identities(const std::vector<zklock::auth_info>& auth);
/// Returns: `text`, "SCHEME:CREDENTIALS", as credentials. Throws: exit_error (usage) naming
/// `source` (never the text: it holds a secret).
zklock::auth_info parse_auth(std::string_view source, std::string_view text);
/// Returns: the ACL `spec`, "SCHEME:ID:PERMS[,...]" (zkCli's syntax, PERMS of r w c d a; the ID is
/// what lies between the first and the last ':'). Throws: exit_error (usage) naming the entry.
std::vector<zklock::acl_entry> parse_acl(std::string_view spec);

// ---- the session (session.cpp) ------------------------------------------------------------------

/// Returns: the exit code and message for an exception from the library.
exit_error classify(const std::exception& e);
/// Returns: a session as `o` says; with --verbose, says which server it reached; warns (always) if
/// the server granted another session timeout than the one asked for. Throws: exit_error: usage
/// for a bad connect string, 78 for a missing chroot, 77 for refused credentials, else 69 with why
/// (a host that does not resolve, a refused connection, a server that does not answer).
std::unique_ptr<zklock::session> open_session(const options& o);

// ---- the servers of a connect string (diagnose.cpp) ---------------------------------------------

/// Returns: the server `s` reached, named as the connect string `connect` names it: "zk2:2181 at
/// 10.0.0.2:2181", or "10.0.0.2:2181" when that is how the connect string gives it (or no host of
/// it resolves to the address); "" while `s` has no connection up.
std::string reached_server(const zklock::session& s, std::string_view connect);
/// Returns: why no session could be opened with `connect`, by looking again: the first host that
/// does not resolve (host "zk9" does not resolve: Name or service not known), else what each
/// server address does within `limit` with a TCP connection (refused, no answer) and with the
/// four-letter word "srvr" sent on it (an answer: the server is up, or says it does not serve
/// requests; none: a server that never answers), "; "-separated (with a zero `limit`, only the names are looked up). "" if all of
/// that looks fine.
std::string why_unreachable(std::string_view connect, ms limit);

// ---- output for ls (output.cpp) -----------------------------------------------------------------

/// Returns: `ms` since the epoch as ISO 8601 UTC, e.g. "2025-01-31T12:00:00.250Z".
std::string iso_time(long long ms_since_epoch);
/// Returns: `s` as a JSON string literal, quotes included.
std::string json_string(std::string_view s);
/// Returns: a duration for people: "850ms", "12.3s", "4m05s", "2h07m".
std::string span(long long ms_count);
/// Returns: "1 holder" / "2 waiters": `n` and the noun, in the plural unless n is 1.
std::string count_of(std::size_t n, const char* noun);

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
int run_lock(const options& o);
int run_ls(const options& o);
int run_wait(const options& o);
/// `zklock revoke PATH`: asks the holders to let go, then forces them (revoke.cpp).
int run_revoke(const options& o);
/// `zklock rm PATH`: removes an idle lock or semaphore path (rm.cpp).
int run_rm(const options& o);
/// Effects: `zklock permits PATH [N]` (permits.cpp). Returns: its exit code.
int run_permits(const options& o);

/// A hold of PATH as exec and lock take it (acquire_lock).
struct held_lock {
  std::int64_t token = 0;         ///< the hold's fencing token
  std::stop_token lost;           ///< fires when the lock is lost (may have fired already)
  std::stop_token revoked;        ///< fires when a revoker asks the hold to let go (on_revoke::notify)
  steady::time_point granted{};   ///< when it was granted (no later than the library's own grant time)
  std::function<void()> release;  ///< deletes the acquire record, then releases; never throws
  std::shared_ptr<void> keep;     ///< the session and the lock object behind the hold
};

/// How acquire_lock() ended: a hold, or none and the exit code to end with.
struct acquire_result {
  std::optional<held_lock> held;
  int exit = exit_code::ok;
};

/// Effects: opens the session (open_session), warns about contenders of kinds o.mode ignores,
/// waits for o.path in o.mode within o.timeout, and once held records what the acquire cost for
/// `zklock ls`. A signal of `sigfd` ends the wait, and so does the end of `input` (if not -1).
/// Says why when the lock is not held. Returns: the hold; or no hold and o.conflict_code (taken,
/// timed out, or `input` ended) or 128+N (signal N). Throws: exit_error or the library's
/// exceptions (see classify).
acquire_result acquire_lock(const options& o, int sigfd, int input);


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

/// While the lock is being acquired on the main thread, a signal ends the wait, and so does the
/// end of `input` (a descriptor, -1 for none; what it reads is thrown away): this thread watches
/// them and closes the session, which makes the acquire throw.
class acquire_interrupter {
 public:
  acquire_interrupter(zklock::session& s, int sigfd, int input = -1);
  ~acquire_interrupter() { stop(); }
  acquire_interrupter(const acquire_interrupter&) = delete;
  acquire_interrupter& operator=(const acquire_interrupter&) = delete;
  /// Effects: ends the watching. Returns: the signal that interrupted the acquire, or 0.
  int stop();
  /// Returns: whether the end of `input` interrupted the acquire (call after stop()).
  bool input_ended() const noexcept { return input_ended_.load(); }

 private:
  void run();
  zklock::session& s_;
  int sigfd_;
  int input_;
  fd_t stop_r_, stop_w_;
  std::atomic<int> signal_{0};
  std::atomic<bool> input_ended_{false};
  std::thread thread_;
};

/// Returns: the number of the next pending signal of the signalfd `sigfd`, if any.
std::optional<int> pending_signal(int sigfd);

/// Returns: whether `fd` is at its end: read(2) returned 0 or failed (other than EINTR/EAGAIN).
/// Effects: reads and throws away what is there (at most 4 KiB).
bool input_at_end(int fd);

/// What supervise() runs, and how it stops it.
struct child_command {
  std::string file;               ///< the resolved executable
  std::vector<std::string> argv;  ///< CMD and its arguments
  std::vector<std::string> env;   ///< "NAME=value" set for CMD, replacing inherited ones
  std::string path;               ///< the lock path (for messages)
  int kill_signal = SIGTERM;      ///< stops CMD's group when the lock is lost
  ms grace = 5s;                  ///< between the kill signal and SIGKILL
  /// Set (before `lost` fires) when the hold is stopped because a revoker asked it to let go: the
  /// message says so. Null: never.
  std::shared_ptr<std::atomic<bool>> revoked;
};

/// Effects: runs CMD in a process group of its own (zklock a subreaper, the terminal handed over),
/// passes the signals of `sigfd` on to the group, stops the group when `lost` fires, waits until
/// the group is gone, then calls `release`. Returns: CMD's exit status (128+N if killed by N),
/// 75 if the lock was lost, 126/127 if CMD could not be executed.
int supervise(const child_command& cmd, int sigfd, std::stop_token lost, const std::function<void()>& release);

}  // namespace zkcli
