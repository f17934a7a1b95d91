// SPDX-License-Identifier: Apache-2.0
// The process harness of the chaos tests (chaos_test.cpp, ensemble_faults_test.cpp): contender
// processes that are this test binary re-executed in a role, their event logs, a fenced store
// serving a UNIX socket, and the small system helpers these need, on tests/support
// (child_process, scratch_dir, posix_io). No zklock, no server.
//
// A test binary's main() hands `--zklock-chaos-child PARENT_PID ROLE ARGS...` to child_main()
// with its own roles; child_process (the parent side) starts one, with a pipe to its stdin whose
// end asks it to finish (stop_requested()).
#pragma once
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>
#include "child_process.hpp"
#include "posix_io.hpp"
#include "scratch_dir.hpp"

namespace chaos::harness {

using std::chrono::milliseconds;

constexpr std::string_view child_flag = "--zklock-chaos-child";

// ---- small system helpers --------------------------------------------------------------------

using zkt::from_hex;
using zkt::throw_errno;
using zkt::to_hex;

/// Returns: CLOCK_MONOTONIC in nanoseconds: one clock for every process of this machine.
inline std::int64_t mono_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Effects: sends all of `s` on the socket `fd` (no SIGPIPE if the peer is gone: an exception).
inline void send_all(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = ::send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {  // a non-blocking socket is full
      pollfd p{fd, POLLOUT, 0};
      (void)::poll(&p, 1, -1);
      continue;
    }
    if (n < 0) throw_errno("send");
    s.remove_prefix(static_cast<std::size_t>(n));
  }
}

/// Effects: writes `lines` to the file `path`, one per line.
inline void write_lines(const std::filesystem::path& path, const std::vector<std::string>& lines) {
  std::ofstream out{path};
  for (const auto& l : lines) out << l << '\n';
}

/// Returns: the complete lines of `file` (a line still being written is left out).
inline std::vector<std::string> read_lines(const std::string& file) {
  std::ifstream in{file, std::ios::binary};
  std::string all{std::istreambuf_iterator<char>{in}, std::istreambuf_iterator<char>{}};
  std::vector<std::string> out;
  std::size_t b = 0;
  for (std::size_t nl; (nl = all.find('\n', b)) != std::string::npos; b = nl + 1) out.push_back(all.substr(b, nl - b));
  return out;
}

inline sockaddr_un unix_address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof a.sun_path) throw std::invalid_argument("socket path too long: " + path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}

// ---- child side ------------------------------------------------------------------------------

