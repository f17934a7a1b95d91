#!/usr/bin/python3
# SPDX-License-Identifier: Apache-2.0
"""zklock against the peers: ratio table of the headline metrics of peer benchmark runs.

  ratios.py OUTDIR [OUTDIR ...]
  ratios.py --today LOOPBACK_DIR... --delay DELAY_DIR...


Each OUTDIR is a run-all.sh result directory (<lib>.jsonl files, one JSON object per line). With
several dirs every value is the median over the runs. zklock libs are those whose name starts with
"zklock" (zklock = predecessor watch, zklock-children = children watch); peers: curator, kazoo.
"k-floor" (bench/k_floor, scenarios a, c, k, d, e) is the bare C client's queue: its line shows
what any library could reach in that run, and how close each zklock lib comes to it; the client CPU
table (cpu_window_ms per acquisition) puts every library and that floor side by side.
A ratio says how many times better zklock does than the peer (higher = zklock better): zklock / peer
for rates, peer / zklock for latencies and request counts (the "better" column names the direction
of the metric itself).
With --today it prints one table instead (docs/performance.md's "Today"): every scenario's headline
metric at loopback and behind the delay proxy, zklock beside Curator, kazoo and the floor (k-floor
for scenario k), each value a median over the runs given, with zklock's ratios to both peers.
Standard library only.
"""
import glob
import json
import os
import statistics
import sys

PEERS = ["curator", "kazoo"]

# (scenario, field, label, better)
METRICS = [
    ("a_uncontended", "ops_s", "(a) uncontended cycles/s", "higher"),
    ("a_uncontended", "p50_us", "(a) acquire+release p50 us", "lower"),
    ("c_contended_T2", "handoffs_s", "(c) T=2 handoffs/s", "higher"),
    ("c_contended_T8", "handoffs_s", "(c) T=8 handoffs/s", "higher"),
    ("c_contended_T32", "handoffs_s", "(c) T=32 handoffs/s", "higher"),
    ("k_contended_hold5_T8", "handoffs_s", "(k) T=8 hold 5 ms: handoffs/s", "higher"),
    ("k_contended_hold5_T8", "gap_p50_us", "(k) T=8 hold 5 ms: gap p50 us", "lower"),
    ("k_contended_hold5_T8", "gap_mean_us", "(k) T=8 hold 5 ms: gap mean us", "lower"),
    ("d_rwlock", "ops_s", "(d) r/w 90:10 ops/s", "higher"),
    ("e_semaphore_hold0", "leases_s", "(e) semaphore hold 0: leases/s", "higher"),
    ("e_semaphore_hold20", "leases_s", "(e) semaphore hold 20 ms: leases/s", "higher"),
    ("g_herd", "handoff_p50_us", "(g) herd handoff p50 us", "lower"),
    # (m): not in the peers' harness (tools/bench-peers with SCEN naming m; Curator's side is
    # bench/curator-multi): a semaphore of 8 permits, 16 clients asking 1, 2 or 3 permits at once
    ("m_semaphore_multi_hold0", "leases_s", "(m) 8 permits, 1-3 per lease, hold 0: leases/s", "higher"),
    ("m_semaphore_multi_hold0", "permits_s", "(m) 8 permits, 1-3 per lease, hold 0: permits/s", "higher"),
    ("m_semaphore_multi_hold5", "leases_s", "(m) 8 permits, 1-3 per lease, hold 5 ms: leases/s", "higher"),
    ("m_semaphore_multi_hold5", "permits_s", "(m) 8 permits, 1-3 per lease, hold 5 ms: permits/s", "higher"),
]
# scenarios whose stalls (60 s guard timeouts) and violations ratios.py lists under the table
STALLS = ["m_semaphore_multi_hold0", "m_semaphore_multi_hold5"]
OPS = ["mutex_acquire_release", "mutex_new_lock_object_per_use", "reentrant_acq2_rel2", "read_acquire_release",
       "write_acquire_release", "semaphore_acquire_return", "failed_try0", "failed_timed20ms",
       "blocking_acquire_after_wait_release"]
