// SPDX-License-Identifier: Apache-2.0
// `zklock rm PATH`: removes an idle lock or semaphore path (zklock::remove_lock): nobody holds it or
// waits on it. A busy one is refused, naming its holders (exit 124, as a lock taken under -n).
#include "cli.hpp"

namespace zkcli {

int run_rm(const options& o) {
  auto s = open_session(o);
  std::optional<zklock::lock_listing> removed;
  try {
    removed = zklock::remove_lock(*s, o.path);
  } catch (const std::system_error& e) {
    if (e.code() != zklock::errc::not_empty) throw;
    const std::string suffix = ": " + e.code().message();
    std::string what = e.what();
    if (what.ends_with(suffix)) what.resize(what.size() - suffix.size());
    say("%s", what.substr(what.starts_with("zklock: ") ? 8 : 0).c_str());
    return exit_code::timeout;
  }
  if (!removed) {
    say("%s does not exist: nothing to remove", o.path.c_str());
    return exit_code::no_input;
  }
  if (removed->leases)
    std::printf("removed semaphore %s (N = %zu)\n", o.path.c_str(), *removed->leases);
  else
    std::printf("removed lock %s\n", o.path.c_str());
  std::fflush(stdout);
  return exit_code::ok;
}

}  // namespace zkcli
