// SPDX-License-Identifier: Apache-2.0
// Compiled once per probe by the refusal tests (tests/CMakeLists.txt): each PROBE_ must fail to
// compile with its own message; PROBE_control, the same uses done right, must compile.
#include <chrono>
#include <stop_token>
import zklock;

namespace {

[[maybe_unused]] void use(zklock::session& s) {
  using namespace std::chrono_literals;
#if defined(PROBE_semaphore_reentrancy)  // a semaphore's leases are the object's: no reentrancy model
  zklock::basic_counting_semaphore<zklock::recursive_policies> sem{s, "/x", 2};
#elif defined(PROBE_policies_with_no_axis)  // int models no axis
  zklock::basic_mutex<zklock::policies_with<zklock::wake_latch, int>> m{s, "/x"};
#elif defined(PROBE_policies_with_twice)  // two models of one axis
  zklock::basic_mutex<zklock::policies_with<zklock::watch_children, zklock::watch_predecessor>> m{s, "/x"};
#elif defined(PROBE_nodiscard)  // each try_* discarded: 16 diagnostics
  zklock::mutex m{s, "/x"};
  zklock::shared_mutex rw{s, "/y"};
  zklock::counting_semaphore sem{s, "/z", 2};
  const auto at = std::chrono::steady_clock::now();
  const zklock::wait_context wc{};
  m.try_lock();
  m.try_lock_for(1ms);
  m.try_lock_until(at);
  m.try_lock(wc);
  rw.try_lock();
  rw.try_lock_for(1ms);
  rw.try_lock_until(at);
  rw.try_lock(wc);
  rw.try_lock_shared();
  rw.try_lock_shared_for(1ms);
  rw.try_lock_shared_until(at);
  rw.try_lock_shared(wc);
  sem.try_acquire();
  sem.try_acquire_for(1ms);
  sem.try_acquire_until(at);
  sem.try_acquire(wc);
#else  // control: the same types used as they may be
  zklock::basic_counting_semaphore<zklock::policies_with<zklock::watch_children>> sem{s, "/x", 2};
  zklock::basic_mutex<zklock::policies_with<zklock::wake_latch, zklock::watch_children>> m{s, "/y"};
  zklock::basic_mutex<zklock::recursive_policies> rm{s, "/z"};
  (void)m.try_lock();
  (void)sem.try_acquire_for(1ms);
  (void)rm.try_lock_until(std::chrono::steady_clock::now());
#endif
}

}  // namespace

int main() { return 0; }