/// The contender's event log: one write(2) per line on an O_APPEND file, from any thread.
class event_log {
 public:
  explicit event_log(const std::string& file) : fd_(::open(file.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw_errno("open " + file);
  }
  ~event_log() { ::close(fd_); }
  event_log(const event_log&) = delete;
  event_log& operator=(const event_log&) = delete;
  void line(const std::string& s) const noexcept {
    try {
      zkt::write_all(fd_, s + "\n");
    } catch (...) {  // a log line lost: the checker then sees a hold without its end (stricter)
    }
  }

 private:
  int fd_;
};

/// The contender's end of the fenced store.
class store_client {
 public:
  explicit store_client(const std::string& socket_path) : fd_(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) {
    if (fd_ < 0) throw_errno("socket");
    const auto a = unix_address(socket_path);
    if (::connect(fd_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      throw_errno("connect " + socket_path);
    }
  }
  ~store_client() { ::close(fd_); }
  store_client(const store_client&) = delete;
  store_client& operator=(const store_client&) = delete;

  /// Returns: whether the store accepted a write fenced by `token`.
  bool write(int who, std::int64_t token) {
    send_all(fd_, "W " + std::to_string(who) + " " + std::to_string(token) + "\n");
    char c = 0;
    for (;;) {
      const ssize_t n = ::recv(fd_, &c, 1, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw std::runtime_error("the fenced store hung up");
      if (c == '\n') break;
      reply_ = c;
    }
    return reply_ == 'A';
  }

 private:
  int fd_;
  char reply_ = 0;
};

inline bool stop_requested() {
  pollfd p{STDIN_FILENO, POLLIN, 0};
  return ::poll(&p, 1, 0) > 0;  // data or end of file: the parent asks us to finish
}

/// Logs LOST when a hold's lost_token() fires (on whatever thread fires it).
struct lost_logger {
  const event_log* log;
  int who;
  std::int64_t token;
  void operator()() const noexcept {
    log->line("LOST " + std::to_string(who) + " " + std::to_string(token) + " " + std::to_string(mono_ns()));
  }
};

/// The child's main(): `argv` is `<self> --zklock-chaos-child PARENT_PID ROLE ARGS...`, ROLE one
/// of `roles`. Dies with the parent (PR_SET_PDEATHSIG); an exception is reported on stderr (exit code 2).
inline int child_main(int argc, char** argv, const zkt::role_table& roles) {
  return zkt::child_main(argc, argv, "zklock chaos child", roles);
}

// ---- parent side -----------------------------------------------------------------------------

using zkt::describe;

/// One child process (this binary in a role) with a pipe to its stdin. The destructor kills
/// (SIGKILL) and reaps it if the test has not: no process is left behind.
class child_process : public zkt::child_process {
 public:
  explicit child_process(const std::vector<std::string>& role_args)
      : zkt::child_process(self(child_flag, role_args), stdin_pipe_only()) {}

  /// Effects: closes its stdin, which asks a contender to finish.
  void finish() noexcept { close_stdin(); }

  /// Effects: SIGCONT.
  void resume() { signal(SIGCONT); }

  /// Effects: SIGKILL and reap.
  void kill() {
    signal(SIGKILL);
    (void)wait(std::chrono::hours{24});
  }

 private:
  static zkt::spawn_options stdin_pipe_only() {
    zkt::spawn_options o;
    o.out = zkt::stream::inherit;
    return o;
  }
};

/// The fenced store, the single arbiter of writes: a thread serving a UNIX socket. A write
/// "W who token" is accepted iff token >= the highest token accepted so far; every decision is
/// logged ("ACCEPT|REJECT who token t") in decision order.
class fenced_store {
 public:
  explicit fenced_store(std::string socket_path) : path_(std::move(socket_path)) {
    listen_ = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (listen_ < 0) throw_errno("socket");
    const auto a = unix_address(path_);
    if (::bind(listen_, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_, 16) != 0) {
      ::close(listen_);
      throw_errno("bind/listen " + path_);
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0) {
      ::close(listen_);
      throw_errno("pipe2");
    }
    thread_ = std::thread([this] { run(); });
  }
  ~fenced_store() {
    stop();
    ::close(listen_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  fenced_store(const fenced_store&) = delete;
  fenced_store& operator=(const fenced_store&) = delete;

  const std::string& socket_path() const noexcept { return path_; }

  /// Effects: stops serving. Returns: the log, in decision order.
  std::vector<std::string> stop() {
    if (thread_.joinable()) {
      (void)!::write(wake_[1], "x", 1);
      thread_.join();
    }
    return lines_;
  }

 private:
  struct client {
    int fd;
    std::string buf;
  };
  void run() {
    std::vector<client> clients;
    for (;;) {
      std::vector<pollfd> p{{wake_[0], POLLIN, 0}, {listen_, POLLIN, 0}};
      for (const auto& c : clients) p.push_back({c.fd, POLLIN, 0});
      if (::poll(p.data(), p.size(), -1) < 0) {
        if (errno == EINTR) continue;
        break;
      }
      if (p[0].revents) break;
      std::vector<std::size_t> gone;
      for (std::size_t i = 0; i + 2 < p.size(); ++i) {  // the clients polled (not those accepted below)
        if (!p[i + 2].revents) continue;
        char chunk[256];
        const ssize_t n = ::recv(clients[i].fd, chunk, sizeof chunk, 0);
        if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) continue;
        if (n <= 0) {
          gone.push_back(i);  // the contender exited or was killed
          continue;
        }
        clients[i].buf.append(chunk, static_cast<std::size_t>(n));
        for (std::size_t nl; (nl = clients[i].buf.find('\n')) != std::string::npos;) {
          const std::string req = clients[i].buf.substr(0, nl);
          clients[i].buf.erase(0, nl + 1);
          if (!serve(clients[i].fd, req)) {
            gone.push_back(i);
            break;
          }
        }
      }
      std::sort(gone.begin(), gone.end());
      gone.erase(std::unique(gone.begin(), gone.end()), gone.end());
      for (auto it = gone.rbegin(); it != gone.rend(); ++it) {
        ::close(clients[*it].fd);
        clients.erase(clients.begin() + static_cast<std::ptrdiff_t>(*it));
      }
      if (p[1].revents & POLLIN)
        for (int fd; (fd = ::accept4(listen_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;)
          clients.push_back({fd, {}});
    }
    for (auto& c : clients) ::close(c.fd);
  }
  bool serve(int fd, const std::string& req) {
    int who = 0;
    long long token = 0;
    if (std::sscanf(req.c_str(), "W %d %lld", &who, &token) != 2) {
      lines_.push_back("BAD " + req);  // the checker reports it as malformed
      return false;
    }
    const bool accept = token >= highest_;
    if (accept) highest_ = token;
    lines_.push_back(std::string{accept ? "ACCEPT " : "REJECT "} + std::to_string(who) + " " + std::to_string(token) +
                     " " + std::to_string(mono_ns()));
    try {
      send_all(fd, accept ? "A\n" : "R\n");
    } catch (const std::system_error&) {  // killed meanwhile
      return false;
    }
    return true;
  }

  std::string path_;
  int listen_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::vector<std::string> lines_;  // only the thread touches it until stop() joined it
  long long highest_ = 0;
};

/// A fresh directory under the system temp dir, removed with its contents (unless kept).
struct temp_dir : zkt::scratch_dir {
  temp_dir() : scratch_dir("zklock-chaos") {}
};

}  // namespace chaos::harness
