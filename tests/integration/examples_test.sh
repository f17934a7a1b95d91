#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs the examples other than the counter demo against $ZKLOCK_TEST_ZK and fails if any of them
# does: the README's API tour (example_tour); a writer and two readers of one cache file
# (example_rw_cache: a reader that sees entries of two versions exits 1); two processes of three
# workers on a 2-slot semaphore (example_worker_pool: more running jobs than slots exits 1);
# coroutines on one thread awaiting every lock type (example_async_coroutine) and the callback form
# (example_async_callback): each exits 1 on broken exclusion, a lost update, a token out of order,
# a completion run twice or never, or a deadline or stop token without its error; a configuration
# updated by two writers under a lock with guarded writes (example_guarded_config: exits 1 on a lost
# update or when a holder whose hold was broken still writes); and 200
# coroutines of Asio on one strand (example_async_asio, when Asio was found): exits 1 on a lock
# granted twice or never, two holders of the shared path, a resumption off the strand.
#   examples_test.sh EXAMPLES_DIR
set -euo pipefail
bin=$1
: "${ZKLOCK_TEST_ZK:?needs ZKLOCK_TEST_ZK}"
work=$(mktemp -d)
pids=()
# Whatever happens (a failed example, an interrupted test), no example process outlives the script.
trap 'for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT
# Waits for every pid in $pids; fails if any failed (after all have been waited for).
wait_all() {
  local rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  pids=()
  return $rc
}
export ZOOKEEPER_HOSTS=$ZKLOCK_TEST_ZK
id=$$

echo "== example_tour"
"$bin/example_tour"

echo "== example_rw_cache: one writer, two readers"
pids=()
"$bin/example_rw_cache" "$work/cache" writer 8 "/zklock-examples/cache-$id" & pids+=($!)
"$bin/example_rw_cache" "$work/cache" reader 8 "/zklock-examples/cache-$id" & pids+=($!)
"$bin/example_rw_cache" "$work/cache" reader 8 "/zklock-examples/cache-$id" & pids+=($!)
wait_all

echo "== example_worker_pool: two processes x 3 workers, 2 slots"
mkdir "$work/pool"
pids=()
"$bin/example_worker_pool" "$work/pool" 3 2 2 "/zklock-examples/pool-$id" & pids+=($!)
"$bin/example_worker_pool" "$work/pool" 3 2 2 "/zklock-examples/pool-$id" & pids+=($!)
wait_all
left=$(find "$work/pool" -type f | wc -l)
[[ $left -eq 0 ]] || { echo "worker_pool left $left job markers"; exit 1; }
echo "== example_guarded_config: guarded writes under a lock, a paused holder's write refused"
"$bin/example_guarded_config" 10 "/zklock-examples/config-$id"

echo "== example_async_coroutine: coroutines on one thread"
"$bin/example_async_coroutine"

echo "== example_async_callback: callbacks, no thread per waiter"
"$bin/example_async_callback" 50

if [[ -x $bin/example_async_asio ]]; then
  echo "== example_async_asio: 209 coroutines of Asio on one strand"
  "$bin/example_async_asio" 200
else
  echo "== example_async_asio: skipped (not built: configuring found no <asio.hpp>; install libasio-dev)"
fi

echo "== examples passed"
