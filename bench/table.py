#!/usr/bin/env python3
"""Prints bench/run.sh's table from its results file (tab-separated lines, see run.sh).

Closed-loop numbers are medians over rounds; ratios are of those medians, measured in
the same run. The targets of issue 9 are checked at the end.
"""
import statistics
import sys
from collections import defaultdict

TARGETS = ["direct", "nginx", "bare", "minimal", "full", "full-before"]
NAMES = {
    "direct": "backend alone",
    "nginx": "nginx",
    "bare": "bare hyper proxy",
    "minimal": "toolgate minimal",
    "full": "toolgate full",
    "full-before": "full, before",
}


def fields(text):
    return {k: v for k, v in (p.split("=", 1) for p in text.split() if "=" in p)}


def main(path):
    wrk = defaultdict(list)
    paced = defaultdict(list)
    rss = defaultdict(dict)
    notes = {}
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        kind = parts[0]
        if kind == "wrk" and len(parts) == 6:
            _, target, load, conc, _round, rest = parts
            f = fields(rest)
            if "requests" not in f:
                continue
            wrk[(load, int(conc), target)].append(
                (
                    int(f["requests"]) / (int(f["duration_us"]) / 1e6),
                    int(f["p50_us"]),
                    int(f["p99_us"]),
                    int(f["errors"]),
                )
            )
        elif kind == "paced":
            _, target, _round, rest = parts
            f = fields(rest)
            paced[target].append((int(f["p50_us"]), int(f["p99_us"]), int(f["errors"])))
        elif kind in ("idle", "peak", "after"):
            rss[parts[1]][kind] = int(parts[2]) / 1024
        else:
            notes[kind] = "\t".join(parts[1:])

    med = {}
    for key, runs in wrk.items():
        med[key] = (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs),
            sum(r[3] for r in runs),
            len(runs),
        )

    print()
    print(f"machine: {notes.get('machine', '?')}")
    print(f"load average before: {notes.get('loadavg_before', '?')}, after: {notes.get('loadavg_after', '?')}")
    print()
    header = (
        f"{'load':<6}{'conc':>5}  {'target':<18}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'×nginx':>8}{'×bare':>7}{'×direct':>9}{'peak RSS':>10}{'errors':>8}"
    )
    print(header)
    print("-" * len(header))
    for load in ("rest", "mcp"):
        for conc in (16, 64):
            base = {t: med.get((load, conc, t)) for t in TARGETS}
            for t in TARGETS:
                m = base[t]
                if not m:
                    continue
                ratio = lambda other: f"{m[0] / base[other][0]:.2f}" if base.get(other) else "-"
                peak = rss.get(t, {}).get("peak")
                print(
                    f"{load:<6}{conc:>5}  {NAMES[t]:<18}{m[0]:>9.0f}{m[1] / 1000:>8.2f}{m[2] / 1000:>8.2f}"
                    f"{ratio('nginx'):>8}{ratio('bare'):>7}{ratio('direct'):>9}"
                    f"{(f'{peak:.1f} MB' if peak else '-'):>10}{m[3]:>8}"
                )
            print()

    print(f"open loop, REST at a fixed rate (median of {max((len(v) for v in paced.values()), default=0)} runs):")
    direct_p99 = statistics.median(r[1] for r in paced["direct"]) if paced.get("direct") else None
    for t in TARGETS:
        runs = paced.get(t)
        if not runs:
            continue
        p50 = statistics.median(r[0] for r in runs)
        p99 = statistics.median(r[1] for r in runs)
        added = f"{(p99 - direct_p99) / 1000:+.3f} ms" if direct_p99 is not None else "-"
        print(
            f"  {NAMES[t]:<18} p50 {p50 / 1000:.3f} ms  p99 {p99 / 1000:.3f} ms  p99 over the backend alone {added}"
            f"  errors {sum(r[2] for r in runs)}"
        )
    print()
    print("resident memory (MB): idle after start / after the load / peak")
    for t in TARGETS:
        r = rss.get(t)
        if r and r.get("peak"):
            print(f"  {NAMES[t]:<18} {r.get('idle', 0):6.1f} / {r.get('after', 0):6.1f} / {r['peak']:6.1f}")
    if "audit_records" in notes:
        print(f"full toolgate wrote {notes['audit_records']} audit records; OTLP sink: {notes.get('spans', '?')}")

    print()
    print("issue 9 targets:")

    def ratio(load, conc, a, b):
        x, y = med.get((load, conc, a)), med.get((load, conc, b))
        return x[0] / y[0] if x and y else None

    def verdict(ok):
        return "met" if ok else "NOT met"

    for load in ("rest", "mcp"):
        r = ratio(load, 64, "full", "nginx")
        if r is not None:
            print(f"  full ≥ 0.8× nginx req/s at c=64 ({load}): {r:.2f}× — {verdict(r >= 0.8)}")
    for load in ("rest", "mcp"):
        for conc in (16, 64):
            r = ratio(load, conc, "minimal", "bare")
            if r is not None:
                print(f"  minimal ≥ 0.95× bare proxy ({load}, c={conc}): {r:.2f}× — {verdict(r >= 0.95)}")
    if direct_p99 is not None:
        for t in ("minimal", "full"):
            if paced.get(t):
                added = (statistics.median(r[1] for r in paced[t]) - direct_p99) / 1000
                print(f"  added p99 ≤ 0.3 ms at the fixed rate ({t}): {added:+.3f} ms — {verdict(added <= 0.3)}")
    for load in ("rest", "mcp"):
        for conc in (16, 64):
            r = ratio(load, conc, "full", "full-before")
            if r is not None:
                print(f"  (optimization) full now vs before ({load}, c={conc}): {r:.2f}×")
    for t in ("minimal", "full"):
        r = rss.get(t, {})
        if r:
            print(f"  idle RSS ≤ 20 MB ({t}): {r['idle']:.1f} MB — {verdict(r['idle'] <= 20)}")
            print(f"  peak RSS under load ≤ 60 MB ({t}): {r['peak']:.1f} MB — {verdict(r['peak'] <= 60)}")


if __name__ == "__main__":
    main(sys.argv[1])
