// SPDX-License-Identifier: Apache-2.0
// zklock — a cluster-wide flock(1) on ZooKeeper: the command line (CLI11). Declares the commands
// exec, lock, ls and wait with their options and help, moves the common options given before the
// command after it, turns CLI11's parse errors into zklock's usage errors (exit 125, messages that
// name the option), and runs the command (docs/cli.md).
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include "cli.hpp"

#ifndef ZKLOCK_VERSION
#define ZKLOCK_VERSION "unknown"
#endif

namespace zkcli {
namespace {

constexpr const char* common_group = "Common options";

constexpr const char* usage_text = R"(Usage:
  zklock exec [OPTIONS] PATH [--] CMD [ARGS...]
  zklock exec [OPTIONS] PATH -c STRING
  zklock lock [OPTIONS] PATH
  zklock ls   [OPTIONS] [-r] PATH
  zklock wait [OPTIONS] PATH
  zklock revoke [OPTIONS] PATH
  zklock rm   [OPTIONS] PATH
  zklock permits [OPTIONS] PATH [N]
  zklock --help | --version
)";

constexpr const char* footer_text =
    R"(Durations (D): a number with a unit: 250ms, 10s, 2m, 1h, 1.5s; a plain number means seconds.
Options may come before or after PATH; the common options (--connect, --auth, --auth-file,
--session-timeout, --connect-timeout, -v) before the command too. CMD starts after '--', or at the first word after
PATH that is not an option.

Exit status:
  exec: CMD's exit status, or 128+N if CMD was killed by signal N; otherwise:
  0    lock: released after a signal or the end of stdin; wait: PATH is free; ls: listed;
       rm: removed; permits: printed or changed
  66   ls, rm, permits: PATH does not exist (nothing holds or waits for it)
  69   cannot reach ZooKeeper (a host that does not resolve, no server answers): no session at
       the start, or no new one before --timeout after the session ended while waiting (given a
       new one, exec and lock queue again and wait on)
  70   another failure inside zklock (e.g. the server refused an operation)
  75   the lock was lost while CMD ran (CMD's group was stopped), before CMD could start, or
       while lock held it
  77   the server refused for lack of permission (ACL, authentication); the message names the
       node and the permission needed
  78   the chroot of the connect string does not exist on the server
  124  the lock is taken (-n) or was not acquired within --timeout (exec, lock; lock also if
       stdin ended first), or PATH was not free in time (wait), or is in use (rm); -E CODE sets
       another code (not for rm)
  125  usage error or bad input (option, duration, path, connect string, lease count)
  126  CMD cannot be executed
  127  CMD not found
  128+N  zklock got signal N while waiting for the lock

Environment:
  ZOOKEEPER_HOSTS       servers to use when --connect is not given
  ZKLOCK_AUTH           credentials when neither --auth nor --auth-file is given: SCHEME:CREDENTIALS,
                        several separated by newlines
  ZKLOCK_FENCING_TOKEN  (set for CMD) the fencing token of the hold
  ZKLOCK_PATH           (set for CMD) the lock path

Examples:
  zklock exec /locks/db -- ./migrate.sh            # alone: no other exec of /locks/db runs
  zklock exec --shared /locks/db -- ./report.sh    # with other --shared, never during migrate.sh
  zklock exec -n -E 0 /locks/cron -c 'run-report'  # skip (exit 0) if the last run still goes
  coproc zklock lock /locks/db; read -r line <&"${COPROC[0]}"   # hold across commands; kill to release)";

constexpr const char* exec_text =
    "Wait for the lock PATH, run CMD while holding it, release it once CMD has ended and no process is left in "
    "CMD's process group: CMD runs in a group of its own, and what it starts in the background keeps the lock "
    "until it ends too (zklock adopts and reaps the orphans). CMD's environment gets ZKLOCK_FENCING_TOKEN (the "
    "hold's fencing token, a number that grows with every new holder) and ZKLOCK_PATH. HUP, INT, QUIT, TERM, "
    "USR1 and USR2 sent to zklock are passed on to CMD's group, once. Run in the foreground of a terminal, zklock "
    "gives the terminal to CMD's group, so that CMD reads it and Ctrl-C reaches the group directly (not through "
    "zklock as well). If the lock is lost while CMD runs (session expired, or the lock node deleted by someone "
    "else), CMD's group gets the kill signal, then SIGKILL after the grace period. A signal while waiting for "
    "the lock ends the wait (zklock leaves the queue and exits with 128+signal).";
constexpr const char* lock_text =
    "Wait for the lock PATH and hold it until zklock gets SIGINT, SIGTERM, SIGHUP or SIGQUIT, or its standard "
    "input ends (when it is a pipe, a socket or the terminal zklock runs in the foreground of); then release it "
    "and exit 0. Once it holds, zklock prints one line, ZKLOCK_FENCING_TOKEN=<token>, on standard output, so "
    "that a script can hold the lock across several commands: coproc zklock lock /locks/x; read the line; run "
    "the commands; then close the coprocess's input or kill it. If the lock is lost while held (session "
    "expired, or the lock node deleted by someone else), zklock says so and exits 75. A signal while waiting "
    "for the lock ends the wait (exit 128+signal), the end of standard input too (exit 124, or -E's code).";
constexpr const char* ls_text =
    "List the contenders of PATH in queue order: position, state (holder or waiter), kind, fencing token, host, "
    "pid and start time of each (zklock stores host, pid and time in its nodes; for Curator's nodes the host is "
    "the IP address they store), and for holders that are zklock exec processes what their acquire cost: wait, "
    "hold time so far, wake-ups and ZooKeeper requests (exec records them beside its node while it holds). A "
    "semaphore's listing says how many of its leases are used. With -r, every lock and semaphore at or below PATH, "
    "each with its holders and waiters. A PATH that does not exist exits 66. A holder asked to let go (zklock "
    "revoke, Curator's Revoker) shows revoke-requested as its host.";
constexpr const char* permits_text =
    "Print the lease count N of the semaphore PATH, with the permits used and free; with N, store N for every "
    "process at once (a versioned write) and print the change. Waiters see a new N at once: a larger one grants "
    "those that now fit; under a smaller one the holders keep their leases until they release them. A PATH that "
    "is no semaphore is refused (exit 125); one that does not exist exits 66 (with N: it is made, storing N).";

constexpr const char* rm_text =
    "Remove PATH, a lock or semaphore nobody holds or waits for (with the hold records left beside it), and "
    "print what it was. A busy one is refused, naming its holders and how many wait (exit 124, as a lock taken "
    "under -n); a node that is no lock's (other nodes below it, or data that is no lease count) is refused too "
    "(exit 125); a PATH that does not exist exits 66. A contender that queues meanwhile makes the removal fail, "
    "so nothing is removed from under a holder. A semaphore still open in some process is made again, with its "
    "lease count, by its next acquire.";
constexpr const char* wait_text =
    "Wait until PATH has no contenders (nobody holds or waits for it). Watches, no polling.";
constexpr const char* revoke_text =
    "Ask the holders of PATH (every holder: of a mutex, of the read side, every lease of a semaphore; or one "
    "contender with --node) to let go, wait up to --grace for them to, then delete the nodes of those still "
    "holding (they are told: their loss signal fires, and zklock exec stops CMD). The request is Curator's "
    "revocation marker, so revocable Curator locks hear it too. Prints one line per hold: its node and "
    "whether it was released on request, forced, or already gone.";

/// Returns: `text` with line breaks, so that no line is longer than `width` (CLI11 indents them).
std::string wrap(std::string_view text, std::size_t width) {
  std::string out;
  std::size_t line = 0;
  while (!text.empty()) {
    const auto end = text.find(' ');
    const std::string_view word = text.substr(0, end);
    text = end == std::string_view::npos ? std::string_view{} : text.substr(end + 1);
    if (line > 0 && line + 1 + word.size() > width) {
      out += '\n';
      line = 0;
    } else if (line > 0) {
      out += ' ';
      ++line;
    }
    out += word;
    line += word.size();
  }
  return out;
}

constexpr std::size_t help_width = 100;  // the lines of the help
constexpr std::size_t name_width = 24;   // the column of option names

/// Returns: `help` with runs of blank lines collapsed into one.
std::string tidy_help(std::string help) {
  for (std::size_t at; (at = help.find("\n  \n")) != std::string::npos;) help.erase(at + 1, 2);
  for (std::size_t at; (at = help.find("\n\n\n")) != std::string::npos;) help.erase(at, 1);
  return help;
}

/// CLI11's help with zklock's usage lines on top, and the common options shown once in the
/// help of all commands (not once per command).
class help_formatter : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string) const override {
    return std::string{usage_text} + "\n" + wrap(app->get_description(), help_width) + "\n";
  }
  std::string make_description(const CLI::App* app) const override {  // (in make_usage, unless expanded)
    return expanding_ ? wrap(app->get_description(), help_width - 2) + "\n" : std::string{};
  }
  std::string make_expanded(const CLI::App* sub) const override {
    expanding_ = true;
    auto out = CLI::Formatter::make_expanded(sub);
    expanding_ = false;
    return out;
  }
  std::string make_group(std::string group, bool positional, std::vector<const CLI::Option*> opts) const override {
    if (expanding_ && group == common_group) return {};
    return CLI::Formatter::make_group(std::move(group), positional, std::move(opts));
  }
  std::string make_footer(const CLI::App* app) const override {
    std::string out;
    if (!app->get_parent()) {  // the help of all commands: the common options, from any command
      const CLI::App* any = app->get_subcommands({}).front();
      const auto common = any->get_options([](const CLI::Option* o) { return o->get_group() == common_group; });
      out = CLI::Formatter::make_group(common_group, false, common);
    }
    return out + "\n" + CLI::Formatter::make_footer(app);
  }

