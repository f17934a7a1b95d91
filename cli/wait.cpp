// SPDX-License-Identifier: Apache-2.0
// `zklock wait PATH`: returns once PATH has no contenders of any kind (a missing path is free),
// watching its children instead of polling, and looking again on a new session if the old one ends
// (zklock::wait_until_free does both).
#include "cli.hpp"

namespace zkcli {

int run_wait(const options& o) {
  auto s = open_session(o);
  const auto deadline = o.timeout ? steady::now() + *o.timeout : steady::time_point::max();
  // --verbose: the session's end and its successor, as wait_until_free rides through them. The
  // expiry is told by a state listener (on the session's thread), the new session by the next look.
  std::uint64_t listener = 0;
  if (g_verbose) {
    listener = s->add_state_listener([](zklock::session_state st) {
      if (st == zklock::session_state::expired) say("%s", "session expired: waiting for the next one");
    });
  }
  struct unlisten {
    zklock::session& s;
    std::uint64_t id;
    ~unlisten() {
      if (id) s.remove_state_listener(id);
    }
  } guard{*s, listener};
  std::uint64_t generation = s->generation();
  const bool free = zklock::wait_until_free(*s, o.path, {deadline}, [&](std::size_t n) {
    if (!g_verbose) return;
    if (s->generation() != generation) {
      generation = s->generation();
      say("on a new session (0x%llx)", static_cast<unsigned long long>(s->id()));
    }
    say("%s has %zu contender(s): waiting", o.path.c_str(), n);
  });
  if (free) {
    if (g_verbose) say("%s is free", o.path.c_str());
    return exit_code::ok;
  }
  say("timed out: %s is still taken", o.path.c_str());
  return o.conflict_code;
}

}  // namespace zkcli