METRICS += [("o_opcount_" + p, "zk_requests_per_cycle", "(o) requests: " + p, "lower") for p in OPS]
# kazoo 2.8.0's stock read/write lock deadlocks; its harness also measures it with the PR #650 fix.
PATCHED = {("kazoo", "d_rwlock"): "d_rwlock_pr650fix"}
# Client CPU per acquisition (runner contract: cpu_window_ms, the process's CPU in the timed window)
CPU = [("a_uncontended", "(a)"), ("c_contended_T2", "(c) T=2"), ("c_contended_T8", "(c) T=8"),
       ("c_contended_T32", "(c) T=32"), ("k_contended_hold5_T8", "(k) T=8 hold 5 ms"), ("d_rwlock", "(d) r/w 90:10"),
       ("e_semaphore_hold0", "(e) hold 0"), ("e_semaphore_hold20", "(e) hold 20"),
       ("m_semaphore_multi_hold0", "(m) hold 0, per lease"), ("m_semaphore_multi_hold5", "(m) hold 5, per lease")]
FLOOR = "k-floor"  # bench/k_floor: the bare C client's queue, scenarios a, c, k, d, e


def cpu_per_acq(runs, lib, scen):
    """Median over the runs of cpu_window_ms / the window's acquisitions (n, acquisitions, or reads +
    writes), in microseconds; None if the lib does not report it."""
    vals = []
    for r in runs:
        o = r.get((lib, scen), {})
        ms = o.get("cpu_window_ms")
        count = o.get("n") if scen == "a_uncontended" else o.get("acquisitions")
        if scen == "d_rwlock" and isinstance(o.get("reads"), int) and isinstance(o.get("writes"), int):
            count = o["reads"] + o["writes"]
        if isinstance(ms, (int, float)) and isinstance(count, int) and count > 0:
            vals.append(ms * 1000.0 / count)
    return statistics.median(vals) if vals else None


def cpu_table(runs, mine, peers):
    libs = peers + mine + ([FLOOR] if any((FLOOR, s) in r for r in runs for s, _ in CPU) else [])
    print("Client CPU per acquisition, us (cpu_window_ms / the window's acquisitions: user + system CPU of the "
          "whole client process in the timed window, a JVM's JIT and GC and the C client's threads included; "
          "%s = the bare C client's queue, bench/k_floor.cpp). Ratios: times less CPU, higher = zklock cheaper; "
          "zklock/%s below 1 = above the floor." % (FLOOR, FLOOR))
    print()
    hdr = ["scenario"] + libs
    for m in mine:
        hdr += ["%s/%s" % (m, p) for p in peers + ([FLOOR] if FLOOR in libs else [])]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for scen, label in CPU:
        v = {lib: cpu_per_acq(runs, lib, scen) for lib in libs}
        if all(x is None for x in v.values()):
            continue
        cells = [label] + [fmt(v[lib]) for lib in libs]
        for m in mine:
            cells += [ratio(v[p], v[m]) for p in peers + ([FLOOR] if FLOOR in libs else [])]
        print("| " + " | ".join(cells) + " |")


def load(d):
    res = {}
    for f in sorted(glob.glob(os.path.join(d, "*.jsonl"))):
        with open(f) as fh:
            for line in fh:
                line = line.strip()
                if not line.startswith("{"):
                    continue
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                if "lib" in o and "scenario" in o:
                    res[(o["lib"], o["scenario"])] = o
    return res


def value(runs, lib, scen, key):
    vals = []
    for r in runs:
        v = r.get((lib, scen), {}).get(key)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            vals.append(float(v))
    return statistics.median(vals) if vals else None


def fmt(v):
    if v is None:
        return "-"
    return "%.0f" % v if abs(v) >= 100 else ("%.1f" % v if abs(v) >= 10 else "%.2f" % v)


