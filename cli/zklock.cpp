// SPDX-License-Identifier: Apache-2.0
// zklock — the command-line tool: a cluster-wide flock(1) on ZooKeeper (exec), plus ls and wait.
//
// `zklock exec` holds a lock while CMD, and anything CMD started in its process group, runs. Its
// main loop polls two descriptors: a signalfd (SIGCHLD: reap; others: pass on to CMD's group) and a
// self-pipe written by a std::stop_callback on the hold's lost_token() (the lock was lost: stop
// CMD's group). Signals are blocked from the start, before the session's threads exist, so that
// every thread inherits the mask and only the signalfd sees them. See docs/cli.md for the user's view (options, exit codes, environment).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
import zklock;

extern char** environ;

namespace {

using namespace std::chrono_literals;
using ms = std::chrono::milliseconds;
using steady = std::chrono::steady_clock;

#ifndef ZKLOCK_VERSION
#define ZKLOCK_VERSION "unknown"
#endif

// ---- exit codes (docs/cli.md) -------------------------------------------------------------------

namespace exit_code {
constexpr int ok = 0;
constexpr int unavailable = 69;     // EX_UNAVAILABLE: cannot reach ZooKeeper, no new session in time
constexpr int software = 70;        // EX_SOFTWARE: anything else that went wrong in zklock
constexpr int lost = 75;            // EX_TEMPFAIL: the lock was lost (CMD was stopped)
constexpr int no_permission = 77;   // EX_NOPERM: the server refused (ACL, authentication)
constexpr int timeout = 124;        // like timeout(1): the lock was not acquired in time
constexpr int usage = 125;          // bad command line or bad input
constexpr int cannot_execute = 126; // CMD found but not executable
constexpr int not_found = 127;      // CMD not found
constexpr int signal_base = 128;    // + signal number
}  // namespace exit_code

constexpr const char* help_text = R"(zklock - run a command while holding a ZooKeeper lock (a cluster-wide flock(1))

Usage:
  zklock exec [OPTIONS] PATH [--] CMD [ARGS...]
  zklock ls   [OPTIONS] PATH
  zklock wait [OPTIONS] PATH
  zklock --help | --version

Commands:
  exec   Wait for the lock PATH, run CMD while holding it, release it once CMD has ended and
         no process is left in CMD's process group: CMD runs in a group of its own, and what it
         starts in the background keeps the lock until it ends too (zklock adopts and reaps the
         orphans). CMD's environment gets ZKLOCK_FENCING_TOKEN (the hold's fencing token, a
         number that grows with every new holder) and ZKLOCK_PATH. HUP, INT, QUIT, TERM, USR1
         and USR2 sent to zklock are passed on to CMD's group, once. Run in the foreground of a
         terminal, zklock gives the terminal to CMD's group, so that CMD reads it and Ctrl-C
         reaches the group directly (not through zklock as well). If the lock is lost while CMD
         runs (session expired, or the lock node deleted by someone else), CMD's group gets the
         kill signal, then SIGKILL after the grace period. A signal while waiting for the lock
         ends the wait (zklock leaves the queue and exits with 128+signal).
  ls     List the contenders of PATH in queue order: position, state (holder or waiter), kind,
         fencing token, host, pid and start time of each (zklock stores host, pid and time in
         its nodes; for Curator's nodes the host is the IP address they store), and for holders
         that are zklock exec processes what their acquire cost: wait, hold time so far,
         wake-ups and ZooKeeper requests (exec records them beside its node while it holds).
  wait   Wait until PATH has no contenders (nobody holds or waits for it). Watches, no polling.

Lock modes for exec (at most one; default: --write):
  --write             exclusive: the write side of a read/write lock. Waits for and keeps out
                      the other plain (--write) and --shared holders of PATH (like flock -x)
  --shared            shared: the read side of that lock. Runs alongside other --shared holders,
                      never alongside a --write one (like flock -s)
  --mutex             exclusive, with zklock::mutex nodes: for a PATH shared with programs that
                      use zklock::mutex or Curator's InterProcessMutex. It neither waits for nor
                      keeps out --write and --shared holders (other node kinds)
  --permits N         one of N leases of a counting semaphore (N: 1..1000000; every user of the
                      path must give the same N)
Other options for exec:
  --timeout D         wait at most D for the lock (0: try once; default: wait forever)
  --kill-signal SIG   signal that stops CMD's group when the lock is lost, and that CMD gets if
                      zklock itself dies (default TERM; a name like TERM, SIGINT, or a number)
  --grace D           time CMD's group has to end after the kill signal before SIGKILL (default 5s)
Options for ls:
  --json              one JSON object per contender and line
Options for wait:
  --timeout D         wait at most D (0: check once; default: wait forever)
Common options:
  --connect HOSTS     ZooKeeper servers, "host:port[,host:port...][/chroot]"
                      (default: $ZOOKEEPER_HOSTS)
  --session-timeout D session timeout asked of the server (default 10s)
  --connect-timeout D give up connecting after D (default 5s)
  --verbose           say what zklock does, on stderr; given twice (-v -v), show the ZooKeeper
                      client's log too
  -h, --help          show this help
  --version           show the version

Durations (D): a number with a unit: 250ms, 10s, 2m, 1h, 1.5s; a plain number means seconds.

Exit status:
  exec: CMD's exit status, or 128+N if CMD was killed by signal N; otherwise:
  0    wait: PATH is free; ls: listed
  69   cannot reach ZooKeeper: no session at the start, or no new one before --timeout after
       the session ended while waiting (given a new one, exec queues again and waits on)
  70   another failure inside zklock (e.g. the server refused an operation)
  75   the lock was lost while CMD ran (CMD's group was stopped), or before it could start
  77   the server refused for lack of permission (ACL, authentication)
  124  timeout: the lock was not acquired (exec) or PATH not free (wait) within --timeout
  125  usage error or bad input (option, duration, path, connect string, lease count)
  126  CMD cannot be executed
  127  CMD not found
  128+N  zklock got signal N while waiting for the lock

Environment:
  ZOOKEEPER_HOSTS       servers to use when --connect is not given
  ZKLOCK_FENCING_TOKEN  (set for CMD) the fencing token of the hold
  ZKLOCK_PATH           (set for CMD) the lock path

Examples:
  zklock exec /locks/db -- ./migrate.sh            # alone: no other exec of /locks/db runs
  zklock exec --shared /locks/db -- ./report.sh    # with other --shared, never during migrate.sh
)";

// ---- messages ----------------------------------------------------------------------------------

bool g_verbose = false;
/// Whether the ZooKeeper C client's log is shown too (--verbose twice). Not with one --verbose:
/// the C client formats a server's address into one static buffer for every handle, and zklock
/// has two handles at once while it replaces a session, so their log lines race (and may garble).
bool g_client_log = false;

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
std::string tidy(std::string_view what) {
  for (std::string_view prefix : {"zklock: ", "zklock::session: "})
    if (what.starts_with(prefix)) what.remove_prefix(prefix.size());
  return std::string{what};
}

[[noreturn]] void usage_error(const std::string& message) {
  throw exit_error{exit_code::usage, message + "\n(see 'zklock --help')"};
}

// ---- parsing -----------------------------------------------------------------------------------

/// Returns: D as milliseconds (rounded up). Throws: exit_error (usage) for anything else.
ms parse_duration(std::string_view option, std::string_view text, bool zero_ok) {
  auto bad = [&](const std::string& why) -> ms {
    usage_error("bad " + std::string{option} + " \"" + std::string{text} + "\": " + why);
  };
  std::size_t digits = 0;
  while (digits < text.size() && ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) ++digits;
  const std::string number{text.substr(0, digits)};
  const std::string_view unit = text.substr(digits);
  if (number.empty() || number.front() == '.' || number.back() == '.' || std::count(number.begin(), number.end(), '.') > 1)
    return bad("expected a number with a unit, like 500ms, 10s, 2m or 1h");
  double scale;
  if (unit == "ms") scale = 1;
  else if (unit.empty() || unit == "s") scale = 1000;
  else if (unit == "m" || unit == "min") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else return bad("unknown unit \"" + std::string{unit} + "\" (use ms, s, m or h)");
  const double value = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(value) || value > 1e12) return bad("too long");
  const ms d{static_cast<std::int64_t>(std::ceil(value))};
  if (d == ms::zero() && !zero_ok) return bad("must be more than 0");
  return d;
}