 private:
  mutable bool expanding_ = false;
};

/// The command line: the CLI11 app and what it fills in.
struct command_line {
  CLI::App app{"zklock - run a command while holding a ZooKeeper lock (a cluster-wide flock(1))", "zklock"};
  CLI::App* exec = nullptr;
  CLI::App* lock = nullptr;
  CLI::App* ls = nullptr;
  CLI::App* wait = nullptr;
  CLI::App* revoke = nullptr;
  CLI::App* rm = nullptr;
  CLI::App* permits = nullptr;
  options o;
  int verbosity = 0;

  void set_mode(lock_mode m) {
    if (o.mode_given && o.mode != m) usage_error("--shared, --write, --mutex and --permits exclude each other");
    o.mode = m;
    o.mode_given = true;
  }

  /// Effects: the bound of the wait, given by `option` (--timeout, --wait or --nonblock; each may
  /// be given again, the last wins). Throws: a usage error if another of them was given.
  void set_timeout(const std::string& option, ms d) {
    if (!o.timeout_by.empty() && o.timeout_by != option)
      usage_error(o.timeout_by + " and " + option + " exclude each other (both bound the wait)");
    o.timeout = d;
    o.timeout_by = option;
  }

  /// Effects: adds an option with a value to `sub`; `take` parses each value given (the last wins).
  void value(CLI::App* sub, const std::string& name, const std::string& type, const std::string& help,
             std::function<void(const std::string&)> take, const char* group = "Options") {
    sub->add_option(name)
        ->description(wrap(help, help_width - name_width))
        ->type_name(type)
        ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
        ->each(std::move(take))
        ->group(group);
  }
  void flag(CLI::App* sub, const std::string& name, const std::string& help, std::function<void()> take,
            const char* group = "Options") {
    sub->add_flag_callback(name, std::move(take), wrap(help, help_width - name_width))
        ->disable_flag_override()
        ->group(group);
  }

