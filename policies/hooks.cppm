// SPDX-License-Identifier: Apache-2.0
// zklock:hooks — what a lock reports about itself (observability), at no cost when unused.
//
//   no_hooks        The default: nothing is measured (every measurement is compiled out).
//   Your own hooks  A copyable type with `static constexpr bool enabled = true;` and two noexcept
//                   member (or static) functions, on_acquire(const acquire_stats&) and
//                   on_release(const release_stats&), called on the acquiring / releasing thread
//                   after each acquire attempt and each final release, from any thread that uses
//                   the lock (make them thread-safe, and keep them short: they run with no lock of
//                   ours held). A lock object gets its hooks instance as its constructor's last
//                   argument, as a container gets its allocator (default: a value-initialised one);
//                   it keeps one copy, shared with the lock_holds it grants. So a hooks type may
//                   carry a pointer to your metrics registry: no global is needed.
//   Example:        struct prom_hooks {
//                     static constexpr bool enabled = true;
//                     metrics* m;
//                     void on_acquire(const zklock::acquire_stats& s) noexcept { m->wait.observe(s.wait); }
//                     void on_release(const zklock::release_stats& s) noexcept { m->held.observe(s.held); } };
//                   struct observed : zklock::default_policies { using hooks = prom_hooks; };
//                   zklock::basic_mutex<observed> m{session, "/locks/x", prom_hooks{&registry}};
// Plug it in as the bundle's `hooks` (zklock:policies). The lock types call the hooks through one
// helper that compiles every measurement out when `enabled` is false.
module;
#include <chrono>
#include <concepts>
#include <cstddef>
#include <string_view>
#include <type_traits>
export module zklock:hooks;

export namespace zklock {

/// One acquire attempt (re-entries are not reported: they cost nothing).
struct acquire_stats {
  std::string_view path;                      ///< the lock node
  std::chrono::steady_clock::duration wait{};  ///< from the call to the grant (or the give-up)
  std::size_t queue_position = 0;             ///< contenders ahead of us at the first listing
  std::size_t wakeups = 0;                    ///< watch firings that made us re-evaluate
  std::size_t requests = 0;                   ///< ZooKeeper requests the attempt sent
  bool acquired = false;                      ///< false: timed out (nothing left behind)
  std::size_t requeues = 0;                   ///< times it queued again because its session ended
                                              ///< while it waited (an election, a member pause, ...)
};

/// One final release of a hold.
struct release_stats {
  std::string_view path;                      ///< the lock node
  std::chrono::steady_clock::duration held{};  ///< from the grant to the release
};

/// Observability hooks: a copyable type with a static `enabled` (false compiles every measurement
/// out) and noexcept on_acquire(const acquire_stats&) and on_release(const release_stats&), member
/// or static functions.
template <class H>
concept Hooks = std::copy_constructible<H> && requires(H& h, const acquire_stats& a, const release_stats& r) {
  { H::enabled } -> std::convertible_to<bool>;
  { h.on_acquire(a) } noexcept;
  { h.on_release(r) } noexcept;
};

/// No observability, no cost (the default).
struct no_hooks {
  /// Off: locks measure nothing and never call the functions below.
  static constexpr bool enabled = false;
  /// Effects: none.
  static void on_acquire(const acquire_stats&) noexcept {}
  /// Effects: none.
  static void on_release(const release_stats&) noexcept {}
};

}  // namespace zklock