def ratio(a, b):
    if a is None or b is None:
        return "-"
    if b == 0:
        return "inf" if a else "-"
    return "%.2fx" % (a / b)


def better_ratio(mine, peer, better):
    """How many times better `mine` is than `peer` for a metric where `better` is higher or lower."""
    return ratio(mine, peer) if better == "higher" else ratio(peer, mine)


# (scenario, field, label, better): one line per scenario for --today
TODAY = [
    ("a_uncontended", "ops_s", "(a) uncontended acquire+release cycles/s", "higher"),
    ("a_uncontended", "p50_us", "(a) uncontended cycle p50 us", "lower"),
    ("b_reentrant", "reacquire_p50_us", "(b) re-entry p50 us", "lower"),
    ("c_contended_T2", "handoffs_s", "(c) 2 clients: handoffs/s", "higher"),
    ("c_contended_T8", "handoffs_s", "(c) 8 clients: handoffs/s", "higher"),
    ("c_contended_T32", "handoffs_s", "(c) 32 clients: handoffs/s", "higher"),
    ("k_contended_hold5_T8", "handoffs_s", "(k) 8 clients, 5 ms holds: handoffs/s", "higher"),
    ("k_contended_hold5_T8", "gap_p50_us", "(k) 8 clients, 5 ms holds: gap p50 us", "lower"),
    ("d_rwlock", "ops_s", "(d) read/write 90:10, 1 ms holds: ops/s", "higher"),
    ("e_semaphore_hold0", "leases_s", "(e) semaphore of 4, 16 clients, hold 0: leases/s", "higher"),
    ("e_semaphore_hold20", "leases_s", "(e) semaphore of 4, 16 clients, hold 20 ms: leases/s", "higher"),
    ("f_failed_try", "try0_p50_us", "(f) failed try_lock() p50 us", "lower"),
    ("g_herd", "handoff_p50_us", "(g) 100 waiters: handoff p50 us", "lower"),
    ("h_session_expiry", "other_acquire_ms", "(h) holder expired: next acquire after ms", "lower"),
    ("o_opcount_mutex_acquire_release", "zk_requests_per_cycle", "(o) requests per acquire+release", "lower"),
]
FLOORS = {"k_contended_hold5_T8": "k-floor"}


