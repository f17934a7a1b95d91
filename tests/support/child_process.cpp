// SPDX-License-Identifier: Apache-2.0
// Test support: child processes owned by a test (see child_process.hpp).
#include "child_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <utility>

#include "posix_io.hpp"

extern char** environ;

namespace zkt {
namespace {

using std::chrono::steady_clock;

// pidfds through syscall(2): glibc 2.36's <sys/pidfd.h> lacks extern "C" and does not link from C++.
int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)); }
int pidfd_send_signal(int fd, int sig) { return static_cast<int>(::syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0)); }

/// Returns: a close-on-exec duplicate of `fd` numbered above 2 (closing `fd`), so that the child's
/// dup2 onto 0..2 cannot overwrite it even if this process runs with a standard descriptor closed.
int above_stdio(int fd) {
  const int high = ::fcntl(fd, F_DUPFD_CLOEXEC, 3);
  ::close(fd);
  if (high < 0) throw_errno("fcntl(F_DUPFD_CLOEXEC)");
  return high;
}

/// An owned descriptor.
struct fd_guard {
  int fd = -1;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
  int release() noexcept { return std::exchange(fd, -1); }
};

/// Effects: makes the two ends of a pipe (above stdio, close-on-exec).
void make_pipe(fd_guard& read_end, fd_guard& write_end) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) throw_errno("pipe2");
  read_end.fd = above_stdio(p[0]);
  write_end.fd = above_stdio(p[1]);
}

/// Returns: `name` as found on PATH (itself if it holds a '/' or is found nowhere).
std::string on_path(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  for (std::size_t b = 0; b <= dirs.size();) {
    const auto e = std::min(dirs.find(':', b), dirs.size());
    const std::string candidate = (e > b ? dirs.substr(b, e - b) : ".") + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    b = e + 1;
  }
  return name;
}

}  // namespace

child_process::child_process(std::vector<std::string> argv_s, const spawn_options& o) : new_group_(o.new_group) {
  if (argv_s.empty()) throw std::invalid_argument("child_process: no program");
  const std::string exe = on_path(argv_s.front());
  std::vector<std::string> env_s;
  if (o.env) env_s = *o.env;
  else
    for (char** e = environ; *e; ++e) env_s.emplace_back(*e);
  std::vector<char*> argv, envp;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);

  fd_guard in_r, in_w, out_r, out_w, err_w;
  auto open_above = [](const char* path, int flags) {
    const int fd = ::open(path, flags | O_CLOEXEC, 0644);
    if (fd < 0) throw_errno(std::string{"open "} + path);
    return above_stdio(fd);
  };
  if (o.in == stream::pipe) {
    make_pipe(in_r, in_w);
  } else if (o.in == stream::null) {
    in_r.fd = open_above("/dev/null", O_RDONLY);
  }
  if (o.out == stream::pipe) make_pipe(out_r, out_w);
  else if (o.out == stream::null) out_w.fd = open_above("/dev/null", O_WRONLY);
  if (!o.err_file.empty()) err_w.fd = open_above(o.err_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC);

  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ < 0) throw_errno("fork");
  if (pid_ == 0) {  // the child: async-signal-safe calls only (the test has other threads), up to exec
    if (o.new_group) ::setpgid(0, 0);
    if (o.die_with_parent && (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent)) ::_exit(126);
    if ((in_r.fd >= 0 && ::dup2(in_r.fd, STDIN_FILENO) < 0) || (out_w.fd >= 0 && ::dup2(out_w.fd, STDOUT_FILENO) < 0) ||
        (err_w.fd >= 0 && ::dup2(err_w.fd, STDERR_FILENO) < 0))
      ::_exit(126);
    ::execve(exe.c_str(), argv.data(), envp.data());
    ::_exit(127);
  }
  if (o.new_group) ::setpgid(pid_, pid_);  // also here: no race with a killpg before the child ran
  to_child_ = in_w.release();
  from_child_ = out_r.release();
  if (from_child_ >= 0) ::fcntl(from_child_, F_SETFL, ::fcntl(from_child_, F_GETFL) | O_NONBLOCK);
  pidfd_ = pidfd_open(pid_);
  if (pidfd_ < 0) {
    const int e = errno;
    ::kill(pid_, SIGKILL);  // not reaped yet: the pid is still ours
    reap();
    close_fds();
    throw std::system_error(e, std::generic_category(), "pidfd_open");
  }
}

child_process::~child_process() {
  if (new_group_) ::kill(-pid_, SIGKILL);  // the child and whatever it left in its group
  else if (!reaped_) pidfd_send_signal(pidfd_, SIGKILL);
  reap();
  close_fds();
}

