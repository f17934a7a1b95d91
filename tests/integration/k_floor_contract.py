#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/k_floor (the floor of scenarios a, c, k, d and e, run beside the peers by tools/bench-peers) keeps
the runner contract.

  k_floor_contract.py K_FLOOR_BINARY       (server address in ZKLOCK_TEST_ZK)

A short run of scenarios a, c (T=2), k, d and e: exit status 0; every stdout line one JSON object with lib
k-floor, lib_version, scenario and the tag; an env line and one line per scenario with the fields
summarize.py and bench/ratios.py read (cpu_window_ms included); some acquisitions; no mutual-exclusion
violation; no node left behind. Asked for other scenarios only, it prints nothing; an unknown flag
exits with status 2.
"""
import json
import os
import subprocess
import sys

QUEUE_FIELDS = ["acquisitions", "handoffs_s", "gap_p50_us", "gap_p99_us", "gap_mean_us", "per_thread_min",
                "per_thread_max", "violations", "stalls", "leftover_nodes", "cpu_window_ms"]
FIELDS = {"a_uncontended": ["n", "ops_s", "p50_us", "leftover_nodes", "cpu_window_ms"],
          "c_contended_T2": QUEUE_FIELDS, "k_contended_hold5_T8": QUEUE_FIELDS,
          "d_rwlock": ["ops_s", "reads", "writes", "violations", "leftover_nodes", "cpu_window_ms"],
          "e_semaphore_hold0": ["acquisitions", "leases_s", "violations", "leftover_nodes", "cpu_window_ms"],
          "e_semaphore_hold20": ["acquisitions", "leases_s", "violations", "leftover_nodes", "cpu_window_ms"]}


def main():
    binary = sys.argv[1]
    zk = os.environ.get("ZKLOCK_TEST_ZK")
    if not zk:
        print("ZKLOCK_TEST_ZK is not set (run through ctest / tools/zk env)")
        return 1
    problems = []
    bad = subprocess.run([binary, "--zk", zk, "--no-such-flag", "1"], capture_output=True, text=True, timeout=30)
    if bad.returncode != 2 or bad.stdout:
        problems.append("unknown flag: exit %d, stdout %r (want 2, nothing)" % (bad.returncode, bad.stdout[:200]))
    other = subprocess.run([binary, "--zk", zk, "--dur", "1", "--scen", "b,f"], capture_output=True, text=True,
                           timeout=30)
    if other.returncode != 0 or other.stdout:
        problems.append("scenarios b,f: exit %d, stdout %r (want 0, nothing)" % (other.returncode, other.stdout[:200]))

    args = [binary, "--zk", zk, "--proxy", "127.0.0.1:1", "--ctrl", "1", "--n", "20", "--warm", "5", "--dur", "1",
            "--threads", "2", "--herd", "5", "--scen", "a,c,k,d,e", "--tag", "smoke"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        problems.append("exit status %d" % p.returncode)
    seen = {}
    for n, line in enumerate(p.stdout.splitlines(), 1):
        try:
            o = json.loads(line)
        except ValueError:
            problems.append("stdout line %d is not JSON: %r" % (n, line[:200]))
            continue
        for k in ("lib", "lib_version", "scenario"):
            if k not in o:
                problems.append("line %d has no %s" % (n, k))
        if o.get("lib") != "k-floor" or o.get("tag") != "smoke":
            problems.append("line %d: lib %r, tag %r" % (n, o.get("lib"), o.get("tag")))
        seen[o.get("scenario")] = o
    if sorted(seen) != sorted(["env"] + list(FIELDS)):
        problems.append("scenarios %r (want env and %s)" % (sorted(seen), ", ".join(FIELDS)))
    for scen, fields in FIELDS.items():
        o = seen.get(scen, {})
        missing = [f for f in fields if f not in o]
        if missing:
            problems.append("%s: missing %s" % (scen, ", ".join(missing)))
        if o and not o.get("n", o.get("acquisitions", o.get("reads", 0))) > 0:
            problems.append("%s: no acquisitions" % scen)
        if o and not o.get("cpu_window_ms", 0) > 0:
            problems.append("%s: cpu_window_ms %r (want > 0)" % (scen, o.get("cpu_window_ms")))
        for f in ("violations", "leftover_nodes"):
            if o.get(f, 0) != 0:
                problems.append("%s: %s = %r" % (scen, f, o.get(f)))
    k = seen.get("k_contended_hold5_T8", {})
    if problems:
        print("k_floor does not keep the contract:")
        for x in problems:
            print("  " + x)
        print("--- stderr ---\n" + p.stderr[-3000:])
        return 1
    print("k_floor contract: OK, %d handoffs/s in k" % k["handoffs_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