  CLI::App* command(const char* name, const char* help) {
    CLI::App* sub = app.add_subcommand(name, help);
    sub->group("Commands");
    sub->set_help_flag("-h,--help", "show this help");
    sub->footer(footer_text);
    sub->allow_extras();
    sub->add_option("PATH", o.path, "the lock node, e.g. /locks/backup")->type_name("");
    return sub;
  }

  void add_common(CLI::App* sub) {
    value(sub, "--connect", "HOSTS",
          "ZooKeeper servers, \"host:port[,host:port...][/chroot]\" (default: $ZOOKEEPER_HOSTS)",
          [this](const std::string& v) { o.connect = v; }, common_group);
    value(sub, "--session-timeout", "D",
          "session timeout asked of the server (default 10s); the server may clamp it to its limits (zklock "
          "warns): the granted one is how long a dead zklock keeps its lock",
          [this](const std::string& v) { o.session_timeout = parse_duration("--session-timeout", v, false); },
          common_group);
    value(sub, "--connect-timeout", "D", "give up connecting after D (default 5s)",
          [this](const std::string& v) { o.connect_timeout = parse_duration("--connect-timeout", v, false); },
          common_group);
    sub->add_flag_function("-v,--verbose", [this](std::int64_t n) { verbosity += static_cast<int>(n); },
                           wrap("say what zklock does, on stderr; given twice (-v -v), show the ZooKeeper client's "
                                "log too",
                                help_width - name_width))
        ->disable_flag_override()
        ->group(common_group);
    for (auto& a : auth_options(o)) value(sub, a.name, a.type, a.help, a.take, common_group);  // auth.cpp
    for (auto& a : tls_options(o)) value(sub, a.name, a.type, a.help, a.take, common_group);   // auth.cpp
    for (auto& a : sasl_options(o)) value(sub, a.name, a.type, a.help, a.take, common_group);  // auth.cpp
  }

