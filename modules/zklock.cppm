// SPDX-License-Identifier: Apache-2.0
// zklock — distributed locks on Apache ZooKeeper. `import zklock;` is all a user writes.
export module zklock;

export import :errors;      // zklock::errc, the "zklock" error category
export import :session;     // zklock::session: one ZooKeeper session, its state and listeners
export import :watch;       // policy: watch the predecessor, or the lock node's children
export import :wakeup;      // policy: condition variable, or a one-shot latch per wait
export import :reentrancy;  // policy: none, per thread, counted owner
export import :timeout;     // policy: how long a blocking lock() waits
export import :hooks;       // policy: observability (wait, hold, queue position, wake-ups, requests)
export import :engine;      // basic_mutex, basic_shared_mutex, basic_counting_semaphore: one algorithm
export import :aliases;     // mutex, recursive_mutex, owner_mutex, shared_mutex, counting_semaphore
export import :inspect;     // contenders(): who holds a lock node and who waits (what `zklock ls` prints)

// Implementation vocabulary, reachable by the templates above but not meant for users.
export import :detail;
export import :rules;
