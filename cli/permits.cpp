// SPDX-License-Identifier: Apache-2.0
// `zklock permits PATH [N]`: prints a semaphore's lease count N with the permits used and free, or
// stores a new N (counting_semaphore::set_max: a versioned write; waiters see it at once).
#include "cli.hpp"

namespace zkcli {

int run_permits(const options& o) {
  auto s = open_session(o);
  const auto listing = zklock::inspect_lock(*s, o.path);
  if (listing && !listing->leases) {
    say("%s is not a semaphore: it stores no lease count (a lock's path, or another node)", o.path.c_str());
    return exit_code::usage;
  }
  if (!o.new_max) {
    if (!listing) {
      say("%s does not exist (a semaphore nobody used lately is removed; its next acquire makes it again)",
          o.path.c_str());
      return exit_code::no_input;
    }
    // The stored N, and the permits its holders take (the head of the queue that fits in N).
    zklock::counting_semaphore sem{*s, o.path, static_cast<std::ptrdiff_t>(*listing->leases)};
    const auto n = sem.max(), used = sem.used();
    std::printf("%s: N = %td (%td used, %td free)\n", o.path.c_str(), n, used, n - used);
    std::fflush(stdout);
    return exit_code::ok;
  }
  const std::ptrdiff_t open_with = listing ? static_cast<std::ptrdiff_t>(*listing->leases) : *o.new_max;
  zklock::counting_semaphore sem{*s, o.path, open_with};
  const auto before = sem.set_max(*o.new_max);
  if (listing)
    std::printf("%s: N = %td -> %td\n", o.path.c_str(), before, *o.new_max);
  else
    std::printf("%s: made with N = %td\n", o.path.c_str(), *o.new_max);
  std::fflush(stdout);
  return exit_code::ok;
}

}  // namespace zkcli