/// Returns: the signal named by `text` ("TERM", "SIGTERM", "term", "15"). Throws: exit_error.
int parse_signal(std::string_view text) {
  std::string up;
  for (char c : text) up += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  std::string_view name = up;
  if (name.starts_with("SIG")) name.remove_prefix(3);
  int number = 0;
  const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), number);
  if (!name.empty() && ec == std::errc{} && ptr == name.data() + name.size()) {
    if (number >= 1 && number <= SIGRTMAX) return number;
  } else if (!name.empty()) {
    for (int s = 1; s < SIGRTMIN; ++s)
      if (const char* abbrev = ::sigabbrev_np(s); abbrev && name == abbrev) return s;
  }
  usage_error("bad --kill-signal \"" + std::string{text} + "\": expected a signal name like TERM or a number");
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string{"SIG"} + abbrev : "signal " + std::to_string(sig);
}

enum class command { none, exec, ls, wait, help, version };
/// exec's lock modes. `write` (the default) and `shared` are the two sides of one read/write lock,
/// so they exclude each other like flock -x and -s; `mutex` and `permits` use node kinds of their own.
enum class lock_mode { write, shared, mutex, permits };

struct options {
  command cmd = command::none;
  std::string path;
  bool have_path = false;
  std::vector<std::string> argv;  // CMD and its arguments
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
};

options parse_args(int argc, char** argv) {
  options o;
  std::vector<std::string_view> args(argv + 1, argv + argc);
  std::size_t i = 0;
  if (args.empty()) usage_error("no command given: exec, ls or wait");
  const std::string_view first = args[0];
  if (first == "-h" || first == "--help" || first == "help") {
    o.cmd = command::help;
    return o;
  }
  if (first == "--version") {
    o.cmd = command::version;
    return o;
  }
  if (first == "exec") o.cmd = command::exec;
  else if (first == "ls") o.cmd = command::ls;
  else if (first == "wait") o.cmd = command::wait;
  else if (first.starts_with("-")) usage_error("the command comes first: zklock exec|ls|wait [OPTIONS] PATH");
  else usage_error("unknown command \"" + std::string{first} + "\" (exec, ls or wait)");
  ++i;

  auto set_mode = [&](lock_mode m) {
    if (o.mode_given && o.mode != m) usage_error("--shared, --write, --mutex and --permits exclude each other");
    o.mode = m;
    o.mode_given = true;
  };
  while (i < args.size()) {
    const std::string_view a = args[i++];
    if (a == "--") {
      if (o.cmd != command::exec) usage_error("'--' is only for exec");
      break;
    }
    if (!a.starts_with("-") || a == "-") {
      if (!o.have_path) {
        o.path = std::string{a};
        o.have_path = true;
        continue;
      }
      if (o.cmd != command::exec) usage_error("unexpected argument \"" + std::string{a} + "\"");
      --i;  // CMD starts here
      break;
    }
    std::string_view name = a;
    std::optional<std::string_view> inline_value;
    if (const auto eq = a.find('='); eq != std::string_view::npos && a.starts_with("--")) {
      name = a.substr(0, eq);
      inline_value = a.substr(eq + 1);
    }
    auto value = [&]() -> std::string_view {
      if (inline_value) return *inline_value;
      if (i >= args.size()) usage_error("option " + std::string{name} + " needs a value");
      return args[i++];
    };
    auto only = [&](std::initializer_list<command> cmds) {
      if (std::find(cmds.begin(), cmds.end(), o.cmd) == cmds.end())
        usage_error("option " + std::string{name} + " does not apply to " + std::string{first});
    };
    auto flag = [&] {
      if (inline_value) usage_error("option " + std::string{name} + " takes no value");
    };
    if (name == "-h" || name == "--help") {
      o.cmd = command::help;
      return o;
    } else if (name == "--shared") {
      only({command::exec});
      flag();
      set_mode(lock_mode::shared);
    } else if (name == "--write") {
      only({command::exec});
      flag();
      set_mode(lock_mode::write);
    } else if (name == "--mutex") {
      only({command::exec});
      flag();
      set_mode(lock_mode::mutex);
    } else if (name == "--permits") {
      only({command::exec});
      const std::string_view v = value();
      std::ptrdiff_t n = 0;
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (v.empty() || ec != std::errc{} || ptr != v.data() + v.size() || n < 1 || n > 1'000'000)
        usage_error("bad --permits \"" + std::string{v} + "\": expected a whole number from 1 to 1000000");
      set_mode(lock_mode::permits);
      o.permits = n;
    } else if (name == "--timeout") {
      only({command::exec, command::wait});
      o.timeout = parse_duration(name, value(), true);
    } else if (name == "--kill-signal") {
      only({command::exec});
      o.kill_signal = parse_signal(value());
    } else if (name == "--grace") {
      only({command::exec});
      o.grace = parse_duration(name, value(), true);
    } else if (name == "--json") {
      only({command::ls});
      flag();
      o.json = true;
    } else if (name == "--connect") {
      o.connect = std::string{value()};
    } else if (name == "--session-timeout") {
      o.session_timeout = parse_duration(name, value(), false);
    } else if (name == "--connect-timeout") {
      o.connect_timeout = parse_duration(name, value(), false);
    } else if (name == "--verbose" || name == "-v") {
      flag();
      g_client_log = g_verbose;  // the second time
      g_verbose = true;
    } else {
      usage_error("unknown option \"" + std::string{name} + "\"");
    }
  }
  if (!o.have_path) usage_error(std::string{first} + " needs a lock PATH");
  if (o.cmd == command::exec) {
    o.argv.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
    if (o.argv.empty()) usage_error("exec needs a command to run: zklock exec PATH -- CMD [ARGS...]");
    if (o.argv.front().empty()) usage_error("the command to run is an empty string");
  }
  if (!o.connect) {
    const char* env = std::getenv("ZOOKEEPER_HOSTS");
    if (!env || !*env)
      usage_error("no ZooKeeper to talk to: give --connect HOST:PORT[,HOST:PORT...] or set ZOOKEEPER_HOSTS");
    o.connect = env;
  }
  try {
    zklock::detail::validate_path(o.path, "lock path");
  } catch (const std::invalid_argument& e) {
    usage_error(tidy(e.what()));
  }
  return o;
}