  command_line() {
    app.formatter(std::make_shared<help_formatter>());
    app.get_formatter()->column_width(name_width);
    app.set_help_flag("-h,--help", "show this help");
    app.set_version_flag("--version", std::string{"zklock "} + ZKLOCK_VERSION, "show the version");
    app.require_subcommand(0, 1);  // at most one: CMD may be named like a command ("zklock exec /l ls")
    app.allow_extras();            // the extras are checked by check() below, to name them as zklock does
    app.footer(footer_text);

    exec = command("exec", exec_text);
    exec->prefix_command();  // CMD starts at the first word after PATH that is not an option
    value(exec, "-c,--command", "STRING", "run STRING with /bin/sh -c instead of CMD (like flock -c)",
          [this](const std::string& v) { o.shell_command = v; });
    add_lock_options(exec);
    value(exec, "--kill-signal", "SIG",
          "signal that stops CMD's group when the lock is lost, and that CMD gets if zklock itself dies (default "
          "TERM; a name like TERM, SIGINT, or a number)",
          [this](const std::string& v) { o.kill_signal = parse_signal(v); });
    value(exec, "--grace", "D", "time CMD's group has to end after the kill signal before SIGKILL (default 5s)",
          [this](const std::string& v) { o.grace = parse_duration("--grace", v, true); });
    value(exec, "--max-hold", "D",
          "hold the lock at most D: then it ends as if lost (its node is deleted, so nobody waits on a stuck CMD; "
          "CMD's group gets the kill signal, exit 75)",
          [this](const std::string& v) { o.max_hold = parse_duration("--max-hold", v, false); });
    value(exec, "--on-revoke", "WHAT",
          "what a revocation request (zklock revoke, Curator's Revoker) does: term (the default: CMD's group gets the "
          "kill signal, as when the lock is lost, exit 75) or ignore (CMD goes on until the revoker forces the release)",
          [this](const std::string& v) {
            if (v != "term" && v != "ignore") usage_error("bad --on-revoke \"" + v + "\": term or ignore");
            o.revoke_ignore = v == "ignore";
          });
    value(exec, "--hold-at-least", "D",
          "keep the lock at least D from its grant: a CMD that ends sooner keeps it (and zklock waits) until then, "
          "so a second run elsewhere does not start in that window",
          [this](const std::string& v) { o.hold_at_least = parse_duration("--hold-at-least", v, false); });
    const option_spec acl = acl_option(o);  // auth.cpp
    value(exec, acl.name, acl.type, acl.help, acl.take);
    add_common(exec);

    lock = command("lock", lock_text);
    add_lock_options(lock);
    value(lock, acl.name, acl.type, acl.help, acl.take);
    add_common(lock);

    ls = command("ls", ls_text);
    flag(ls, "--json", "one JSON object per contender and line (with -r: one JSON document)",
         [this] { o.json = true; });
    flag(ls, "-r,--recursive", "every lock and semaphore at or below PATH, with its holders and waiters",
         [this] { o.recursive = true; });
    add_common(ls);

    revoke = command("revoke", revoke_text);
    value(revoke, "--grace", "D", "time the holders have to let go once asked (default 10s)",
          [this](const std::string& v) { o.revoke_grace = parse_duration("--grace", v, true); });
    flag(revoke, "--force", "delete the holders' nodes at once, without waiting (they are still asked first)",
         [this] { o.revoke_force = true; });
    value(revoke, "--node", "NAME", "revoke this contender node of PATH only (a name as zklock ls shows it)",
          [this](const std::string& v) { o.revoke_node = v; });
    add_common(revoke);

    rm = command("rm", rm_text);
    add_common(rm);

    permits = command("permits", permits_text);
    add_common(permits);

    wait = command("wait", wait_text);
    value(wait, "--timeout", "D", "wait at most D (0: check once; default: wait forever)",
          [this](const std::string& v) { set_timeout("--timeout", parse_duration("--timeout", v, true)); });
    add_bound_synonyms(wait, "PATH is still taken");
    add_common(wait);
  }

