// SPDX-License-Identifier: Apache-2.0
// The values of zklock's options: durations (--timeout, --grace, ...), signals (--kill-signal),
// lease counts (--permits) and exit codes (-E). Each parser throws a usage error that names the
// option and the problem.
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include "cli.hpp"

namespace zkcli {

ms parse_duration(std::string_view option, std::string_view text, bool zero_ok) {
  auto bad = [&](const std::string& why) -> ms {
    usage_error("bad " + std::string{option} + " \"" + std::string{text} + "\": " + why);
  };
  std::size_t digits = 0;
  while (digits < text.size() && ((text[digits] >= '0' && text[digits] <= '9') || text[digits] == '.')) ++digits;
  const std::string number{text.substr(0, digits)};
  const std::string_view unit = text.substr(digits);
  // (".5" is half a second, as flock -w takes it)
  if (number.empty() || number == "." || number.back() == '.' || std::count(number.begin(), number.end(), '.') > 1)
    return bad("expected a number with a unit, like 500ms, 10s, 2m or 1h");
  double scale;
  if (unit == "ms") scale = 1;
  else if (unit.empty() || unit == "s") scale = 1000;
  else if (unit == "m" || unit == "min") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else return bad("unknown unit \"" + std::string{unit} + "\" (use ms, s, m or h)");
  const double value = std::strtod(number.c_str(), nullptr) * scale;
  if (!std::isfinite(value) || value > 1e12) return bad("too long");
  const ms d{static_cast<std::int64_t>(std::ceil(value))};
  if (d == ms::zero() && !zero_ok) return bad("must be more than 0");
  return d;
}

int parse_signal(std::string_view text) {
  std::string up;
  for (char c : text) up += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
  std::string_view name = up;
  if (name.starts_with("SIG")) name.remove_prefix(3);
  int number = 0;
  const auto [ptr, ec] = std::from_chars(name.data(), name.data() + name.size(), number);
  if (!name.empty() && ec == std::errc{} && ptr == name.data() + name.size()) {
    if (number >= 1 && number <= SIGRTMAX) return number;
  } else if (!name.empty()) {
    for (int s = 1; s < SIGRTMIN; ++s)
      if (const char* abbrev = ::sigabbrev_np(s); abbrev && name == abbrev) return s;
  }
  usage_error("bad --kill-signal \"" + std::string{text} + "\": expected a signal name like TERM or a number");
}

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string{"SIG"} + abbrev : "signal " + std::to_string(sig);
}

std::ptrdiff_t parse_permits(std::string_view v, const char* option) {
  std::ptrdiff_t n = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (v.empty() || ec != std::errc{} || ptr != v.data() + v.size() || n < 1 || n > 1'000'000)
    usage_error(std::string{"bad "} + option + " \"" + std::string{v} + "\": expected a whole number from 1 to 1000000");
  return n;
}

int parse_conflict_code(std::string_view v) {
  int n = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  const std::string bad = "bad --conflict-exit-code \"" + std::string{v} + "\": ";
  if (v.empty() || ec != std::errc{} || ptr != v.data() + v.size() || n < 0 || n > 255)
    usage_error(bad + "expected a number from 0 to 255");
  // The codes zklock gives another meaning: a script could not tell "taken" from them.
  const char* taken_by = nullptr;
  switch (n) {
    case exit_code::unavailable: taken_by = "cannot reach ZooKeeper"; break;
    case exit_code::software: taken_by = "another failure"; break;
    case exit_code::lost: taken_by = "the lock was lost"; break;
    case exit_code::no_permission: taken_by = "permission refused"; break;
    case exit_code::config: taken_by = "the chroot does not exist"; break;
    case exit_code::usage: taken_by = "usage error"; break;
    case exit_code::cannot_execute: taken_by = "CMD cannot be executed"; break;
    case exit_code::not_found: taken_by = "CMD not found"; break;
    default:
      if (n >= exit_code::signal_base) taken_by = "128+N: killed by signal N";
  }
  if (taken_by)
    usage_error(bad + "zklock exits " + std::string{v} + " for something else (" + taken_by +
                "); use 0 to 127 but 69, 70, 75, 77, 78, 125, 126 and 127");
  return n;
}

}  // namespace zkcli