// ---- errors from the library -------------------------------------------------------------------

/// Returns: the exit code and message for an exception from the library.
exit_error classify(const std::exception& e) {
  const std::string what = tidy(e.what());
  if (dynamic_cast<const std::invalid_argument*>(&e)) return {exit_code::usage, what};
  const auto* se = dynamic_cast<const std::system_error*>(&e);
  if (!se) return {exit_code::software, what};
  if (se->code().category() != zklock::error_category()) return {exit_code::software, what};
  using zklock::errc;
  switch (static_cast<errc>(se->code().value())) {
    case errc::connect_timeout:
    case errc::connection_loss:
    case errc::operation_timeout:
    case errc::session_expired:
    case errc::session_closed:
    case errc::closing:
    case errc::invalid_state:
      return {exit_code::unavailable, what};
    case errc::no_auth:
    case errc::auth_failed:
      return {exit_code::no_permission, what};
    case errc::lock_lost:
      return {exit_code::lost, what};
    case errc::lock_timeout:
      return {exit_code::timeout, what};
    case errc::lease_count_mismatch:
    case errc::bad_arguments:
    case errc::chroot_missing:
      return {exit_code::usage, what};
    default:
      return {exit_code::software, what};
  }
}

/// Returns: a session as `o` says. Throws: exit_error.
std::unique_ptr<zklock::session> open_session(const options& o) {
  zklock::session_options so;
  so.connect = *o.connect;
  so.session_timeout = o.session_timeout;
  so.connect_timeout = o.connect_timeout;
  // A session that expires, or is given up after a long disconnection, is replaced by a new one:
  // a waiting exec queues again on it, wait and ls look again (docs/cli.md, "Faults").
  so.reestablish_after_expiry = true;
  if (g_client_log) zklock::set_log_handler([](std::string_view line) {
    std::fprintf(stderr, "%.*s\n", static_cast<int>(line.size()), line.data());
  });
  try {
    auto s = std::make_unique<zklock::session>(std::move(so));
    if (g_verbose) say("connected to %s (session 0x%llx)", o.connect->c_str(), static_cast<unsigned long long>(s->id()));
    return s;
  } catch (const std::invalid_argument& e) {
    usage_error(tidy(e.what()));
  } catch (const std::system_error& e) {
    auto err = classify(e);
    if (err.code == exit_code::software) err.code = exit_code::unavailable;  // e.g. a host that does not resolve
    err.message = "cannot connect to ZooKeeper at \"" + *o.connect + "\": " + err.message;
    throw err;
  }
}

// The acquire record: an ephemeral sibling of the holder's contender node, "<path>/zkstats-<token>",
// holding "granted=<unix ms> waited=<ms> ahead=<n> wakeups=<n> requests=<n>". Not the contender
// node's own data: a changed contender node means something to the lock (a semaphore's poke), and
// the name is no contender to zklock or Curator (no marker; it sorts after every sequence number).
constexpr std::string_view record_prefix = "zkstats-";

// ---- ls ---------------------------------------------------------------------------------------

/// Returns: `ms` since the epoch as ISO 8601 UTC, e.g. "2025-01-31T12:00:00.250Z".
std::string iso_time(long long ms_since_epoch) {
  const long long secs = ms_since_epoch >= 0 ? ms_since_epoch / 1000 : (ms_since_epoch - 999) / 1000;
  const int millis = static_cast<int>(ms_since_epoch - secs * 1000);
  const ::time_t t = static_cast<::time_t>(secs);
  struct ::tm tm {};
  if (!::gmtime_r(&t, &tm)) return std::to_string(ms_since_epoch);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

std::string json_string(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

const char* kind_name(zklock::detail::contender_kind k) {
  using zklock::detail::contender_kind;
  switch (k) {
    case contender_kind::lock: return "lock";
    case contender_kind::read: return "read";
    case contender_kind::write: return "write";
    case contender_kind::lease: return "lease";
  }
  return "?";
}

constexpr unsigned all_kinds = 0xf;

/// Returns: the KIND column of `zklock ls` for a contender of side `s` ("lock" for a mutex, as the
/// node names say).
const char* side_name(zklock::contender_side s) {
  return s == zklock::contender_side::mutex ? "lock" : zklock::to_string(s);
}

/// An acquire record (see record_prefix), read back.
struct acquire_record {
  long long granted_ms = 0, waited_ms = 0, ahead = 0, wakeups = 0, requests = 0;
};

/// Returns: the record in `data`, if every field is there and whole.
std::optional<acquire_record> parse_record(std::string_view data) {
  acquire_record r;
  unsigned found = 0;
  const std::pair<std::string_view, long long*> fields[] = {{"granted=", &r.granted_ms}, {"waited=", &r.waited_ms},
                                                            {"ahead=", &r.ahead},         {"wakeups=", &r.wakeups},
                                                            {"requests=", &r.requests}};
  while (!data.empty()) {
    const auto sp = data.find(' ');
    const auto word = data.substr(0, sp);
    data = sp == std::string_view::npos ? std::string_view{} : data.substr(sp + 1);
    for (std::size_t i = 0; i < std::size(fields); ++i) {
      if (!word.starts_with(fields[i].first)) continue;
      const auto v = word.substr(fields[i].first.size());
      long long n = 0;
      const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
      if (ec == std::errc{} && ptr == v.data() + v.size() && !v.empty() && n >= 0) {
        *fields[i].second = n;
        found |= 1u << i;
      }
    }
  }
  if (found != (1u << std::size(fields)) - 1) return std::nullopt;
  return r;
}

/// Returns: the acquire records under `path`, by the token of the hold they describe.
std::map<std::int64_t, acquire_record> acquire_records(zklock::session& s, const std::string& path) {
  namespace d = zklock::detail;
  std::map<std::int64_t, acquire_record> out;
  const auto listing = d::list_children(s, path, nullptr, steady::now() + s.options().connect_timeout);
  if (!listing) return out;
  for (const auto& name : *listing) {
    if (!name.starts_with(record_prefix)) continue;
    const std::string_view digits = std::string_view{name}.substr(record_prefix.size());
    std::int64_t token = 0;
    const auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), token);
    if (ec != std::errc{} || ptr != digits.data() + digits.size()) continue;
    if (const auto info = d::read_node(s, path + "/" + name))
      if (const auto r = parse_record(info->data)) out[token] = *r;
  }
  return out;
}

