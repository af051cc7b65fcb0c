#!/usr/bin/env python3
"""Prints bench/run.sh's table from its results file (tab-separated lines, see run.sh).

Closed-loop numbers are medians over rounds; ratios are of those medians, measured in
the same run. The targets of issue 26 are checked at the end, with the CPU budget that
the ratio target sets on a box whose cores the load generator and backend share.
"""
import statistics
import sys
from collections import defaultdict

TARGETS = [
    "direct", "nginx", "bare", "minimal", "minimal-before", "full", "full-before", "full-approval",
    "full-sampled", "full-redis", "full-jwt",
]
NAMES = {
    "direct": "backend alone",
    "nginx": "nginx",
    "bare": "bare hyper proxy",
    "minimal": "toolgate minimal",
    "full": "toolgate full",
    "full-before": "full, before",
    "minimal-before": "minimal, before",
    "full-approval": "full + approval (false)",
    "full-sampled": "full, sampling 0.1",
    "full-redis": "full + redis",
    "full-jwt": "full, agent JWT",
}
# The target column: the longest name and a space.
W = max(len(n) for n in NAMES.values()) + 1


CPU_PARTS = ("target", "backend", "sink", "wrk")


def fields(text):
    return {k: v for k, v in (p.split("=", 1) for p in text.split() if "=" in p)}


def cpu_per_call(f, target, requests):
    """Microseconds of CPU per request for each process of a round, or None if not measured."""
    if "clk_tck" not in f or requests == 0:
        return None
    tick_us = 1e6 / int(f["clk_tck"])
    us = {
        "target": int(f["cpu_target_ticks"]) * tick_us,
        # The backend alone is its own target: not counted twice.
        "backend": 0 if target == "direct" else int(f["cpu_backend_ticks"]) * tick_us,
        "sink": int(f["cpu_sink_ticks"]) * tick_us,
        "wrk": int(f["cpu_wrk_ms"]) * 1000,
    }
    per_call = {k: v / requests for k, v in us.items()}
    # perf stat's task-clock over the same run: the independent count (run.sh, issue 49).
    if "perf_target_ms" in f:
        per_call["perf"] = float(f["perf_target_ms"]) * 1000 / requests
    return per_call


def issue_49_targets(cpu, med, paced, rss, direct_p99, verdict):
    """Round three's targets (issue 49): ratios to the bare proxy's pooled CPU per call, and
    the two counts of the target's CPU (/proc ticks and perf's task-clock) side by side."""
    print("issue 49 targets (pooled CPU per call at c=64, ratios to the bare proxy's):")
    for load in ("rest", "mcp"):
        bare = cpu.get((load, 64, "bare"))
        if not bare:
            continue
        for t, limit in (("full-jwt", 2.5), ("full", None), ("minimal", 1.3)):
            c = cpu.get((load, 64, t))
            if not c:
                continue
            r = c["pooled"] / bare["pooled"]
            line = f"  {t} CPU per call ({load}): {c['pooled']:.1f} µs, {r:.2f}× bare's {bare['pooled']:.1f}"
            print(line + (f" (≤ {limit}×) — {verdict(r <= limit)}" if limit else ""))
        m, b = med.get((load, 64, "minimal")), med.get((load, 64, "bare"))
        if m and b:
            print(f"  minimal req/s ({load}): {m[0] / b[0]:.2f}× bare (≥ 0.85×) — {verdict(m[0] / b[0] >= 0.85)}")
    if direct_p99 is not None and paced.get("full"):
        added = (statistics.median(r[1] for r in paced["full"]) - direct_p99) / 1000
        print(f"  full's added p99 at the fixed rate ≤ 0.3 ms: {added:+.3f} ms — {verdict(added <= 0.3)}")
    for t in ("full", "full-jwt"):
        r = rss.get(t, {})
        if r.get("peak"):
            print(f"  peak RSS ≤ 48 MB ({t}): {r['peak']:.1f} MB — {verdict(r['peak'] <= 48)}")
    counted = [(k, c) for k, c in sorted(cpu.items()) if "perf" in c and k[1] == 64]
    if counted:
        print("  the two CPU counts at c=64, pooled µs per call: /proc ticks vs perf task-clock")
        for (load, _conc, t), c in counted:
            gap = (c["pooled"] / c["perf"] - 1) * 100 if c["perf"] else 0
            print(f"    {load:<5} {NAMES[t]:<{W}}{c['pooled']:7.1f}{c['perf']:7.1f}  ({gap:+.1f}%)")
    print()


