#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/k_floor (scenario k's floor, run beside the peers by tools/bench-peers) keeps the runner contract.

  k_floor_contract.py K_FLOOR_BINARY       (server address in ZKLOCK_TEST_ZK)

A one-second run of scenario k: exit status 0; every stdout line one JSON object with lib k-floor,
lib_version, scenario and the tag; an env line and a k line with the fields summarize.py and
bench/ratios.py read; some handoffs; no mutual-exclusion violation; no node left behind. Asked
for other scenarios only, it prints nothing; an unknown flag exits with status 2.
"""
import json
import os
import subprocess
import sys

K_FIELDS = ["handoffs_s", "gap_p50_us", "gap_p99_us", "gap_mean_us", "per_thread_min", "per_thread_max",
            "violations", "stalls", "leftover_nodes"]


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
    other = subprocess.run([binary, "--zk", zk, "--dur", "1", "--scen", "a,c"], capture_output=True, text=True,
                           timeout=30)
    if other.returncode != 0 or other.stdout:
        problems.append("scenarios a,c: exit %d, stdout %r (want 0, nothing)" % (other.returncode, other.stdout[:200]))

    args = [binary, "--zk", zk, "--proxy", "127.0.0.1:1", "--ctrl", "1", "--n", "20", "--warm", "5", "--dur", "1",
            "--threads", "2", "--herd", "5", "--scen", "a,k", "--tag", "smoke"]
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
    if sorted(seen) != ["env", "k_contended_hold5_T8"]:
        problems.append("scenarios %r (want env and k_contended_hold5_T8)" % sorted(seen))
    k = seen.get("k_contended_hold5_T8", {})
    missing = [f for f in K_FIELDS if f not in k]
    if missing:
        problems.append("k: missing %s" % ", ".join(missing))
    if k and not k.get("handoffs_s", 0) > 0:
        problems.append("k: no handoffs (%r)" % k.get("handoffs_s"))
    for f in ("violations", "leftover_nodes"):
        if k.get(f, 0) != 0:
            problems.append("k: %s = %r" % (f, k.get(f)))
    if problems:
        print("k_floor does not keep the contract:")
        for x in problems:
            print("  " + x)
        print("--- stderr ---\n" + p.stderr[-3000:])
        return 1
    print("k_floor contract: OK, %d handoffs/s" % k["handoffs_s"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