/// Returns: a duration for people: "850ms", "12.3s", "4m05s", "2h07m".
std::string span(long long ms_count) {
  char buf[48];
  if (ms_count < 0) ms_count = 0;
  if (ms_count < 1000) std::snprintf(buf, sizeof buf, "%lldms", ms_count);
  else if (ms_count < 60'000) std::snprintf(buf, sizeof buf, "%lld.%llds", ms_count / 1000, ms_count % 1000 / 100);
  else if (ms_count < 3'600'000) std::snprintf(buf, sizeof buf, "%lldm%02llds", ms_count / 60'000, ms_count % 60'000 / 1000);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", ms_count / 3'600'000, ms_count % 3'600'000 / 60'000);
  return buf;
}

/// Effects: runs `f`, and again on the next session each time the session ends under it (expired,
/// or given up after a long disconnection), as a waiting acquire queues again; a new session must
/// come before `deadline`. Returns: what `f` returns.
/// Throws: what `f` throws; session_expired if no next session is connected before `deadline`.
template <class F>
auto on_live_session(zklock::session& s, steady::time_point deadline, F f) {
  for (;;) {
    const std::uint64_t generation = s.generation();
    try {
      return f();
    } catch (const std::system_error& e) {
      if (e.code() != zklock::make_error_code(zklock::errc::session_expired)) throw;
      if (g_verbose) say("%s", "session expired: waiting for the next one");
      if (!zklock::detail::await_next_session(s, generation, deadline)) throw;
      if (g_verbose) say("on a new session (0x%llx)", static_cast<unsigned long long>(s.id()));
    }
  }
}

int cmd_ls(const options& o) {
  auto s = open_session(o);
  // The library's own view of the queue; a session that ends under the listing is replaced, if
  // one can be had within --connect-timeout.
  const auto rows = on_live_session(*s, steady::now() + o.connect_timeout, [&] { return zklock::contenders(*s, o.path); });
  auto since_ms = [](const zklock::contender_info& c) -> std::optional<long long> {
    if (!c.who.since) return std::nullopt;
    return std::chrono::duration_cast<std::chrono::milliseconds>(c.who.since->time_since_epoch()).count();
  };
  // What the holders' acquires cost, as `zklock exec` holders recorded it (others record nothing).
  const auto records = rows.empty() ? std::map<std::int64_t, acquire_record>{}
                                    : on_live_session(*s, steady::now() + o.connect_timeout,
                                                      [&] { return acquire_records(*s, o.path); });
  auto record = [&](const zklock::contender_info& c) -> const acquire_record* {
    if (c.state != zklock::contender_state::holder) return nullptr;
    const auto it = records.find(c.token);
    return it == records.end() ? nullptr : &it->second;
  };
  const long long now_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();

  if (o.json) {
    for (const auto& r : rows) {
      const auto ms = since_ms(r);
      const auto* a = record(r);
      auto number = [&](long long v) { return a ? std::to_string(v) : std::string{"null"}; };
      std::string line = "{\"path\":" + json_string(o.path) + ",\"position\":" + std::to_string(r.position + 1) +
                         ",\"state\":" + json_string(zklock::to_string(r.state)) +
                         ",\"kind\":" + json_string(side_name(r.side)) + ",\"token\":" + std::to_string(r.token) +
                         ",\"host\":" + json_string(r.who.host) +
                         ",\"pid\":" + (r.who.pid ? std::to_string(*r.who.pid) : "null") +
                         ",\"since\":" + (ms ? json_string(iso_time(*ms)) : "null") +
                         ",\"since_ms\":" + (ms ? std::to_string(*ms) : "null") +
                         ",\"granted\":" + (a ? json_string(iso_time(a->granted_ms)) : "null") +
                         ",\"granted_ms\":" + number(a ? a->granted_ms : 0) +
                         ",\"held_ms\":" + number(a ? std::max(0LL, now_ms - a->granted_ms) : 0) +
                         ",\"waited_ms\":" + number(a ? a->waited_ms : 0) + ",\"ahead\":" + number(a ? a->ahead : 0) +
                         ",\"wakeups\":" + number(a ? a->wakeups : 0) + ",\"requests\":" + number(a ? a->requests : 0) +
                         ",\"node\":" + json_string(r.node) + "}\n";
      std::fputs(line.c_str(), stdout);
    }
    return exit_code::ok;
  }
  if (rows.empty()) {
    std::printf("no contenders on %s\n", o.path.c_str());
    return exit_code::ok;
  }
  std::vector<std::vector<std::string>> table{
      {"POS", "STATE", "KIND", "TOKEN", "HOST", "PID", "SINCE", "WAITED", "HELD", "WAKEUPS", "REQUESTS", "NODE"}};
  for (const auto& r : rows) {
    const auto ms = since_ms(r);
    const auto* a = record(r);
    table.push_back({std::to_string(r.position + 1), zklock::to_string(r.state), side_name(r.side),
                     std::to_string(r.token), r.who.host.empty() ? "-" : r.who.host,
                     r.who.pid ? std::to_string(*r.who.pid) : "-", ms ? iso_time(*ms) : "-",
                     a ? span(a->waited_ms) : "-", a ? span(now_ms - a->granted_ms) : "-",
                     a ? std::to_string(a->wakeups) : "-", a ? std::to_string(a->requests) : "-", r.node});
  }
  std::vector<std::size_t> width(table.front().size(), 0);
  for (const auto& line : table)
    for (std::size_t c = 0; c < line.size(); ++c) width[c] = std::max(width[c], line[c].size());
  for (const auto& line : table) {
    std::string out;
    for (std::size_t c = 0; c < line.size(); ++c) {
      out += line[c];
      if (c + 1 < line.size()) out += std::string(width[c] - line[c].size() + 2, ' ');
    }
    std::printf("%s\n", out.c_str());
  }
  return exit_code::ok;
}

// ---- wait -------------------------------------------------------------------------------------

/// Woken by a children watch.
class child_watch final : public zklock::detail::wake_target {
 public:
  void wake() noexcept override {
    {
      std::lock_guard lk{mu_};
      woken_ = true;
    }
    cv_.notify_all();
  }
  /// Returns: whether it was woken before `deadline`.
  bool wait_until(steady::time_point deadline) {
    std::unique_lock lk{mu_};
    if (deadline == steady::time_point::max()) {
      cv_.wait(lk, [&] { return woken_; });
      return true;
    }
    return cv_.wait_until(lk, deadline, [&] { return woken_; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool woken_ = false;
};

int cmd_wait(const options& o) {
  namespace d = zklock::detail;
  auto s = open_session(o);
  const auto deadline = o.timeout ? steady::now() + *o.timeout : steady::time_point::max();
  // One look: free (true), not free by the deadline (false). The watch also fires when the session
  // ends; the next look then throws session_expired, and on_live_session looks again on the next
  // session (the session's end may have taken contenders along).
  auto look = [&]() -> bool {
    for (;;) {
      auto w = std::make_shared<child_watch>();
      struct unwatch {  // removes the watch on every way out (a no-op once it fired)
        zklock::session& s;
        const std::string& path;
        const child_watch* w;
        ~unwatch() { d::drop_watch(s, path, true, w); }
      } guard{*s, o.path, w.get()};
      const auto listing = d::list_children(*s, o.path, w, deadline);
      if (!listing) return false;
      const auto queue = d::sorted_contenders(*listing, all_kinds);
      if (queue.empty()) return true;
      if (g_verbose) say("%s has %zu contender(s): waiting", o.path.c_str(), queue.size());
      if (!w->wait_until(deadline)) return false;
    }
  };
  if (on_live_session(*s, deadline, look)) {
    if (g_verbose) say("%s is free", o.path.c_str());
    return exit_code::ok;
  }
  say("timed out: %s is still taken", o.path.c_str());
  return exit_code::timeout;
}

// ---- exec -------------------------------------------------------------------------------------

[[noreturn]] void throw_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }


/// A file descriptor that closes itself.
class fd_t {
 public:
  fd_t() = default;
  explicit fd_t(int fd) : fd_(fd) {}
  ~fd_t() {
    if (fd_ >= 0) ::close(fd_);
  }
  fd_t(fd_t&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  fd_t& operator=(fd_t&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = std::exchange(o.fd_, -1);
    }
    return *this;
  }
  int get() const noexcept { return fd_; }

 private:
  int fd_ = -1;
};

/// Returns: the open file descriptors of this process (except the one used to list them).
std::set<int> open_fds() {
  std::set<int> out;
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return out;
  const int self = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    int fd = 0;
    const std::string_view name = e->d_name;
    const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), fd);
    if (ec == std::errc{} && ptr == name.data() + name.size() && fd != self) out.insert(fd);
  }
  ::closedir(dir);
  return out;
}

