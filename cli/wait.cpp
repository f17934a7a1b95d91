// SPDX-License-Identifier: Apache-2.0
// `zklock wait PATH`: returns once PATH has no contenders of any kind (a missing path is free),
// watching its children instead of polling, and looking again on a new session if the old one ends.
#include "cli.hpp"

namespace zkcli {

int run_wait(const options& o) {
  auto s = open_session(o);
  const auto deadline = o.timeout ? steady::now() + *o.timeout : steady::time_point::max();
  // One look: free (true), not free by the deadline (false). The watch also fires when the session
  // ends; the next look then throws session_expired, and on_live_session looks again on the next
  // session (the session's end may have taken contenders along).
  auto look = [&] {
    return bridge::wait_until_free(*s, o.path, deadline, [&](std::size_t n) {
      if (g_verbose) say("%s has %zu contender(s): waiting", o.path.c_str(), n);
    });
  };
  if (on_live_session(*s, deadline, look)) {
    if (g_verbose) say("%s is free", o.path.c_str());
    return exit_code::ok;
  }
  say("timed out: %s is still taken", o.path.c_str());
  return exit_code::timeout;
}

}  // namespace zkcli
