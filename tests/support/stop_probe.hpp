// SPDX-License-Identifier: Apache-2.0
// Test support: waits for a std::stop_token to fire (a loss or revocation signal), without polling
// or sleeping, and tells when it fired.
#pragma once
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <utility>

namespace zkt {

/// Registers on a stop token at construction; wait() returns once it fired.
class stop_probe {
 public:
  explicit stop_probe(std::stop_token t) : cb_(std::move(t), set{this}) {}
  /// Returns: whether the token fired within `limit` (zero: whether it has); when, in *at.
  bool wait(std::chrono::milliseconds limit, std::chrono::steady_clock::time_point* at = nullptr) {
    std::unique_lock lk{mu_};
    const bool ok = cv_.wait_for(lk, limit, [&] { return done_; });
    if (ok && at) *at = at_;
    return ok;
  }

 private:
  struct set {
    stop_probe* p;
    void operator()() const noexcept {
      {
        std::lock_guard lk{p->mu_};
        p->done_ = true;
        p->at_ = std::chrono::steady_clock::now();
      }
      p->cv_.notify_all();
    }
  };
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::chrono::steady_clock::time_point at_{};
  std::stop_callback<set> cb_;  // last: may fire while constructed
};

}  // namespace zkt