/// The descriptors zklock inherited: CMD inherits them too, and nothing zklock opened itself
/// (e.g. the ZooKeeper client's socket and pipes).
std::set<int> g_inherited_fds;

void mark_own_fds_cloexec() {
  for (int fd : open_fds())
    if (!g_inherited_fds.contains(fd)) {
      const int flags = ::fcntl(fd, F_GETFD);
      if (flags >= 0 && !(flags & FD_CLOEXEC)) ::fcntl(fd, F_SETFD, flags | FD_CLOEXEC);
    }
}

/// Returns: the file to execute for `cmd` (searched in PATH unless it has a '/').
/// Throws: exit_error 127 (not found) or 126 (not executable).
std::string resolve_command(const std::string& cmd) {
  auto check = [](const std::string& file) -> int {  // 0 ok, else the exit code
    struct ::stat st {};
    if (::stat(file.c_str(), &st) != 0) return exit_code::not_found;
    if (S_ISDIR(st.st_mode) || ::access(file.c_str(), X_OK) != 0) return exit_code::cannot_execute;
    return 0;
  };
  if (cmd.find('/') != std::string::npos) {
    const int rc = check(cmd);
    if (rc == exit_code::not_found) throw exit_error{rc, cmd + ": no such file"};
    if (rc != 0) throw exit_error{rc, cmd + ": not executable"};
    return cmd;
  }
  const char* env = std::getenv("PATH");
  const std::string path = env ? env : "/usr/local/bin:/usr/bin:/bin";
  bool found_unexecutable = false;
  std::size_t start = 0;
  for (;;) {
    const auto colon = path.find(':', start);
    std::string dir = path.substr(start, colon == std::string::npos ? std::string::npos : colon - start);
    if (dir.empty()) dir = ".";
    const std::string file = dir + "/" + cmd;
    const int rc = check(file);
    if (rc == 0) return file;
    if (rc == exit_code::cannot_execute) found_unexecutable = true;
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  if (found_unexecutable) throw exit_error{exit_code::cannot_execute, cmd + ": not executable"};
  throw exit_error{exit_code::not_found, cmd + ": command not found"};
}

/// The signals passed on to CMD.
constexpr int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};

sigset_t g_original_mask;

/// Effects: blocks the forwarded signals, SIGCHLD and SIGCONT in this thread (and every thread it
/// starts), and SIGTTOU, so that zklock may hand its terminal to CMD's process group and take it back.
/// Returns: a signalfd that reads the forwarded signals, SIGCHLD and SIGCONT.
fd_t block_signals() {
  sigset_t set;
  ::sigemptyset(&set);
  for (int s : forwarded_signals) ::sigaddset(&set, s);
  ::sigaddset(&set, SIGCHLD);
  ::sigaddset(&set, SIGCONT);  // (blocked, it still continues zklock; the signalfd tells exec of it)
  sigset_t blocked = set;
  ::sigaddset(&blocked, SIGTTOU);
  if (::pthread_sigmask(SIG_BLOCK, &blocked, &g_original_mask) != 0) throw_errno("pthread_sigmask");
  const int fd = ::signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (fd < 0) throw_errno("signalfd");
  return fd_t{fd};
}

/// Returns: the next pending signal of `sigfd`, if any.
std::optional<signalfd_siginfo> next_signal(int sigfd) {
  signalfd_siginfo si{};
  for (;;) {
    const ssize_t n = ::read(sigfd, &si, sizeof si);
    if (n == static_cast<ssize_t>(sizeof si)) return si;
    if (n < 0 && errno == EINTR) continue;
    return std::nullopt;
  }
}

/// Returns: the poll(2) timeout that ends at `deadline` (-1: none).
int poll_ms(steady::time_point deadline) {
  if (deadline == steady::time_point::max()) return -1;
  const auto left = std::chrono::ceil<ms>(deadline - steady::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1'000'000));
}

/// While the lock is being acquired on the main thread, a signal ends the wait: this thread reads
/// the signalfd and closes the session, which makes the acquire throw.
class acquire_interrupter {
 public:
  acquire_interrupter(zklock::session& s, int sigfd) : s_(s), sigfd_(sigfd) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
    stop_r_ = fd_t{p[0]};
    stop_w_ = fd_t{p[1]};
    thread_ = std::thread([this] { run(); });
  }
  ~acquire_interrupter() { stop(); }
  acquire_interrupter(const acquire_interrupter&) = delete;
  acquire_interrupter& operator=(const acquire_interrupter&) = delete;

  /// Effects: ends the watching. Returns: the signal that interrupted the acquire, or 0.
  int stop() {
    if (thread_.joinable()) {
      const char c = 0;
      while (::write(stop_w_.get(), &c, 1) < 0 && errno == EINTR) {}
      thread_.join();
    }
    return signal_.load();
  }

 private:
  void run() {
    for (;;) {
      pollfd p[2] = {{sigfd_, POLLIN, 0}, {stop_r_.get(), POLLIN, 0}};
      if (::poll(p, 2, -1) < 0) {
        if (errno == EINTR) continue;
        return;
      }
      if (p[1].revents) return;
      if (p[0].revents) {
        if (const auto si = next_signal(sigfd_)) {
          // A child zklock was started with ended, or zklock was continued: not a request to stop.
          if (si->ssi_signo == SIGCHLD || si->ssi_signo == SIGCONT) continue;
          signal_.store(static_cast<int>(si->ssi_signo));
          s_.close();  // the acquire throws session_closed; the server drops our queued node
          return;
        }
      }
    }
  }
  zklock::session& s_;
  int sigfd_;
  fd_t stop_r_, stop_w_;
  std::atomic<int> signal_{0};
  std::thread thread_;
};

/// The loss signal of a semaphore lease (the semaphore has no lost_token() of its own): fires
/// when the watch on our lease node fires (deleted or changed by someone else, session ended) or,
/// through lose(), when the session generation that created it is lost.
class lease_watch final : public zklock::detail::wake_target {
 public:
  void wake() noexcept override {
    if (!released_.load()) lost_.request_stop();
  }
  void lose() noexcept { wake(); }
  /// Effects: from now on nothing fires (we release the lease ourselves).
  void release() noexcept { released_.store(true); }
  std::stop_token token() const noexcept { return lost_.get_token(); }

 private:
  std::stop_source lost_;
  std::atomic<bool> released_{false};
};