  /// Effects: adds to `sub` flock's -n and -w (synonyms of --timeout) and -E, for `not_got`.
  void add_bound_synonyms(CLI::App* sub, const std::string& not_got) {
    flag(sub, "-n,--nonblock", "same as --timeout 0 (like flock -n)",
         [this] { set_timeout("--nonblock", ms::zero()); });
    value(sub, "-w,--wait", "D", "same as --timeout D; a plain number means seconds (like flock -w)",
          [this](const std::string& v) { set_timeout("--wait", parse_duration("--wait", v, true)); });
    value(sub, "-E,--conflict-exit-code", "CODE",
          "exit with CODE, not 124, when " + not_got +
              " (flock's -E, whose default is 1). 0 to 127 but zklock's own codes (69, 70, 75, 77, 78, 125-127)",
          [this](const std::string& v) { o.conflict_code = parse_conflict_code(v); });
  }

  /// Effects: adds the options that say how exec and lock take the lock: the lock modes, the bound
  /// of the wait and its flock synonyms, -E.
  void add_lock_options(CLI::App* sub) {
    const char* modes = "Lock modes (at most one; default: --write)";
    flag(sub, "-x,-e,--write,--exclusive",
         "exclusive: the write side of a read/write lock. Waits for and keeps out the other plain (--write) and "
         "--shared holders of PATH (like flock -x)",
         [this] { set_mode(lock_mode::write); }, modes);
    flag(sub, "-s,--shared",
         "shared: the read side of that lock. Holds alongside other --shared holders, never alongside a --write "
         "one (like flock -s)",
         [this] { set_mode(lock_mode::shared); }, modes);
    flag(sub, "--mutex",
         "exclusive, with zklock::mutex nodes (for Curator's InterProcessMutex, which counts only those). "
         "Excludes --write, --shared and other --mutex holders of PATH, as --write does",
         [this] { set_mode(lock_mode::mutex); }, modes);
    value(sub, "--permits", "N",
          "one of N leases of a counting semaphore (N: 1..1000000; every user of the path must give the same N)",
          [this](const std::string& v) {
            o.permits = parse_permits(v);
            set_mode(lock_mode::permits);
          },
          modes);
    value(sub, "--take", "K",
          "with --permits N: take K of the N at once, as one lease (K: 1..N; default 1). Granted in queue order "
          "once all K fit; a waiter for K is not passed by later smaller ones",
          [this](const std::string& v) {
            o.take = parse_permits(v, "--take");
            o.take_given = true;
          });
    value(sub, "--timeout", "D", "wait at most D for the lock (0: try once; default: wait forever)",
          [this](const std::string& v) { set_timeout("--timeout", parse_duration("--timeout", v, true)); });
    add_bound_synonyms(sub, "the lock is taken (-n) or not acquired in time");
  }

  /// Throws: a usage error for `word`, an argument no option or position of `sub` took.
  [[noreturn]] void unexpected(const CLI::App* sub, const std::string& word) const {
    if (!word.starts_with("-") || word == "-") usage_error("unexpected argument \"" + word + "\"");
    const std::string name = word.substr(0, word.find('='));
    for (const CLI::App* other : {exec, lock, ls, wait, revoke, rm, permits})
      if (other != sub && other->get_option_no_throw(name))
        usage_error("option " + name + " does not apply to " + sub->get_name());
    usage_error("unknown option \"" + name + "\"");
  }

