#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/peer_runner speaks the peer benchmark contract (../shared/peers/README.md, "Runner contract").

  peer_runner_contract.py PEER_RUNNER_BINARY       (server address in ZKLOCK_TEST_ZK)

A tiny run (scenarios a, b, c, f, k; o is asked for but there is no proxy, so it must be skipped):
exit status 0; every stdout line one JSON object with lib, lib_version, scenario and the tag; every
scenario present for both watch strategies with the fields summarize.py reads; no errors, no
mutual-exclusion violations, no leftover nodes. Also: an unknown flag exits with status 2.
"""
import json
import os
import subprocess
import sys

LIBS = ("zklock", "zklock-children")
FIELDS = {
    "env": ["server", "loadavg", "session_timeout_ms"],
    "a_uncontended": ["n", "p50_us", "p99_us", "mean_us", "ops_s", "acquire_p50_us", "release_p50_us",
                      "mntr_requests_per_cycle", "leftover_nodes", "cpu_us_per_acq", "cpu_window_ms"],
    "b_reentrant": ["supported", "p50_us", "reacquire_p50_us", "leftover_nodes"],
    "c_contended_T2": ["handoffs_s", "wait_p50_us", "wait_p99_us", "per_thread_min", "per_thread_max", "violations",
                       "max_holders", "stalls", "leftover_nodes", "cpu_us_per_acq", "cpu_window_ms"],
    "k_contended_hold5_T8": ["handoffs_s", "gap_p50_us", "gap_p99_us", "gap_mean_us", "per_thread_min",
                             "per_thread_max", "violations", "stalls", "leftover_nodes", "cpu_window_ms"],
    "f_failed_try": ["try0_p50_us", "try0_p99_us", "server_requests_per_try0", "timed_overshoot_mean_ms",
                     "orphan_nodes_after_release", "server_watches_added_while_held",
                     "server_watches_left_after_release"],
}
MUST_BE_ZERO = ["violations", "stalls", "leftover_nodes", "orphan_nodes_after_release"]


def main():
    runner = sys.argv[1]
    zk = os.environ.get("ZKLOCK_TEST_ZK")
    if not zk:
        print("ZKLOCK_TEST_ZK is not set (run through ctest / tools/zk env)")
        return 1
    problems = []

    bad = subprocess.run([runner, "--zk", zk, "--no-such-flag", "1"], capture_output=True, text=True, timeout=30)
    if bad.returncode != 2 or bad.stdout:
        problems.append("unknown flag: exit %d, stdout %r (want 2, nothing)" % (bad.returncode, bad.stdout[:200]))

    args = [runner, "--zk", zk, "--n", "20", "--warm", "5", "--dur", "1", "--threads", "2", "--herd", "5",
            "--scen", "a,b,c,f,k,o", "--tag", "smoke"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=100)
    if p.returncode != 0:
        problems.append("exit status %d" % p.returncode)
    seen = {}
    for n, line in enumerate(p.stdout.splitlines(), 1):
        try:
            o = json.loads(line)
        except ValueError:
            problems.append("stdout line %d is not JSON: %r" % (n, line[:200]))
            continue
        if not isinstance(o, dict):
            problems.append("stdout line %d is not an object" % n)
            continue
        for k in ("lib", "lib_version", "scenario"):
            if k not in o:
                problems.append("line %d has no %s" % (n, k))
        if o.get("tag") != "smoke":
            problems.append("line %d: tag %r" % (n, o.get("tag")))
        if o.get("lib") not in LIBS:
            problems.append("line %d: lib %r" % (n, o.get("lib")))
        if o.get("errors"):
            problems.append("line %d: %s %s failed: %s" % (n, o.get("lib"), o.get("scenario"), o.get("error")))
        seen[(o.get("lib"), o.get("scenario"))] = o
    for lib in LIBS:
        for scen, fields in FIELDS.items():
            o = seen.get((lib, scen))
            if o is None:
                problems.append("%s: no %s line" % (lib, scen))
                continue
            missing = [f for f in fields if f not in o]
            if missing:
                problems.append("%s %s: missing %s" % (lib, scen, ", ".join(missing)))
            for f in MUST_BE_ZERO:
                if o.get(f, 0) != 0:
                    problems.append("%s %s: %s = %r" % (lib, scen, f, o.get(f)))
    extra = [k for k in seen if k[1] not in FIELDS]
    if extra:
        problems.append("unexpected lines (o without a proxy must be skipped): %r" % extra)
    if problems:
        print("peer_runner does not keep the contract:")
        for x in problems:
            print("  " + x)
        print("--- stderr ---\n" + p.stderr[-3000:])
        return 1
    print("peer_runner contract: OK, %d lines, %d libs" % (len(seen), len(LIBS)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