struct lose_lease {
  std::shared_ptr<lease_watch> w;
  void operator()() const noexcept { w->lose(); }
};

/// A held lock of any mode, as exec needs it.
struct hold {
  std::int64_t token = 0;
  std::stop_token lost;
  std::function<void()> release;
  std::shared_ptr<lease_watch> lease;
  std::optional<std::stop_callback<lose_lease>> session_loss;
};

/// What the acquire of this process cost (one acquire per process), from the hooks below. Its
/// `path` views the lock object's, which outlives every use here.
std::optional<zklock::acquire_stats> g_acquire;

/// exec's hooks policy: keeps the figures of the acquire, which exec then records for `zklock ls`
/// (the main thread acquires, then reads them: no other thread involved).
struct record_hooks {
  static constexpr bool enabled = true;
  static void on_acquire(const zklock::acquire_stats& a) noexcept {
    if (a.acquired) g_acquire = a;
  }
  static void on_release(const zklock::release_stats&) noexcept {}
};
struct exec_policies : zklock::default_policies { using hooks = record_hooks; };
using exec_mutex = zklock::basic_mutex<exec_policies>;
using exec_shared_mutex = zklock::basic_shared_mutex<exec_policies>;
using exec_semaphore = zklock::basic_counting_semaphore<exec_policies>;

/// Returns: our contender node among `kinds` under `path` (the one owned by our session).
std::optional<std::pair<std::string, zklock::detail::node_info>> own_node(zklock::session& s, const std::string& path,
                                                                          unsigned kinds) {
  namespace d = zklock::detail;
  const auto listing = d::list_children(s, path, nullptr, steady::now() + s.options().connect_timeout);
  if (!listing) throw exit_error{exit_code::unavailable, "timed out listing " + path};
  const std::int64_t me = s.id();
  for (const auto& c : d::sorted_contenders(*listing, kinds)) {
    const std::string full = path + "/" + c.name;
    if (auto info = d::read_node(s, full); info && info->ephemeral_owner == me) return std::pair{full, std::move(*info)};
  }
  return std::nullopt;
}

/// Returns: the contender kinds a lock of mode `m` queues with.
unsigned kinds_of(lock_mode m) {
  namespace d = zklock::detail;
  switch (m) {
    case lock_mode::mutex: return d::exclusive_rule::kinds;
    case lock_mode::shared: return d::read_rule::kinds;
    case lock_mode::write: return d::write_rule::kinds;
    case lock_mode::permits: return d::semaphore_rule::kinds;
  }
  return all_kinds;
}

/// Returns: what takes contender nodes of kind `k`, for the warning about other kinds.
const char* taken_by(zklock::detail::contender_kind k) {
  using zklock::detail::contender_kind;
  switch (k) {
    case contender_kind::lock: return "zklock exec --mutex, zklock::mutex, Curator's InterProcessMutex";
    case contender_kind::read: return "zklock exec --shared, the read side of a read/write lock";
    case contender_kind::write: return "zklock exec (default, --write), the write side of a read/write lock";
    case contender_kind::lease: return "zklock exec --permits, zklock::counting_semaphore";
  }
  return "?";
}

const char* mode_name(lock_mode m) {
  switch (m) {
    case lock_mode::write: return "exclusive (write) lock";
    case lock_mode::shared: return "shared (read) lock";
    case lock_mode::mutex: return "--mutex lock";
    case lock_mode::permits: return "--permits lease";
  }
  return "lock";
}

/// Effects: one attempt (timeout 0), a wait bounded by `timeout`, or a wait without end (none).
/// Returns: whether the lock is held.
template <class Once, class For, class Forever>
bool attempt(const std::optional<ms>& timeout, Once once, For for_, Forever forever) {
  if (!timeout) {
    forever();
    return true;
  }
  if (*timeout == ms::zero()) return once();
  return for_(*timeout);
}

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return exit_code::signal_base + WTERMSIG(status);
  return exit_code::software;
}

/// Effects: records what the acquire cost for `zklock ls` (see record_prefix). Best effort: a
/// failure is only reported with --verbose (a lost lock is the loss signal's business).
/// Returns: the record's path, if created.
std::optional<std::string> record_acquire(zklock::session& s, const options& o, std::int64_t token) {
  if (!g_acquire) return std::nullopt;
  try {
    const auto now_ms = std::chrono::duration_cast<ms>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto waited = std::chrono::duration_cast<ms>(g_acquire->wait).count();
    const std::string data = "granted=" + std::to_string(now_ms) + " waited=" + std::to_string(waited) +
                             " ahead=" + std::to_string(g_acquire->queue_position) +
                             " wakeups=" + std::to_string(g_acquire->wakeups) +
                             " requests=" + std::to_string(g_acquire->requests);
    std::string path = o.path + "/" + std::string{record_prefix} + std::to_string(token);
    if (zklock::detail::create_ephemeral(s, path, data)) return path;
  } catch (const std::exception& e) {
    if (g_verbose) say("could not record the acquire on %s: %s", o.path.c_str(), e.what());
  }
  return std::nullopt;
}

// ---- CMD's process group ----------------------------------------------------------------------
// CMD runs in a process group of its own (its pgid is CMD's pid), and zklock is a child subreaper
// (PR_SET_CHILD_SUBREAPER): whatever CMD starts and leaves behind is re-parented to zklock, which
// reaps it. The lock is held until CMD has ended and its group is gone: while any process that CMD
// started is still in the group, like flock(1) while a descendant holds the descriptor. A forwarded
// signal or the kill signal of a lost lock goes to the group, once (kill(-pgid, sig)). A process
// that leaves the group (setsid, setpgid) leaves the lock too: zklock could not stop it.

/// Returns: whether process group `pgid` still has a process (a zombie counts until reaped).
bool group_alive(pid_t pgid) { return ::kill(-pgid, 0) == 0 || errno != ESRCH; }

/// Returns: whether a job-control stop of zklock's process group would take effect: zklock's parent
/// is in the same session but another process group (a shell that runs zklock as a job). The
/// kernel ignores SIGTSTP, SIGTTIN and SIGTTOU for an orphaned process group.
bool under_job_control() {
  const pid_t parent = ::getppid();
  return ::getsid(parent) == ::getsid(0) && ::getpgid(parent) != ::getpgrp();
}

/// zklock's controlling terminal. When zklock runs in the terminal's foreground process group, CMD's
/// group takes it over while CMD runs, as a shell gives the terminal to a job: CMD reads it, and
/// the terminal's signals (Ctrl-C, Ctrl-\) reach CMD's group directly and only once.
class terminal {
 public:
  terminal() {
    const int fd = ::open("/dev/tty", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) return;  // no controlling terminal
    fd_ = fd_t{fd};
    foreground_ = ::tcgetpgrp(fd) == ::getpgrp();
  }
  /// Returns: the terminal's descriptor, -1 if zklock has none.
  int fd() const noexcept { return fd_.get(); }
  /// Returns: whether zklock's group was the terminal's foreground group when it started CMD.
  bool foreground() const noexcept { return foreground_; }
  /// Effects: gives the terminal to `pgid` if zklock's group has it.
  void give(pid_t pgid) const noexcept {
    if (fd() >= 0 && ::tcgetpgrp(fd()) == ::getpgrp()) ::tcsetpgrp(fd(), pgid);
  }
  /// Effects: takes the terminal back for zklock's group if `pgid` has it (SIGTTOU is blocked).
  void take_back(pid_t pgid) const noexcept {
    if (fd() >= 0 && ::tcgetpgrp(fd()) == pgid) ::tcsetpgrp(fd(), ::getpgrp());
  }

