// SPDX-License-Identifier: Apache-2.0
// Test and bench support: what a session's fiber stacks hold resident, read from /proc/self/smaps
// (zklock's async runner maps each fiber's stack as a 4 KB inaccessible guard page right below a
// 256 KB read-write stack; the library offers no count of its own).
#pragma once
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <string_view>

namespace zkt {

/// The fibers' stacks in this process: how many, how many of them have pages resident, and how
/// many bytes in all.
struct fiber_stacks {
  int count = 0;
  int touched = 0;
  std::int64_t resident = 0;  // bytes
};

/// Returns: every private anonymous read-write mapping of 256 KB that starts where a 4 KB
/// inaccessible one ends (as a fiber's stack does), counted, with its resident bytes summed.
inline fiber_stacks fiber_stacks_now() {
  std::ifstream f{"/proc/self/smaps"};
  fiber_stacks out;
  std::string line;
  unsigned long prev_lo = 0, prev_hi = 0;
  bool prev_guard = false, in_stack = false;
  while (std::getline(f, line)) {
    unsigned long lo = 0, hi = 0, offset = 0, inode = 0;
    char perms[5] = {};
    unsigned major = 0, minor = 0;
    int used = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx %4s %lx %x:%x %lu%n", &lo, &hi, perms, &offset, &major, &minor, &inode,
                    &used) == 7) {
      const std::string_view p{perms};
      const bool anonymous =
          inode == 0 && line.find_first_not_of(' ', static_cast<std::size_t>(used)) == std::string::npos;
      in_stack = anonymous && p == "rw-p" && hi - lo == 256 * 1024 && prev_guard && prev_hi == lo &&
                 prev_hi - prev_lo == 4096;
      if (in_stack) ++out.count;
      prev_guard = anonymous && p == "---p";
      prev_lo = lo;
      prev_hi = hi;
      continue;
    }
    long long kb = 0;
    if (in_stack && std::sscanf(line.c_str(), "Rss: %lld kB", &kb) == 1 && kb > 0) {
      ++out.touched;
      out.resident += kb * 1024;
    }
  }
  return out;
}

}  // namespace zkt
