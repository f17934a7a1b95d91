// SPDX-License-Identifier: Apache-2.0
// `zklock lock PATH`: takes the lock as exec does, prints "ZKLOCK_FENCING_TOKEN=<n>" once it holds,
// and holds until SIGHUP, SIGINT, SIGQUIT or SIGTERM, or until its standard input ends; then
// releases and exits 0. A lost lock is told and ends it with 75. For scripts that hold one lock
// across several commands: `coproc zklock lock /x; read -r -u "${COPROC[0]}" token; ...`.
//
// Standard input counts only where its end means the other side is gone: a pipe, a socket, or the
// terminal zklock runs in the foreground of (Ctrl-D). A file or /dev/null (a script's background
// job gets it) would end at once: then only a signal releases.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include "cli.hpp"

namespace zkcli {
namespace {

/// Returns: 0 (stdin) if its end should release the lock (see the file comment), else -1.
int watched_input() {
  struct ::stat st {};
  if (::fstat(0, &st) != 0) return -1;  // closed
  if (S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode)) return 0;
  if (::isatty(0) && ::tcgetpgrp(0) == ::getpgrp()) return 0;  // (in the background, a read stops us)
  return -1;
}

}  // namespace

int run_lock(const options& o) {
  // A reader that went away must not kill zklock while it holds (its session would then keep the
  // lock until it times out): a failed write of the token is reported instead.
  ::signal(SIGPIPE, SIG_IGN);
  fd_t sigfd = block_signals();  // before the session starts its threads
  const int input = watched_input();
  auto r = acquire_lock(o, sigfd.get(), input);
  if (!r.held) return r.exit;
  held_lock& h = *r.held;
  if (h.lost.stop_requested()) {  // e.g. the session ended with the grant
    say("lost the lock on %s as it was granted", o.path.c_str());
    h.release();
    return exit_code::lost;
  }

  // The loss signal, as a readable pipe for poll().
  int lp[2];
  if (::pipe2(lp, O_CLOEXEC | O_NONBLOCK) != 0) throw std::system_error(errno, std::generic_category(), "pipe2");
  const fd_t lost_r{lp[0]}, lost_w{lp[1]};
  const int lost_w_fd = lost_w.get();
  std::stop_callback on_lost{h.lost, [lost_w_fd] {
                               const char c = 1;
                               [[maybe_unused]] auto n = ::write(lost_w_fd, &c, 1);
                             }};

  if (std::printf("ZKLOCK_FENCING_TOKEN=%lld\n", static_cast<long long>(h.token)) < 0 || std::fflush(stdout) != 0) {
    const int e = errno;
    h.release();
    say("cannot write the fencing token on standard output (%s): released %s", std::strerror(e), o.path.c_str());
    return exit_code::software;
  }

  for (;;) {
    pollfd p[3] = {{sigfd.get(), POLLIN, 0}, {lost_r.get(), POLLIN, 0}, {input, POLLIN, 0}};
    if (::poll(p, 3, -1) < 0) {
      if (errno == EINTR) continue;
      throw std::system_error(errno, std::generic_category(), "poll");
    }
    if (p[1].revents) {
      say("lost the lock on %s (its session ended, or its node was deleted)", o.path.c_str());
      h.release();
      return exit_code::lost;
    }
    if (p[0].revents) {
      while (const auto sig = pending_signal(sigfd.get())) {
        if (*sig != SIGHUP && *sig != SIGINT && *sig != SIGQUIT && *sig != SIGTERM) continue;  // CHLD, CONT, USR1, USR2
        h.release();
        if (g_verbose) say("%s: released %s", signal_name(*sig).c_str(), o.path.c_str());
        return exit_code::ok;
      }
    }
    if (p[2].revents && input_at_end(input)) {
      h.release();
      if (g_verbose) say("standard input ended: released %s", o.path.c_str());
      return exit_code::ok;
    }
  }
}

}  // namespace zkcli
