#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""bench/async_floor (the floor of bench/scale --mode async, run beside it by bench/async-scale) and, where
it is built, bench/async_floor_st (the same on the single-threaded C client) keep their output.

  async_floor_contract.py ASYNC_FLOOR_BINARY [ASYNC_FLOOR_ST_BINARY]    (server address in ZKLOCK_TEST_ZK)

Tiny runs with the floor's requests and with zklock's (--requests zklock): exit status 0; every stdout line
one JSON object; the many-paths line with its lib (async-floor[-st][-zklock-requests]), the rates and CPU
figures bench/async-scale reads, requests_per_acquire 3 or 4, and no error. An unknown flag, or an unknown
--requests value, exits with status 2 and prints nothing on stdout.
"""
import json
import os
import subprocess
import sys

MANY_FIELDS = ["pending", "holders_granted_s", "fill_ms", "queued_s", "requests_per_acquire",
               "holders_cpu_us_per_acquire", "fill_cpu_us_per_acquire", "errors"]


def check(binary, zk, single_threaded, problems):
    name = os.path.basename(binary)
    for bad_args in (["--no-such-flag", "1"], ["--requests", "some"]):
        bad = subprocess.run([binary, "--zk", zk] + bad_args, capture_output=True, text=True, timeout=30)
        if bad.returncode != 2 or bad.stdout:
            problems.append("%s %s: exit %d, stdout %r (want 2, nothing)" % (name, " ".join(bad_args), bad.returncode,
                                                                              bad.stdout[:200]))
    for requests, per in (("floor", 3), ("zklock", 4)):
        args = [binary, "--zk", zk, "--async-paths", "40", "--requests", requests]
        if not single_threaded:
            args += ["--async-waiters", "5"]
        p = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if p.returncode != 0:
            problems.append("%s --requests %s: exit status %d: %s" % (name, requests, p.returncode, p.stderr[-300:]))
            continue
        lib = ("async-floor-st" if single_threaded else "async-floor") + \
            ("-zklock-requests" if requests == "zklock" else "")
        many = None
        for n, line in enumerate(p.stdout.splitlines(), 1):
            try:
                d = json.loads(line)
            except ValueError:
                problems.append("%s line %d is not JSON: %r" % (name, n, line[:200]))
                continue
            if d.get("scenario") == "async_many_paths":
                many = d
            if d.get("scenario") in ("async_one_path", "async_many_paths") and d.get("lib") != lib:
                problems.append("%s --requests %s: lib %r, want %r" % (name, requests, d.get("lib"), lib))
        if many is None:
            problems.append("%s --requests %s: no async_many_paths line" % (name, requests))
            continue
        missing = [f for f in MANY_FIELDS if f not in many]
        if missing:
            problems.append("%s --requests %s: fields missing: %s" % (name, requests, ", ".join(missing)))
        if many.get("requests_per_acquire") != per:
            problems.append("%s --requests %s: requests_per_acquire %r, want %d" % (name, requests,
                                                                                     many.get("requests_per_acquire"), per))
        if many.get("errors") != 0 or many.get("pending") != 40:
            problems.append("%s --requests %s: errors %r, pending %r (want 0, 40)" % (name, requests, many.get("errors"),
                                                                                     many.get("pending")))


def main():
    zk = os.environ.get("ZKLOCK_TEST_ZK")
    if not zk:
        print("ZKLOCK_TEST_ZK is not set (run through ctest / tools/zk env)")
        return 1
    problems = []
    check(sys.argv[1], zk, False, problems)
    if len(sys.argv) > 2:
        check(sys.argv[2], zk, True, problems)
    else:
        print("async_floor_st is not built (no libzookeeper-st2): only async_floor checked")
    for p in problems:
        print("FAIL:", p)
    if not problems:
        print("ok: async_floor%s keep their output" % (" and async_floor_st" if len(sys.argv) > 2 else ""))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