  /// Effects: what CLI11 leaves to zklock: the command, extras, PATH, CMD, the connect string.
  /// Throws: exit_error (usage) for the first problem.
  CLI::App* check() {
    const auto subs = app.get_subcommands();
    const std::vector<std::string> top = app.remaining();  // after a command's '--' (exec: CMD)
    if (subs.empty()) usage_error("no command given: exec, lock, ls, wait, revoke, rm or permits");
    CLI::App* sub = subs.front();
    std::vector<std::string> extra = sub->remaining();
    if (sub == exec) {
      // Options zklock does not know come first, then CMD (which can't start with '-' before '--').
      auto cmd = std::find_if(extra.begin(), extra.end(), [](const std::string& w) { return !w.starts_with("-"); });
      if (cmd != extra.begin()) {
        if (extra.front() == "--") usage_error("exec needs a lock PATH before '--'");
        unexpected(sub, extra.front());
      }
      o.argv = extra.empty() ? top : extra;
      if (o.shell_command) {
        if (!o.argv.empty()) usage_error("exec runs -c STRING or CMD [ARGS...], not both (\"" + o.argv.front() + "\")");
        if (o.path.empty()) usage_error("exec needs a lock PATH: zklock exec PATH -c STRING");
        o.argv = {"/bin/sh", "-c", *o.shell_command};
      }
    } else {
      extra.insert(extra.end(), top.begin(), top.end());
      if (sub == permits && !extra.empty() && !extra.front().starts_with("-")) {  // the new N
        o.new_max = parse_permits(extra.front(), "N");
        extra.erase(extra.begin());
      }
      if (!extra.empty()) unexpected(sub, extra.front());
    }
    if (o.path.empty()) usage_error(sub->get_name() + " needs a lock PATH");
    if (sub == exec) {
      if (o.argv.empty()) usage_error("exec needs a command to run: zklock exec PATH -- CMD [ARGS...], or -c STRING");
      if (o.argv.front().empty() || (o.shell_command && o.shell_command->empty()))
        usage_error("the command to run is an empty string");
    }
    if (o.take_given && o.mode != lock_mode::permits) usage_error("--take K needs --permits N (a semaphore's lease count)");
    if (o.take > o.permits && o.mode == lock_mode::permits)
      usage_error("--take " + std::to_string(o.take) + " is more than the semaphore's --permits " +
                  std::to_string(o.permits) + " (take 1 to " + std::to_string(o.permits) + ")");
    if (o.max_hold > ms::zero() && o.hold_at_least > o.max_hold)
      usage_error("--hold-at-least (" + std::to_string(o.hold_at_least.count()) + " ms) is over --max-hold (" +
                  std::to_string(o.max_hold.count()) + " ms)");
    if (!o.connect) {
      const char* env = std::getenv("ZOOKEEPER_HOSTS");
      if (!env || !*env)
        usage_error("no ZooKeeper to talk to: give --connect HOST:PORT[,HOST:PORT...] or set ZOOKEEPER_HOSTS");
      o.connect = env;
    }
    auth_from_environment(o);
    (void)tls_from_options(o);  // all three files or none: said before anything else happens
    (void)sasl_from_options(o);
    try {
      zklock::validate_lock_path(o.path);
    } catch (const std::invalid_argument& e) {
      usage_error(tidy(e.what()));
    }
    g_verbose = verbosity > 0;
    g_client_log = verbosity > 1;
    return sub;
  }
};

/// Returns: the option an ArgumentMismatch of CLI11 is about ("--timeout: 1 required ..." or
/// "mutex was given a disallowed flag override"), spelled as given.
std::string option_of(const CLI::ArgumentMismatch& e) {
  std::string what = e.what();
  what = what.substr(0, what.find_first_of(": "));
  return what.starts_with("-") ? what : "--" + what;
}

constexpr const char* commands = "exec, lock, ls, wait, revoke, rm or permits";

bool is_command(std::string_view w) {
  return w == "exec" || w == "lock" || w == "ls" || w == "wait" || w == "revoke" || w == "rm" || w == "permits";
}

