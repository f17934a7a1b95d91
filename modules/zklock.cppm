// SPDX-License-Identifier: Apache-2.0
// zklock — distributed locks on Apache ZooKeeper. `import zklock;` is all a user writes.
export module zklock;

export import :errors;        // zklock::errc, the "zklock" error category
export import :session;       // zklock::session: one ZooKeeper session, its state, its listeners, its data API
export import :data;          // node_stat, op, fence: the values of the data API and of guarded writes
export import :watch;         // policy: watch the predecessor, or the lock node's children
export import :wakeup;        // policy: condition variable, or a one-shot latch per wait
export import :reentrancy;    // policy: none, per thread, counted owner
export import :timeout;       // policy: how long a blocking lock() waits
export import :hooks;         // policy: observability (wait, hold, queue position, wake-ups, requests)
export import :policies;      // default_policies, policies_with, LockPolicies: one bundle of five axes
export import :async;         // waiting without a thread: lock_hold, executor, co_await-able acquires
export import :mutex;         // basic_mutex<Policies>: a fair TimedLockable mutex
export import :shared_mutex;  // basic_shared_mutex<Policies>: a fair read/write lock
export import :semaphore;     // basic_counting_semaphore<Policies>: a fair counting semaphore
export import :aliases;       // mutex, recursive_mutex, owner_mutex, shared_mutex, counting_semaphore
export import :inspect;       // contenders(), locks_below(): who holds a lock and who waits (what `zklock ls` prints)
export import :revoke;        // revoke(), on_revoke: ask a holder to let go, then force it
export import :live_session;  // on_live_session(): do a piece of work again on the next session

// Implementation, reachable by the lock templates wherever they are instantiated but not visible
// to importers: these partitions declare nothing under `export` (every interface partition must
// be exported by this unit, so they are listed here).
export import :algorithm;     // the one algorithm (essay on top): queue, wait, grant on deletion
export import :holds;         // the holds a lock object keeps: loss token, still owned, release, hooks
export import :step;          // the algorithm's coroutine type; the runner that resumes async acquires
export import :operations;    // the ZooKeeper operations the algorithm needs, watch slots, hold guard
// The pure logic (path and connect-string checks, contender names and order, the mode rules, ACL
// judgement): the internal module zklock.detail, imported here but not re-exported (installed
// because zklock imports it; users never import it); the unit tests import it.
import zklock.detail;