 private:
  fd_t fd_;
  bool foreground_ = false;
};

int cmd_exec(const options& o) {
  namespace d = zklock::detail;
  const std::string file = resolve_command(o.argv.front());  // fail fast, before waiting for a lock

  fd_t sigfd = block_signals();  // before the session starts its threads
  auto s = open_session(o);

  // Some modes queue separate node kinds: say so when the path is in use by one this mode ignores.
  // (A warning only: a session that ends under it is the acquire's to ride through.)
  std::optional<std::vector<std::string>> others;
  try {
    others = d::list_children(*s, o.path, nullptr, steady::now() + o.connect_timeout);
  } catch (const std::system_error& e) {
    if (e.code() != zklock::make_error_code(zklock::errc::session_expired)) throw;
  }
  if (const auto& listing = others) {
    unsigned seen = 0;
    for (const auto& c : d::sorted_contenders(*listing, all_kinds & ~kinds_of(o.mode))) {
      if (seen & d::kind_bit(c.kind)) continue;
      seen |= d::kind_bit(c.kind);
      say("warning: %s has %s contenders (%s): this %s neither waits for them nor keeps them out", o.path.c_str(),
          kind_name(c.kind), taken_by(c.kind), mode_name(o.mode));
    }
  }

  std::optional<exec_mutex> mx;
  std::optional<exec_shared_mutex> rw;
  std::optional<exec_semaphore> sem;
  const std::uint64_t generation = s->generation();
  bool acquired = false;
  {
    acquire_interrupter interrupter{*s, sigfd.get()};
    try {
      switch (o.mode) {
        case lock_mode::mutex:
          mx.emplace(*s, o.path);
          acquired = attempt(o.timeout, [&] { return mx->try_lock(); }, [&](ms t) { return mx->try_lock_for(t); },
                             [&] { mx->lock(); });
          break;
        case lock_mode::shared:
          rw.emplace(*s, o.path);
          acquired = attempt(o.timeout, [&] { return rw->try_lock_shared(); },
                             [&](ms t) { return rw->try_lock_shared_for(t); }, [&] { rw->lock_shared(); });
          break;
        case lock_mode::write:
          rw.emplace(*s, o.path);
          acquired = attempt(o.timeout, [&] { return rw->try_lock(); }, [&](ms t) { return rw->try_lock_for(t); },
                             [&] { rw->lock(); });
          break;
        case lock_mode::permits:
          sem.emplace(*s, o.path, o.permits);
          acquired = attempt(o.timeout, [&] { return sem->try_acquire(); },
                             [&](ms t) { return sem->try_acquire_for(t); }, [&] { sem->acquire(); });
          break;
      }
    } catch (...) {
      if (const int sig = interrupter.stop()) {
        if (g_verbose) say("%s while waiting for %s: gave up", signal_name(sig).c_str(), o.path.c_str());
        return exit_code::signal_base + sig;
      }
      throw;
    }
    if (const int sig = interrupter.stop()) {  // came just as the lock was granted: the session is closed
      if (g_verbose) say("%s while acquiring %s: gave up", signal_name(sig).c_str(), o.path.c_str());
      return exit_code::signal_base + sig;
    }
  }
  if (!acquired) {
    if (*o.timeout == ms::zero()) say("%s is taken (--timeout 0: no waiting)", o.path.c_str());
    else say("timed out after %lld ms waiting for %s", static_cast<long long>(o.timeout->count()), o.path.c_str());
    return exit_code::timeout;
  }

  hold h;
  switch (o.mode) {
    case lock_mode::mutex:
      h.token = mx->fencing_token();
      h.lost = mx->lost_token();
      h.release = [&] { mx->unlock(); };
      break;
    case lock_mode::write:
      h.token = rw->fencing_token();
      h.lost = rw->lost_token();
      h.release = [&] { rw->unlock(); };
      break;
    case lock_mode::shared:
    case lock_mode::permits: {
      // These holds have no fencing_token() of their own: the token is our node's czxid.
      h.lost = o.mode == lock_mode::shared ? rw->lost_token() : std::stop_token{};
      std::optional<std::pair<std::string, zklock::detail::node_info>> mine;
      try {
        mine = own_node(*s, o.path, d::kind_bit(o.mode == lock_mode::shared ? d::read_rule::own : d::semaphore_rule::own));
      } catch (const std::system_error& e) {  // the session ended with the grant: the hold is lost
        if (e.code() != zklock::make_error_code(zklock::errc::session_expired)) throw;
      }
      if (!mine) {
        say("lost the lock on %s before %s could start", o.path.c_str(), o.argv.front().c_str());
        return exit_code::lost;
      }
      h.token = mine->second.czxid;
      if (o.mode == lock_mode::shared) {
        h.release = [&] { rw->unlock_shared(); };
      } else {
        h.lease = std::make_shared<lease_watch>();
        h.lost = h.lease->token();
        h.session_loss.emplace(d::loss_token(*s, generation), lose_lease{h.lease});
        const std::string node = mine->first;
        const auto seen = d::watch_node(*s, node, h.lease, steady::now() + o.connect_timeout);
        if (!seen || *seen == d::node_seen::gone) h.lease->lose();
        h.release = [&h, &s, &sem, node] {
          h.lease->release();  // our own delete is no loss
          d::drop_watch(*s, node, false, h.lease.get());
          try {
            sem->release();
          } catch (const std::exception&) {  // nothing held: nothing to release
          }
        };
      }
      break;
    }
  }
  if (g_verbose) say("holding %s (token %lld)", o.path.c_str(), static_cast<long long>(h.token));
  if (auto record = record_acquire(*s, o, h.token)) {  // gone before the lock is released
    h.release = [&s, generation, path = std::move(*record), release = std::move(h.release)] {
      zklock::detail::release_node(*s, zklock::detail::held_node{path, 0, generation});
      release();
    };
  }

  // The loss signal, as a readable pipe for poll().
  int lp[2];
  if (::pipe2(lp, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("pipe2");
  const fd_t lost_r{lp[0]}, lost_w{lp[1]};
  const int lost_w_fd = lost_w.get();
  std::stop_callback on_lost{h.lost, [lost_w_fd] {
                               const char c = 1;
                               [[maybe_unused]] auto n = ::write(lost_w_fd, &c, 1);
                             }};
  if (h.lost.stop_requested()) {
    say("lost the lock on %s before %s could start", o.path.c_str(), o.argv.front().c_str());
    h.release();
    return exit_code::lost;
  }

  // CMD's argv and environment, prepared before fork (the child only makes system calls).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string_view v = *e;
    if (!v.starts_with("ZKLOCK_FENCING_TOKEN=") && !v.starts_with("ZKLOCK_PATH=")) env_strings.emplace_back(v);
  }
  env_strings.push_back("ZKLOCK_FENCING_TOKEN=" + std::to_string(h.token));
  env_strings.push_back("ZKLOCK_PATH=" + o.path);
  std::vector<char*> envp, argv;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = o.argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int ep[2];  // the child reports a failed execve through it; closed by a successful one
  if (::pipe2(ep, O_CLOEXEC) != 0) throw_errno("pipe2");
  fd_t exec_r{ep[0]}, exec_w{ep[1]};
  mark_own_fds_cloexec();
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) throw_errno("prctl(PR_SET_CHILD_SUBREAPER)");
  terminal tty;
  const int tty_fd = tty.foreground() ? tty.fd() : -1;  // CMD's group takes the terminal over
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw_errno("fork");
  if (pid == 0) {
    // In the child: async-signal-safe calls only (the parent has other threads).
    ::setpgid(0, 0);  // a process group of its own: CMD's group (SIGTTOU is still blocked here)
    if (tty_fd >= 0) ::tcsetpgrp(tty_fd, ::getpid());
    ::sigprocmask(SIG_SETMASK, &g_original_mask, nullptr);
    ::prctl(PR_SET_PDEATHSIG, o.kill_signal);  // zklock dies: the lock is no longer guaranteed
    if (::getppid() != parent) ::_exit(exit_code::lost);
    ::execve(file.c_str(), argv.data(), envp.data());
    const int e = errno;
    [[maybe_unused]] auto n = ::write(exec_w.get(), &e, sizeof e);
    ::_exit(e == ENOENT ? exit_code::not_found : exit_code::cannot_execute);
  }
  ::setpgid(pid, pid);  // also here: the group exists before zklock signals it (EACCES once CMD runs)
  const pid_t group = pid;
  exec_w = fd_t{};
  int exec_errno = 0;
  ssize_t got;
  while ((got = ::read(exec_r.get(), &exec_errno, sizeof exec_errno)) < 0 && errno == EINTR) {}
  if (got == static_cast<ssize_t>(sizeof exec_errno)) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
    tty.take_back(group);
    h.release();
    say("cannot run %s: %s", o.argv.front().c_str(), std::strerror(exec_errno));
    return exec_errno == ENOENT ? exit_code::not_found : exit_code::cannot_execute;
  }
  if (g_verbose) say("running %s (pid %d, in process group %d)", o.argv.front().c_str(), static_cast<int>(pid),
                     static_cast<int>(group));

  // Wait until CMD has ended and its group is gone; pass signals on to the group; stop the group
  // if the lock is lost.
  auto signal_group = [group](int sig) { ::kill(-group, sig); };
  bool lost = false, cmd_ended = false;
  steady::time_point kill_at = steady::time_point::max();
  int status = 0;
  for (;;) {
    // Reap every child that ended (CMD, and whatever of its group was left to zklock).
    for (;;) {
      int st = 0;
      const pid_t r = ::waitpid(-1, &st, WNOHANG | WUNTRACED);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;  // 0: none ended; ECHILD: no child at all
      if (r != pid) continue;
      if (!WIFSTOPPED(st)) {
        status = st;
        cmd_ended = true;
        if (g_verbose) say("%s ended: exit status %d", o.argv.front().c_str(), exit_status_of(st));
        continue;
      }
      // CMD was stopped by job control (Ctrl-Z, or a terminal read or write in the background):
      // zklock's own job stops likewise (the shell sees it stopped and takes its terminal back),
      // and CMD's group goes on when zklock is continued (SIGCONT, below). Without a shell to
      // continue it, zklock does not stop: CMD's group goes on at once.
      const int stop = WSTOPSIG(st);
      if (tty.fd() >= 0 && (stop == SIGTSTP || stop == SIGTTIN || stop == SIGTTOU)) {
        tty.take_back(group);
        if (under_job_control()) {
          ::kill(0, stop == SIGTTOU ? SIGTSTP : stop);  // (SIGTTOU is blocked in zklock)
        } else {
          tty.give(group);
          signal_group(SIGCONT);
        }
      }
    }
    if (cmd_ended && !group_alive(group)) break;

    // Once CMD has ended, look at its group every 200 ms too: a process may leave the group, or
    // end as the child of another descendant, without a SIGCHLD to zklock.
    int wait_ms = poll_ms(kill_at);
    if (cmd_ended && (wait_ms < 0 || wait_ms > 200)) wait_ms = 200;
    pollfd p[2] = {{sigfd.get(), POLLIN, 0}, {lost ? -1 : lost_r.get(), POLLIN, 0}};
    const int r = ::poll(p, 2, wait_ms);
    if (r < 0 && errno != EINTR) throw_errno("poll");
    if (r > 0 && p[1].revents && !lost) {
      lost = true;
      say("lost the lock on %s: stopping %s and its process group (%d) with %s%s", o.path.c_str(),
          o.argv.front().c_str(), static_cast<int>(group), signal_name(o.kill_signal).c_str(),
          o.kill_signal == SIGKILL ? "" : (", then SIGKILL after " + std::to_string(o.grace.count()) + " ms").c_str());
      signal_group(o.kill_signal);
      if (o.kill_signal != SIGKILL) {
        signal_group(SIGCONT);  // a stopped process must see the kill signal too
        kill_at = steady::now() + o.grace;
      }
    }
    if (r > 0 && p[0].revents) {
      while (const auto si = next_signal(sigfd.get())) {
        const int sig = static_cast<int>(si->ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped at the top of the loop
        if (sig == SIGCONT) {          // zklock's job was continued (fg, bg): CMD's group goes on too
          tty.give(group);             // if zklock's group is in the foreground again
          signal_group(SIGCONT);
          continue;
        }
        // Sent to zklock alone (CMD's group is not zklock's, and a terminal signals only its
        // foreground group, which is CMD's while CMD runs): the group gets it once, from here.
        if (g_verbose) say("passing %s on to process group %d", signal_name(sig).c_str(), static_cast<int>(group));
        signal_group(sig);
      }
    }
    if (kill_at != steady::time_point::max() && steady::now() >= kill_at) {
      say("process group %d of %s still there %lld ms after %s: sending SIGKILL", static_cast<int>(group),
          o.argv.front().c_str(), static_cast<long long>(o.grace.count()), signal_name(o.kill_signal).c_str());
      signal_group(SIGKILL);
      kill_at = steady::time_point::max();
    }
  }
  tty.take_back(group);
  h.release();
  if (lost) return exit_code::lost;
  return exit_status_of(status);
}

}  // namespace

int main(int argc, char** argv) {
  g_inherited_fds = open_fds();
  try {
    const options o = parse_args(argc, argv);
    switch (o.cmd) {
      case command::help:
        std::fputs(help_text, stdout);
        return exit_code::ok;
      case command::version:
        std::printf("zklock %s\n", ZKLOCK_VERSION);
        return exit_code::ok;
      case command::exec: return cmd_exec(o);
      case command::ls: return cmd_ls(o);
      case command::wait: return cmd_wait(o);
      case command::none: break;
    }
    return exit_code::usage;
  } catch (const exit_error& e) {
    say("%s", e.message.c_str());
    return e.code;
  } catch (const std::exception& e) {
    const exit_error err = classify(e);
    say("%s", err.message.c_str());
    return err.code;
  }
}