def today(loop_dirs, delay_dirs):
    sets = [("loopback", [load(d) for d in loop_dirs]), ("2 ms round trip", [load(d) for d in delay_dirs])]
    hdr = ["metric", "better"]
    for name, _ in sets:
        hdr += ["%s: zklock" % name, "Curator", "kazoo", "floor", "zklock/Curator", "zklock/kazoo"]
    print("Medians of %d loopback runs (%s) and %d runs behind DELAY_MS=1 (%s); ratios: times better, "
          "higher = zklock better." % (len(loop_dirs), ", ".join(loop_dirs), len(delay_dirs), ", ".join(delay_dirs)))
    print()
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for scen, key, label, better in TODAY:
        cells = [label, better]
        for _, runs in sets:
            z, c, k = (value(runs, lib, scen, key) for lib in ("zklock", "curator", "kazoo"))
            alt = PATCHED.get(("kazoo", scen))
            if alt and any(("kazoo", alt) in r for r in runs):
                k = value(runs, "kazoo", alt, key)  # kazoo's own lock deadlocks here: its fixed one
            floor = FLOORS.get(scen)
            f = value(runs, floor, scen, key) if floor else None
            cells += [fmt(z), fmt(c), fmt(k), fmt(f), better_ratio(z, c, better), better_ratio(z, k, better)]
        print("| " + " | ".join(cells) + " |")


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--today":
        args = sys.argv[2:]
        if "--delay" not in args:
            print(__doc__)
            sys.exit(2)
        i = args.index("--delay")
        today(args[:i], args[i + 1:])
        return
    dirs = sys.argv[1:]
    if not dirs:
        print(__doc__)
        sys.exit(2)
    runs = [load(d) for d in dirs]
    libs = []
    for r in runs:
        for (lib, _) in r:
            if lib not in libs:
                libs.append(lib)
    mine = [lib for lib in libs if lib.startswith("zklock")]
    peers = [p for p in PEERS if p in libs]
    if not mine:
        print("no zklock results in " + ", ".join(dirs))
        sys.exit(1)
    print("zklock vs peer: times better, higher = zklock better (%s%s)" % (", ".join(dirs), "; medians of %d runs" % len(runs) if len(runs) > 1 else ""))
    for lib in mine + peers:
        loads = [r.get((lib, "env"), {}).get("loadavg") for r in runs]
        print("  %s: loadavg at process start %s" % (lib, " | ".join(str(x) for x in loads)))
    print()
    hdr = ["metric", "better"] + peers
    for m in mine:
        hdr += [m] + ["%s/%s" % (m, p) for p in peers]
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for scen, key, label, better in METRICS:
        if not any((lib, scen) in r for r in runs for lib in libs):
            continue
        pv = {p: value(runs, p, scen, key) for p in peers}
        cells = [label, better] + [fmt(pv[p]) for p in peers]
        for m in mine:
            mv = value(runs, m, scen, key)
            cells += [fmt(mv)] + [better_ratio(mv, pv[p], better) for p in peers]
        print("| " + " | ".join(cells) + " |")
        for p in peers:
            alt = PATCHED.get((p, scen))
            if alt and any((p, alt) in r for r in runs):
                av = value(runs, p, alt, key)
                cells = [label + ", %s with PR#650 fix" % p, better]
                cells += [fmt(av) if q == p else "" for q in peers]
                for m in mine:
                    cells += [""] + [better_ratio(value(runs, m, scen, key), av, better) if q == p else ""
                                     for q in peers]
                print("| " + " | ".join(cells) + " |")
    floor = "k-floor"
    if any((floor, "k_contended_hold5_T8") in r for r in runs):
        print()
        print("(k) against its floor, %s (an ideal queue on the bare C client, bench/k_floor.cpp):" % floor)
        print()
        print("| lib | handoffs/s | gap p50 us | gap mean us | handoffs/s vs %s | vs curator |" % floor)
        print("|---|---|---|---|---|---|")
        fv = value(runs, floor, "k_contended_hold5_T8", "handoffs_s")
        cv = value(runs, "curator", "k_contended_hold5_T8", "handoffs_s")
        for lib in [floor] + mine + peers:
            hv = value(runs, lib, "k_contended_hold5_T8", "handoffs_s")
            if hv is None:
                continue
            print("| %s | %s | %s | %s | %s | %s |" % (lib, fmt(hv), fmt(value(runs, lib, "k_contended_hold5_T8", "gap_p50_us")),
                  fmt(value(runs, lib, "k_contended_hold5_T8", "gap_mean_us")), ratio(hv, fv), ratio(hv, cv)))
    stall_lines = []
    for scen in STALLS:
        for lib in peers + mine:
            st = [r[(lib, scen)].get("stalls") for r in runs if (lib, scen) in r]
            vi = [r[(lib, scen)].get("violations") for r in runs if (lib, scen) in r]
            if st:
                stall_lines.append("  %s %s: stalls %s, violations %s, leftover_nodes %s" % (
                    scen, lib, " | ".join(str(x) for x in st), " | ".join(str(x) for x in vi),
                    " | ".join(str(r[(lib, scen)].get("leftover_nodes")) for r in runs if (lib, scen) in r)))
    if stall_lines:
        print()
        print("(m) stalls (acquires that hit the 60 s guard; a stall also stretches duration_s), violations, "
              "leftover nodes, per run:")
        print("\n".join(stall_lines))
    print()
    cpu_table(runs, mine, peers)


if __name__ == "__main__":
    main()