def main(path):
    wrk = defaultdict(list)
    paced = defaultdict(list)
    rss = defaultdict(dict)
    notes = {}
    admit_in_sidecar = []
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
                    cpu_per_call(f, target, int(f["requests"])),
                )
            )
        elif kind == "paced":
            _, target, _round, rest = parts
            f = fields(rest)
            # CPU and context switches per call, over every request sent while they were
            # counted (the warm-up's too); older results files lack them.
            cpu_us = switches = None
            if "cpu_target_ticks" in f and "sent" in f:
                sent = max(int(f["sent"]), 1)
                cpu_us = int(f["cpu_target_ticks"]) * 1e6 / int(f["clk_tck"]) / sent
                switches = int(f["switches"]) / sent
            paced[target].append(
                (int(f["p50_us"]), int(f["p99_us"]), int(f["errors"]), cpu_us, switches)
            )
            if int(f.get("admit_count", 0)) > 0:
                # full-redis: its own Redis client's mean admission round trip, in µs.
                admit_in_sidecar.append(float(f["admit_seconds"]) * 1e6 / int(f["admit_count"]))
        elif kind in ("idle", "peak", "after"):
            rss[parts[1]][kind] = int(parts[2]) / 1024
        else:
            notes[kind] = "\t".join(parts[1:])

    med = {}
    cpu = {}
    for key, runs in wrk.items():
        med[key] = (
            statistics.median(r[0] for r in runs),
            statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs),
            sum(r[3] for r in runs),
            len(runs),
        )
        measured = [r for r in runs if r[4]]
        if measured:
            per_part = {p: statistics.median(r[4][p] for r in measured) for p in CPU_PARTS}
            per_part["box"] = statistics.median(sum(r[4][p] for p in CPU_PARTS) for r in measured)
            # How busy the box's cores were: CPU per call times calls per second.
            per_part["busy"] = statistics.median(sum(r[4][p] for p in CPU_PARTS) * r[0] / 1e6 for r in measured)
            # The target's CPU per call from its cheapest round to its dearest: the noise a
            # difference between two targets must exceed to mean anything.
            per_part["spread"] = max(r[4]["target"] for r in measured) - min(r[4]["target"] for r in measured)
            # All rounds' CPU over all their calls. On a saturated box a round that gets
            # fewer cores makes fewer calls and charges each more, so the median of
            # per-round ratios swings with the machine; the pooled ratio weighs each round
            # by its calls, and is the figure to compare builds by.
            per_part["pooled"] = sum(r[4]["target"] * r[0] for r in measured) / sum(r[0] for r in measured)
            counted = [r for r in measured if "perf" in r[4]]
            if counted:
                per_part["perf"] = sum(r[4]["perf"] * r[0] for r in counted) / sum(r[0] for r in counted)
            cpu[key] = per_part
    cores = int(notes.get("cores", "0") or 0)

    print()
    print(f"machine: {notes.get('machine', '?')}")
    print(f"load average before: {notes.get('loadavg_before', '?')}, after: {notes.get('loadavg_after', '?')}")
    print()
    header = (
        f"{'load':<6}{'conc':>5}  {'target':<{W}}{'req/s':>9}{'p50 ms':>8}{'p99 ms':>8}"
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
                    f"{load:<6}{conc:>5}  {NAMES[t]:<{W}}{m[0]:>9.0f}{m[1] / 1000:>8.2f}{m[2] / 1000:>8.2f}"
                    f"{ratio('nginx'):>8}{ratio('bare'):>7}{ratio('direct'):>9}"
                    f"{(f'{peak:.1f} MB' if peak else '-'):>10}{m[3]:>8}"
                )
            print()

    if cpu:
        print("CPU per call at c=64, µs (median of rounds): the target, the backend behind it, the")
        print("OTLP sink, wrk, and all four; busy: the cores all four kept busy, of " + (f"{cores}" if cores else "?"))
        print("pooled: the target's /proc ticks over all rounds' calls; perf: its task-clock by perf stat")
        for load in ("rest", "mcp"):
            for t in TARGETS:
                c = cpu.get((load, 64, t))
                if c:
                    print(
                        f"  {load:<5} {NAMES[t]:<{W}}{c['target']:7.1f}{c['backend']:7.1f}{c['sink']:7.1f}"
                        f"{c['wrk']:7.1f}   all {c['box']:6.1f}   busy {c['busy']:.2f}"
                        f"   pooled {c['pooled']:6.1f}"
                        + (f"   perf {c['perf']:6.1f}" if "perf" in c else "")
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
        cost = ""
        if all(r[3] is not None for r in runs):
            cpu_us = statistics.median(r[3] for r in runs)
            switches = statistics.median(r[4] for r in runs)
            cost = f"  CPU {cpu_us:5.0f} µs/call  {switches:.2f} context switches/call"
        print(
            f"  {NAMES[t]:<{W}}p50 {p50 / 1000:.3f} ms  p99 {p99 / 1000:.3f} ms  p99 over the backend alone {added}"
            f"  errors {sum(r[2] for r in runs)}{cost}"
        )
    print()
    print("resident memory (MB): idle after start / after the load / peak")
    for t in TARGETS:
        r = rss.get(t)
        if r and r.get("peak"):
            print(f"  {NAMES[t]:<{W}}{r.get('idle', 0):6.1f} / {r.get('after', 0):6.1f} / {r['peak']:6.1f}")
    if "audit_records" in notes:
        print(f"full toolgate wrote {notes['audit_records']} audit records; OTLP sink: {notes.get('spans', '?')}")

    print()
    print("issue 26 targets:")

    def ratio(load, conc, a, b):
        x, y = med.get((load, conc, a)), med.get((load, conc, b))
        return x[0] / y[0] if x and y else None

    def verdict(ok):
        return "met" if ok else "NOT met"

    def budget(load, target, reference, share):
        """The CPU per call `target` may use to reach `share` of `reference`'s req/s at c=64
        on a saturated box: the cores' time per call at that rate, less the backend's and
        wrk's per call in the reference's rounds (a rate near it) and the sink's in the
        target's own."""
        ref, mine = med.get((load, 64, reference)), cpu.get((load, 64, target))
        ref_cpu = cpu.get((load, 64, reference))
        if not (ref and mine and ref_cpu and cores):
            return
        per_call = cores * 1e6 / (share * ref[0])
        others = ref_cpu["backend"] + ref_cpu["wrk"] + mine["sink"]
        print(
            f"    CPU budget: {cores} cores at {share}× {NAMES[reference]}'s {ref[0]:.0f} req/s leave "
            f"{per_call:.1f} µs per call; less {others:.1f} for the backend, wrk and sink, "
            f"{target} may use {per_call - others:.1f} µs and uses {mine['target']:.1f}"
        )

    def paced_median(t, i):
        return statistics.median(r[i] for r in paced[t])

    for load in ("rest", "mcp"):
        r = ratio(load, 64, "minimal", "bare")
        if r is not None:
            print(f"  minimal ≥ 0.85× bare proxy req/s at c=64 ({load}): {r:.2f}× — {verdict(r >= 0.85)}")
            budget(load, "minimal", "bare", 0.85)
    for load, limit in (("rest", 60), ("mcp", 65)):
        c = cpu.get((load, 64, "full"))
        if c:
            print(f"  full ≤ {limit} µs CPU per call at c=64 ({load}): {c['target']:.1f} µs — {verdict(c['target'] <= limit)}")
        c = cpu.get((load, 64, "full-sampled"))
        if c:
            print(f"    full, sampling at ratio 0.1: {c['target']:.1f} µs")
    if direct_p99 is not None:
        # Targets for minimal and full; the others are shown beside them.
        for t, limit in (("minimal", 0.3), ("full", 0.5), ("full-approval", None), ("full-sampled", None), ("full-redis", None)):
            if paced.get(t):
                added = (paced_median(t, 1) - direct_p99) / 1000
                if limit is None:
                    print(f"  added p99 at the fixed rate ({t}): {added:+.3f} ms")
                else:
                    print(f"  added p99 ≤ {limit} ms at the fixed rate ({t}): {added:+.3f} ms — {verdict(added <= limit)}")
    for t in ("minimal", "full"):
        r = rss.get(t, {})
        if r:
            print(f"  idle RSS ≤ 20 MB ({t}): {r['idle']:.1f} MB — {verdict(r['idle'] <= 20)}")
            print(f"  peak RSS under load ≤ 60 MB ({t}): {r['peak']:.1f} MB — {verdict(r['peak'] <= 60)}")
    # A false approval condition must cost nothing measurable: full + approval's CPU per
    # call within full's own spread from round to round, either way.
    for load in ("rest", "mcp"):
        a, f = cpu.get((load, 64, "full-approval")), cpu.get((load, 64, "full"))
        if not (a and f):
            continue
        diff = a["pooled"] - f["pooled"]
        r = ratio(load, 64, "full-approval", "full")
        print(
            f"  full + approval (false) vs full at c=64 ({load}): CPU {a['pooled']:.1f} vs {f['pooled']:.1f} µs per call "
            f"(pooled over rounds), {diff:+.1f} µs ({diff / f['pooled'] * 100:+.1f}%), req/s {r:.2f}×"
        )
        print(
            f"    full's spread over its rounds {f['spread']:.1f} µs — costs nothing measurable: "
            f"{verdict(abs(diff) <= f['spread'])}"
        )
    issue_49_targets(cpu, med, paced, rss, direct_p99, verdict)
    if paced.get("full-approval") and paced.get("full"):
        for i, name in ((0, "p50"), (1, "p99")):
            extra = (paced_median("full-approval", i) - paced_median("full", i)) / 1000
            print(f"  full + approval (false) over full at the fixed rate, {name}: {extra:+.3f} ms")
    for load in ("rest", "mcp"):
        r = ratio(load, 64, "full", "nginx")
        if r is not None:
            print(f"  (for information) full / nginx req/s at c=64 ({load}): {r:.2f}×")
    for load in ("rest", "mcp"):
        for conc in (16, 64):
            r = ratio(load, conc, "full", "full-before")
            if r is not None:
                print(f"  (optimization) full now vs before ({load}, c={conc}): {r:.2f}×")
        for profile in ("full", "minimal"):
            now, before = cpu.get((load, 64, profile)), cpu.get((load, 64, f"{profile}-before"))
            if now and before:
                grew = (now["pooled"] / before["pooled"] - 1) * 100
                print(
                    f"  {profile}'s CPU per call now vs before at c=64 ({load}), pooled over rounds: "
                    f"{now['pooled']:.1f} vs {before['pooled']:.1f} µs ({grew:+.1f}%; "
                    f"medians {now['target']:.1f} vs {before['target']:.1f}, spreads "
                    f"{now['spread']:.1f} / {before['spread']:.1f}) — grows ≤ 5%: {verdict(grew <= 5)}"
                )
    if paced.get("full-redis") and paced.get("full"):
        # Issue 21: shared state may cost at most one Redis round trip per call.
        rtt, admit = notes.get("redis_rtt"), notes.get("redis_admit_rtt")
        stack = notes.get("redis_admit_rtt_stack")
        if rtt or admit:
            print(f"  one Redis round trip from one client, p50: PING {rtt or '?'} ms, the admission script {admit or '?'} ms (redis-benchmark)")
        if stack:
            print(f"  the admission script from toolgate's own Redis client on Tokio, idle, p50: {stack} ms (benchkit redis-rtt)")
        # The same round trip timed by the sidecar around its own Redis client (redis-rs'
        # multiplexed connection, a hand-off to its driver task and back), over the
        # fixed-rate calls themselves: the mean of each round, then their median.
        own = statistics.median(admit_in_sidecar) / 1000 if admit_in_sidecar else None
        if own is not None:
            print(f"  the admission round trip timed inside full + redis at the fixed rate, mean: {own:.3f} ms")
        for i, name in ((0, "p50"), (1, "p99")):
            extra = (statistics.median(r[i] for r in paced["full-redis"]) - statistics.median(r[i] for r in paced["full"])) / 1000
            line = f"  full + redis over full at the fixed rate, {name}: {extra:+.3f} ms"
            if admit and i == 0:
                ok = extra <= float(admit)
                line += f" — within one admission round trip: redis-benchmark's {verdict(ok)}"
                if stack:
                    line += f"; toolgate's client's, idle, {verdict(extra <= float(stack))}"
                if own is not None:
                    line += f"; the sidecar's own {verdict(extra <= own)}"
            print(line)


if __name__ == "__main__":
    main(sys.argv[1])
