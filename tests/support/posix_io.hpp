// SPDX-License-Identifier: Apache-2.0
// Test and bench support: small POSIX helpers (errno as exceptions, whole writes, files, polling,
// lines from a descriptor, hex) shared by the tests that run processes and sockets.
#pragma once
#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace zkt {

/// Throws: std::system_error of errno (generic category) with `what`.
[[noreturn]] void throw_errno(const std::string& what);

/// Effects: writes all of `s` to the descriptor `fd` (retrying on EINTR). Throws: std::system_error.
void write_all(int fd, std::string_view s);

/// Returns: the whole content of the file `p` ("" if it cannot be read).
std::string read_file(const std::filesystem::path& p);

/// Returns: whether `fd` became readable (data, end of file or hang-up) before `limit`.
/// Throws: std::system_error if poll fails.
bool wait_readable(int fd, std::chrono::steady_clock::time_point limit);

/// Reads newline-terminated lines from a descriptor it does not own.
class line_reader {
 public:
  explicit line_reader(int fd = -1) : fd_(fd) {}
  /// Effects: reads from `fd` from now on, forgetting what was buffered.
  void reset(int fd) {
    fd_ = fd;
    buf_.clear();
  }
  /// Returns: the next line (without its newline), or nullopt on end of file, error, or after `timeout`.
  std::optional<std::string> next(std::chrono::milliseconds timeout);

 private:
  int fd_;
  std::string buf_;
};

/// Returns: `bytes` as lower-case hex digits, two a byte.
std::string to_hex(std::string_view bytes);

/// Returns: the bytes that `hex` (from to_hex) spells. Throws: std::invalid_argument on a bad digit
/// or an odd length.
std::string from_hex(std::string_view hex);

}  // namespace zkt
