// SPDX-License-Identifier: Apache-2.0
// JSON string escaping (header-only): one copy for the zklock tool's `ls --json` and for the
// benchmarks' and tests' JSON lines (tests/support links it from here).
#pragma once
#include <cstdio>
#include <string>
#include <string_view>

namespace zkjson {

/// Returns: `s` escaped for the inside of a JSON string: quotes, backslashes and control
/// characters (as \n, \t or \u00XX); other bytes as they are.
inline std::string escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
          out += b;
        } else {
          out += c;
        }
    }
  }
  return out;
}

}  // namespace zkjson
