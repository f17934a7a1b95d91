// SPDX-License-Identifier: Apache-2.0
// Test support: error expectations (a call throws std::system_error with one zklock code; the
// code and the message a call throws).
#pragma once
#include <chrono>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <gtest/gtest.h>
import zklock;

namespace zkt {

/// Effects: runs `f`; a test failure (described with `what`) unless it throws std::system_error
/// with the code `want`.
template <class F>
void expect_error(F&& f, zklock::errc want, std::string_view what) {
  try {
    f();
    ADD_FAILURE() << what << ": no exception, expected " << zklock::make_error_code(want).message();
  } catch (const std::system_error& e) {
    EXPECT_EQ(e.code(), zklock::make_error_code(want)) << what << ": " << e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << ": unexpected exception " << e.what();
  }
}

/// Effects: opens a session with `o` (whose connect_timeout is set to 60 s); a test failure unless
/// the constructor throws std::system_error with the code `want` within 30 s (refused at once, not
/// at its connect_timeout), with `says` in its message (if not empty) and never `secret` (if not
/// empty). `what` describes the case.
template <class Options>
void expect_refused_at_once(Options o, zklock::errc want, std::string_view what, std::string_view says = {},
                            std::string_view secret = {}) {
  o.connect_timeout = std::chrono::seconds{60};
  const auto t0 = std::chrono::steady_clock::now();
  try {
    zklock::session s{o};
    ADD_FAILURE() << what << ": no exception, expected " << zklock::make_error_code(want).message();
  } catch (const std::system_error& e) {
    const std::string_view text = e.what();
    EXPECT_EQ(e.code(), zklock::make_error_code(want)) << what << ": " << text;
    if (!says.empty()) EXPECT_NE(text.find(says), std::string_view::npos) << what << ": " << text;
    if (!secret.empty()) EXPECT_EQ(text.find(secret), std::string_view::npos) << what << ": the message repeats a secret";
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds{30}) << what << ": not refused at once";
}

/// Returns: the code of the std::system_error `f` throws (a default code if it throws none).
template <class F>
std::error_code code_of(F&& f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.code();
  }
  return {};
}

/// Returns: the message of the std::system_error `f` throws (empty if it throws none).
template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const std::system_error& e) {
    return e.what();
  }
  return {};
}

}  // namespace zkt
