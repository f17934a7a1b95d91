// SPDX-License-Identifier: Apache-2.0
// Bench support: the pieces of JSON lines (escaped strings, numbers with fixed decimals).
#pragma once
#include <string>
#include <string_view>

namespace zkt {

/// Returns: `s` escaped for the inside of a JSON string (quote, backslash, control characters).
std::string json_escape(std::string_view s);

/// Returns: `v` with `decimals` decimals, or "null" if it is not finite (NaN: no measurement).
std::string json_number(double v, int decimals = 1);

}  // namespace zkt