/// Returns: the command line with the common options given before the command moved after it:
/// "zklock -v --connect X exec ..." is parsed as "zklock exec -v --connect X ...", so that nothing
/// given before the command ends up among the words of exec's CMD. Unchanged when it asks for
/// --help or --version before any command.
/// Throws: a usage error for a word before the command that is not a common option (or its value).
std::vector<std::string> command_first(const command_line& cl, int argc, char** argv) {
  std::vector<std::string> args(argv, argv + argc);
  const CLI::App* any = cl.ls;  // every command has the same common options
  auto common = [&](const std::string& name) -> const CLI::Option* {
    const CLI::Option* opt = any->get_option_no_throw(name);
    return opt && opt->get_group() == common_group ? opt : nullptr;
  };
  auto refuse = [&](const std::string& name) {
    for (const CLI::App* sub : {cl.exec, cl.lock, cl.ls, cl.wait, cl.revoke, cl.rm, cl.permits})
      if (sub->get_option_no_throw(name)) {
        std::string names;
        for (const CLI::Option* opt : any->get_options([](const CLI::Option* o) { return o->get_group() == common_group; }))
          names += (names.empty() ? "" : ", ") + opt->get_name();
        usage_error("the command comes first: zklock " + sub->get_name() + " " + name + " ...; before the command only " +
                    names);
      }
    usage_error("unknown option \"" + name + "\"");
  };
  std::vector<std::string> before;
  std::size_t i = 1;
  auto take_value = [&](const std::string& name) {
    if (i == args.size()) usage_error("option " + name + " needs a value");
    before.push_back(args[i++]);
  };
  while (i < args.size()) {
    const std::string w = args[i];
    if (w == "-h" || w == "--help" || w == "--version") return args;
    if (!w.starts_with("-") || w == "-") break;
    if (w == "--") usage_error("the command comes first, before '--'");
    before.push_back(w);
    ++i;
    if (w.starts_with("--")) {
      const auto eq = w.find('=');
      const std::string name = w.substr(0, eq);
      const CLI::Option* opt = common(name);
      if (!opt) refuse(name);
      if (eq == std::string::npos && opt->get_expected_max() > 0) take_value(name);
      continue;
    }
    // Short options, grouped or not ("-vv"); one that takes a value takes the rest of the word, or the next word.
    for (std::size_t c = 1; c < w.size(); ++c) {
      const std::string name{'-', w[c]};
      const CLI::Option* opt = common(name);
      if (!opt) refuse(name);
      if (opt->get_expected_max() > 0) {
        if (c + 1 == w.size()) take_value(name);
        break;
      }
    }
  }
  if (i == args.size()) {
    if (before.empty()) return args;  // no command at all: check() says so
    usage_error(std::string{"no command given after the options: "} + commands);
  }
  if (args[i] == "help") return {args[0], "help"};
  if (!is_command(args[i])) usage_error("unknown command \"" + args[i] + "\" (" + commands + ")");
  std::vector<std::string> out{args[0], args[i]};
  out.insert(out.end(), before.begin(), before.end());
  out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return out;
}

int run(int argc, char** argv) {
  command_line cl;
  std::vector<std::string> args = command_first(cl, argc, argv);
  if (args.size() > 1 && args[1] == "help") {
    std::cout << tidy_help(cl.app.help("", CLI::AppFormatMode::All));
    return exit_code::ok;
  }
  std::vector<char*> words;
  for (auto& a : args) words.push_back(a.data());
  try {
    cl.app.parse(static_cast<int>(words.size()), words.data());
  } catch (const CLI::CallForHelp&) {
    std::cout << tidy_help(cl.app.get_subcommands().empty() ? cl.app.help("", CLI::AppFormatMode::All)
                                                            : cl.app.help());
    return exit_code::ok;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return exit_code::ok;
  } catch (const CLI::ArgumentMismatch& e) {
    const std::string name = option_of(e);
    if (std::string_view{e.what()}.find("flag override") != std::string_view::npos)
      usage_error("option " + name + " takes no value");
    usage_error("option " + name + " needs a value");
  } catch (const CLI::ParseError& e) {
    usage_error(e.what());
  }
  const CLI::App* sub = cl.check();
  if (sub == cl.exec) return run_exec(cl.o);
  if (sub == cl.lock) return run_lock(cl.o);
  if (sub == cl.ls) return run_ls(cl.o);
  if (sub == cl.revoke) return run_revoke(cl.o);
  if (sub == cl.rm) return run_rm(cl.o);
  if (sub == cl.permits) return run_permits(cl.o);
  return run_wait(cl.o);
}

}  // namespace
}  // namespace zkcli

int main(int argc, char** argv) {
  using namespace zkcli;
  remember_inherited_fds();
  try {
    return run(argc, argv);
  } catch (const exit_error& e) {
    say("%s", e.message.c_str());
    return e.code;
  } catch (const std::exception& e) {
    const exit_error err = classify(e);
    say("%s", err.message.c_str());
    return err.code;
  }
}
