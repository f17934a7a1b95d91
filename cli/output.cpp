// SPDX-License-Identifier: Apache-2.0
// How `zklock ls` writes values: UTC times, spans and counts for people, and JSON string literals.
#include <time.h>

#include <cstdio>
#include "json_escape.hpp"
#include "cli.hpp"

namespace zkcli {

std::string count_of(std::size_t n, const char* noun) {
  return std::to_string(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string iso_time(long long ms_since_epoch) {
  const long long secs = ms_since_epoch >= 0 ? ms_since_epoch / 1000 : (ms_since_epoch - 999) / 1000;
  const int millis = static_cast<int>(ms_since_epoch - secs * 1000);
  const ::time_t t = static_cast<::time_t>(secs);
  struct ::tm tm {};
  if (!::gmtime_r(&t, &tm)) return std::to_string(ms_since_epoch);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday,
                tm.tm_hour, tm.tm_min, tm.tm_sec, millis);
  return buf;
}

std::string json_string(std::string_view s) { return "\"" + zkjson::escape(s) + "\""; }

std::string span(long long ms_count) {
  char buf[48];
  if (ms_count < 0) ms_count = 0;
  if (ms_count < 1000) std::snprintf(buf, sizeof buf, "%lldms", ms_count);
  else if (ms_count < 60'000) std::snprintf(buf, sizeof buf, "%lld.%llds", ms_count / 1000, ms_count % 1000 / 100);
  else if (ms_count < 3'600'000) std::snprintf(buf, sizeof buf, "%lldm%02llds", ms_count / 60'000, ms_count % 60'000 / 1000);
  else std::snprintf(buf, sizeof buf, "%lldh%02lldm", ms_count / 3'600'000, ms_count % 3'600'000 / 60'000);
  return buf;
}

}  // namespace zkcli
