// SPDX-License-Identifier: Apache-2.0
// Test support: error expectations (a call throws std::system_error with one zklock code; the
// code and the message a call throws).
#pragma once
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
