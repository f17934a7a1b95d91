// SPDX-License-Identifier: Apache-2.0
// CMD's process group, as `zklock exec` runs it: the descriptors CMD inherits, looking CMD up, the
// signalfd, fork/exec into a group of its own with zklock as child subreaper, the terminal handed
// to the group, signals passed on, the kill signal and SIGKILL when the lock is lost, and waiting
// until the group is gone.
//
// CMD runs in a process group of its own (its pgid is CMD's pid), and zklock is a child subreaper
// (PR_SET_CHILD_SUBREAPER): whatever CMD starts and leaves behind is re-parented to zklock, which
// reaps it. The lock is held until CMD has ended and its group is gone: while any process that CMD
// started is still in the group, like flock(1) while a descendant holds the descriptor. A forwarded
// signal or the kill signal of a lost lock goes to the group, once (kill(-pgid, sig)). A process
// that leaves the group (setsid, setpgid) leaves the lock too: zklock could not stop it. The main
// loop polls two descriptors: the signalfd (SIGCHLD: reap; others: pass on to CMD's group) and a
// self-pipe written by a std::stop_callback on the hold's loss token (stop CMD's group).
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <set>
#include "cli.hpp"

extern char** environ;

namespace zkcli {
namespace {

[[noreturn]] void throw_errno(const std::string& what) { throw std::system_error(errno, std::generic_category(), what); }

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

int exit_status_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return exit_code::signal_base + WTERMSIG(status);
  return exit_code::software;
}

}  // namespace

void fd_t::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void remember_inherited_fds() { g_inherited_fds = open_fds(); }

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

namespace {
/// The signals passed on to CMD.
constexpr int forwarded_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2};
/// The signal mask zklock was started with: CMD gets it back.
sigset_t g_original_mask;
}  // namespace

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


std::optional<int> pending_signal(int sigfd) {
  if (const auto si = next_signal(sigfd)) return static_cast<int>(si->ssi_signo);
  return std::nullopt;
}

bool input_at_end(int fd) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n > 0) return false;
    if (n < 0 && errno == EINTR) continue;
    return n == 0 || errno != EAGAIN;  // end of file, or an error (e.g. EIO of a hung-up terminal)
  }
}

acquire_interrupter::acquire_interrupter(zklock::session& s, int sigfd, int input)
    : s_(s), sigfd_(sigfd), input_(input) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
  stop_r_ = fd_t{p[0]};
  stop_w_ = fd_t{p[1]};
  thread_ = std::thread([this] { run(); });
}

int acquire_interrupter::stop() {
  if (thread_.joinable()) {
    const char c = 0;
    while (::write(stop_w_.get(), &c, 1) < 0 && errno == EINTR) {}
    thread_.join();
  }
  return signal_.load();
}

void acquire_interrupter::run() {
  for (;;) {
    pollfd p[3] = {{sigfd_, POLLIN, 0}, {stop_r_.get(), POLLIN, 0}, {input_, POLLIN, 0}};
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    if (p[2].revents && input_at_end(input_)) {
      input_ended_.store(true);
      s_.close();  // as for a signal
      return;
    }
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

int supervise(const child_command& cmd, int sigfd_fd, std::stop_token lost, const std::function<void()>& release) {
  // The loss signal, as a readable pipe for poll().
  int lp[2];
  if (::pipe2(lp, O_CLOEXEC | O_NONBLOCK) != 0) throw_errno("pipe2");
  const fd_t lost_r{lp[0]}, lost_w{lp[1]};
  const int lost_w_fd = lost_w.get();
  std::stop_callback on_lost{lost, [lost_w_fd] {
                               const char c = 1;
                               [[maybe_unused]] auto n = ::write(lost_w_fd, &c, 1);
                             }};
  if (lost.stop_requested()) {
    say("lost the lock on %s before %s could start", cmd.path.c_str(), cmd.argv.front().c_str());
    release();
    return exit_code::lost;
  }

  // CMD's argv and environment, prepared before fork (the child only makes system calls).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string_view v = *e;
    const auto replaced = [&](const std::string& set) { return v.starts_with(set.substr(0, set.find('=') + 1)); };
    if (std::none_of(cmd.env.begin(), cmd.env.end(), replaced)) env_strings.emplace_back(v);
  }
  env_strings.insert(env_strings.end(), cmd.env.begin(), cmd.env.end());
  std::vector<char*> envp, argv;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<std::string> args = cmd.argv;
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
    ::prctl(PR_SET_PDEATHSIG, cmd.kill_signal);  // zklock dies: the lock is no longer guaranteed
    if (::getppid() != parent) ::_exit(exit_code::lost);
    ::execve(cmd.file.c_str(), argv.data(), envp.data());
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
    release();
    say("cannot run %s: %s", cmd.argv.front().c_str(), std::strerror(exec_errno));
    return exec_errno == ENOENT ? exit_code::not_found : exit_code::cannot_execute;
  }
  if (g_verbose) say("running %s (pid %d, in process group %d)", cmd.argv.front().c_str(), static_cast<int>(pid),
                     static_cast<int>(group));

  // Wait until CMD has ended and its group is gone; pass signals on to the group; stop the group
  // if the lock is lost.
  auto signal_group = [group](int sig) { ::kill(-group, sig); };
  bool was_lost = false, cmd_ended = false;
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
        if (g_verbose) say("%s ended: exit status %d", cmd.argv.front().c_str(), exit_status_of(st));
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
    pollfd p[2] = {{sigfd_fd, POLLIN, 0}, {was_lost ? -1 : lost_r.get(), POLLIN, 0}};
    const int r = ::poll(p, 2, wait_ms);
    if (r < 0 && errno != EINTR) throw_errno("poll");
    if (r > 0 && p[1].revents && !was_lost) {
      was_lost = true;
      const bool revoked = cmd.revoked && cmd.revoked->load();
      say("%s %s: stopping %s and its process group (%d) with %s%s",
          revoked ? "asked to let go of (revoked)" : "lost the lock on", cmd.path.c_str(),
          cmd.argv.front().c_str(), static_cast<int>(group), signal_name(cmd.kill_signal).c_str(),
          cmd.kill_signal == SIGKILL ? "" : (", then SIGKILL after " + std::to_string(cmd.grace.count()) + " ms").c_str());
      signal_group(cmd.kill_signal);
      if (cmd.kill_signal != SIGKILL) {
        signal_group(SIGCONT);  // a stopped process must see the kill signal too
        kill_at = steady::now() + cmd.grace;
      }
    }
    if (r > 0 && p[0].revents) {
      while (const auto si = next_signal(sigfd_fd)) {
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
          cmd.argv.front().c_str(), static_cast<long long>(cmd.grace.count()), signal_name(cmd.kill_signal).c_str());
      signal_group(SIGKILL);
      kill_at = steady::time_point::max();
    }
  }
  release();
  if (was_lost) return exit_code::lost;
  return exit_status_of(status);
}

}  // namespace zkcli
