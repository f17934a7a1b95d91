// SPDX-License-Identifier: Apache-2.0
// Test support: a fresh directory under the system temp dir, removed with its contents.
#pragma once
#include <filesystem>
#include <string_view>

namespace zkt {

/// A fresh directory (mkdtemp) removed with its contents by the destructor, unless `keep` is set.
struct scratch_dir {
  std::filesystem::path path;
  bool keep = false;  ///< leave it for a post-mortem (a failed test's logs)
  /// Effects: creates <temp dir>/`stem`-XXXXXX. Throws: std::system_error.
  explicit scratch_dir(std::string_view stem = "zklock-test");
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
};

}  // namespace zkt