std::vector<std::string> child_process::self(std::string_view flag, const std::vector<std::string>& role_args) {
  const char* bin = std::getenv("ZKLOCK_TEST_BIN");
  std::vector<std::string> args{bin && *bin ? bin : "/proc/self/exe", std::string{flag}, std::to_string(::getpid())};
  args.insert(args.end(), role_args.begin(), role_args.end());
  return args;
}

bool child_process::send(std::string_view line) {
  try {
    write_all(to_child_, std::string{line} + "\n");
    return true;
  } catch (const std::system_error& e) {
    if (e.code() == std::errc::broken_pipe) return false;
    throw;
  }
}

void child_process::close_stdin() noexcept {
  if (to_child_ >= 0) ::close(std::exchange(to_child_, -1));
}

std::optional<std::string> child_process::read_line(std::chrono::milliseconds timeout) {
  const auto limit = steady_clock::now() + timeout;
  for (;;) {
    if (const auto nl = buf_.find('\n'); nl != std::string::npos) {
      std::string line = buf_.substr(0, nl);
      buf_.erase(0, nl + 1);
      return line;
    }
    if (eof_ || from_child_ < 0) {
      if (buf_.empty()) return std::nullopt;
      return std::exchange(buf_, {});
    }
    if (!wait_readable(from_child_, limit)) return std::nullopt;
    eof_ = !drain();  // what it read before the end still counts (one drain may see both)
  }
}

std::string child_process::read_available() {
  if (from_child_ >= 0 && !eof_) eof_ = !drain();
  return std::exchange(buf_, {});
}

bool child_process::drain() {
  for (;;) {
    char chunk[4096];
    const ssize_t n = ::read(from_child_, chunk, sizeof chunk);
    if (n > 0) {
      buf_.append(chunk, static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return n < 0 && errno == EAGAIN;
  }
}

void child_process::signal(int sig) {
  if (!reaped_ && pidfd_send_signal(pidfd_, sig) != 0) throw_errno("pidfd_send_signal");
}

void child_process::kill_quietly() noexcept {
  if (!reaped_) pidfd_send_signal(pidfd_, SIGKILL);
}

bool child_process::stop() {
  if (reaped_ || pidfd_send_signal(pidfd_, SIGSTOP) != 0) return false;
  siginfo_t si{};
  while (::waitid(P_PID, static_cast<id_t>(pid_), &si, WSTOPPED | WEXITED | WNOWAIT) != 0)
    if (errno != EINTR) throw_errno("waitid");
  if (si.si_code != CLD_STOPPED) return false;  // exited: left for wait() or the destructor
  while (::waitid(P_PID, static_cast<id_t>(pid_), &si, WSTOPPED) != 0)  // consume the report
    if (errno != EINTR) throw_errno("waitid");
  return true;
}

bool child_process::await_state(char state, std::chrono::milliseconds limit) const {
  const auto until = steady_clock::now() + limit;
  for (;;) {
    std::ifstream in{"/proc/" + std::to_string(pid_) + "/stat"};
    std::string text;
    std::getline(in, text);
    const auto paren = text.rfind(')');
    if (paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == state) return true;
    if (steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds{1});  // polling the kernel's view, not a synchronisation
  }
}

bool child_process::exited() const { return reaped_ || wait_readable(pidfd_, steady_clock::now()); }

std::optional<int> child_process::wait(std::chrono::milliseconds timeout) {
  if (!reaped_ && !wait_readable(pidfd_, steady_clock::now() + timeout)) return std::nullopt;
  reap();
  return status_;
}

void child_process::reap() noexcept {
  if (reaped_ || pid_ <= 0) return;
  while (::waitpid(pid_, &status_, 0) < 0 && errno == EINTR) {}
  reaped_ = true;
}

void child_process::close_fds() noexcept {
  for (int* fd : {&to_child_, &from_child_, &pidfd_})
    if (*fd >= 0) ::close(std::exchange(*fd, -1));
}

std::string describe(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return "killed by signal " + std::to_string(WTERMSIG(status));
  return "status " + std::to_string(status);
}

int child_main(int argc, char** argv, std::string_view who, const role_table& roles) {
  try {
    if (argc < 4) throw std::invalid_argument("usage: " + std::string{argc > 1 ? argv[1] : "FLAG"} + " PARENT_PID ROLE ARGS...");
    // Die with the parent's spawning thread, whatever happens to the test; checked after the
    // prctl, which may come too late.
    if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) throw_errno("prctl");
    if (::getppid() != static_cast<pid_t>(std::stol(argv[2]))) return 3;
    const auto role = roles.find(std::string_view{argv[3]});
    if (role == roles.end()) throw std::invalid_argument(std::string{"unknown role "} + argv[3]);
    return role->second(std::vector<std::string>(argv + 4, argv + argc));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%.*s %d: %s\n", static_cast<int>(who.size()), who.data(), static_cast<int>(::getpid()), e.what());
    return 2;
  }
}

}  // namespace zkt
