// SPDX-License-Identifier: Apache-2.0
// Compiled once per probe by the firewall tests (tests/CMakeLists.txt). After `import zklock;` the
// ZooKeeper C API, range-v3 and zklock's internals are not visible: with PROBE_zoo_create,
// PROBE_ZOK or PROBE_ranges it must fail ("undeclared identifier"), with a PROBE_ naming an
// internal of zklock (one or two from each implementation partition and from zklock.detail) it must
// fail ("no member named 'X'", or clang's "declaration of 'X' must be imported from module ...":
// reachable for the lock templates, but not visible), with PROBE_control it must compile.
import zklock;

int main() {
#if defined(PROBE_zoo_create)
  return zoo_create == nullptr;
#elif defined(PROBE_ZOK)
  return ZOK;
#elif defined(PROBE_ranges)
  return ranges::views::iota(0, 3).size() > 0;
#elif defined(PROBE_list_children)  // zklock:operations, a ZooKeeper operation of the algorithm
  return &zklock::detail::list_children == nullptr;
#elif defined(PROBE_hold_guard)  // zklock:operations, the loss signal of a hold
  return sizeof(zklock::detail::hold_guard) == 0;
#elif defined(PROBE_acquire_counters)  // zklock:algorithm, what one acquire attempt did
  return sizeof(zklock::detail::acquire_counters) == 0;
#elif defined(PROBE_lock_side)  // zklock:holds, the private member of basic_mutex
  return sizeof(zklock::detail::lock_side<zklock::default_policies>) == 0;
#elif defined(PROBE_session_impl)  // zklock:session, the state behind a session
  using impl = zklock::detail::session_impl;
  return sizeof(impl*) == 0;
#elif defined(PROBE_stand)  // zklock.detail:rules, the mode rules
  return zklock::detail::stand(zklock::detail::exclusive_rule{}, {}, 0).held();
#elif defined(PROBE_sorted_contenders)  // zklock.detail:queue, the queue order
  return &zklock::detail::sorted_contenders == nullptr;
#elif defined(PROBE_validate_path)  // zklock.detail, checks of user input
  return &zklock::detail::validate_path == nullptr;
#elif defined(PROBE_async_runner)  // zklock:step, the threads of asynchronous acquires
  return sizeof(zklock::detail::async_runner*) == 0;
#elif defined(PROBE_async_side)  // zklock:async, the private member of the lock types
  return sizeof(zklock::detail::async_side<zklock::default_policies>) == 0;
#elif defined(PROBE_throw_error)  // zklock:errors, the helper every throw site uses
  zklock::detail::throw_error(zklock::errc::not_held, "x");
#elif defined(PROBE_watch_kind)  // gone: tests compare the strategy types instead
  return zklock::watch_kind{} == zklock::watch_kind{};
#elif defined(PROBE_kind)  // gone from the watch strategies
  return zklock::watch_predecessor::kind == zklock::watch_children::kind;
#elif defined(PROBE_parse_identity)  // zklock.detail, contenders() reports it as contender_info::who
  return zklock::parse_identity("").host.empty();
#elif defined(PROBE_impl)  // zklock:session, the implementation behind a session
  zklock::session* s = nullptr;
  return &s->impl() == nullptr;
#elif defined(PROBE_node_deleted)  // zklock:wakeup, the watch registry's business
  zklock::wake_target* t = nullptr;
  return t->node_deleted.load();
#else
  // Control: the documented API, including the lock templates that use those internals.
  zklock::mutex* m = nullptr;
  zklock::shared_mutex* rw = nullptr;
  zklock::counting_semaphore* sem = nullptr;
  zklock::lock_hold hold;  // the asynchronous acquires' result
  return hold.owns_lock() + (m == nullptr) + (rw == nullptr) + (sem == nullptr) +
         (zklock::session_state::connected == zklock::session_state::closed);
#endif
}
