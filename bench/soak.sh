#!/usr/bin/env bash
# toolgate's soak run, one command: bench/soak.sh
#
# Issue 19's soak: the full profile (schema, CEL rules, audit to a file, spans to an OTLP
# receiver) under a steady open-loop load at ~70% of its saturated rate, for 10 minutes.
# It builds release binaries, starts on loopback bench/run.sh's fast backend, its OTLP
# sink and toolgate, measures the saturated rate with the soak's own load (`benchkit
# paced` asked for more than it can get, SOAK_SATURATION_SECONDS at SOAK_CONNECTIONS,
# audit and spans on), then starts a fresh toolgate and drives `benchkit paced` at
# SOAK_PERCENT of that rate while sampling it every SOAK_INTERVAL seconds: RSS, open file descriptors,
# threads, and the runtime's alive tasks from /metrics. It passes when
#   - no request failed (non-2xx or transport error);
#   - after the warm-up (10% of the run, 10 to 60 s) every RSS sample is within ±10% of
#     the post-warm-up median;
#   - fds, threads and tasks at the end (lowest of the last 3 samples) are at most the
#     highest of the first 3 post-warm-up samples plus a small slack (below);
#   - the audit log verifies (`toolgate audit verify`) and gained exactly one call
#     record per request the soak sent.
# Prints a table and exits 1 when a criterion fails. Everything it starts listens on
# 127.0.0.1 and is stopped on exit; each step is under a timeout. Whole run: about 12
# minutes after the build; the audit log in the work folder (/tmp) reaches ~4 GB at
# 13,000 calls/s and is deleted on exit unless SOAK_KEEP is set. Needs wrk (installed
# with apt-get when missing, as bench/run.sh does), curl and python3. Knobs (environment):
#   SOAK_SECONDS=600  SOAK_PERCENT=70  SOAK_RATE= (skip the measurement, use this rate)
#   SOAK_PROTOCOL=grpc (how spans are exported: grpc, the default, or http)
#   SOAK_BINARY=/path/to/toolgate (another build)  SOAK_ENV="NAME=value ..." (its environment)
#   SOAK_SATURATION_SECONDS=60
#   SOAK_INTERVAL=5  SOAK_CONNECTIONS=64  SOAK_PORT_BASE=18900  SOAK_NO_BUILD=1
#   SOAK_KEEP=1 (keep the work folder: samples, logs and the audit log)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
root=$PWD
seconds=${SOAK_SECONDS:-600}
percent=${SOAK_PERCENT:-70}
interval=${SOAK_INTERVAL:-5}
connections=${SOAK_CONNECTIONS:-64}
base=${SOAK_PORT_BASE:-18900}
# Warm-up: allocator arenas, connection pools and the span queue settle in the first
# seconds; 10% of the run, at least 10 s and at most 60 s (the issue names no length).
warmup=$((seconds / 10))
((warmup < 10)) && warmup=10
((warmup > 60)) && warmup=60

log() { printf '== %s\n' "$*" >&2; }

if ! command -v wrk >/dev/null; then
  log "installing wrk (apt-get, as root)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null
fi

if [ -z "${SOAK_NO_BUILD:-}" ]; then
  log "building release binaries (cargo build --release --bin toolgate --example benchkit)"
  cargo build --release --quiet --bin toolgate --example benchkit
fi
toolgate=${SOAK_BINARY:-$root/target/release/toolgate}
kit=$root/target/release/examples/benchkit

# --- work folder and cleanup ----------------------------------------------------------
work=$(mktemp -d /tmp/toolgate-soak.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do
    pkill -P "$pid" 2>/dev/null || true # a load run in the background: its timeout and paced
    kill "$pid" 2>/dev/null || true
  done
  wait 2>/dev/null || true
  if [ -z "${SOAK_KEEP:-}" ]; then rm -rf "$work"; else log "kept $work"; fi
}
trap cleanup EXIT INT TERM

port_backend=$base
port_otlp=$((base + 1))
port_agent=$((base + 2))
port_admin=$((base + 3))
port_otlp_http=$((base + 4))
ports_free "$base" $((base + 4)) SOAK_PORT_BASE
case ${SOAK_PROTOCOL:-grpc} in
  grpc) telemetry="{otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-soak}" ;;
  http) telemetry="{otlpEndpoint: 'http://127.0.0.1:$port_otlp_http/v1/traces', otlpProtocol: http, serviceName: toolgate-soak}" ;;
  *)
    echo "SOAK_PROTOCOL must be grpc or http" >&2
    exit 2
    ;;
esac

# --- servers --------------------------------------------------------------------------
log "starting backend, OTLP sink and toolgate (full profile) in $work"
"$kit" backend --listen "127.0.0.1:$port_backend" >"$work/backend.log" 2>&1 &
pids+=($!)
"$kit" otlp-sink --listen "127.0.0.1:$port_otlp" --http-listen "127.0.0.1:$port_otlp_http" \
  >"$work/otlp.log" 2>&1 &
pids+=($!)
audit=$work/audit.log
# One toolgate with the full profile, auditing to $1; sets $pid. The saturated rate is
# measured on one such process and the soak runs on a fresh one: memory a minute of
# saturation leaves in the allocator drains over minutes, and that is the calibration's
# trace, not the soak's (bench/SOAK.md, 2 December).
start_toolgate() { # audit-path
  cat >"$work/toolgate.yaml" <<EOF
listen: 127.0.0.1:$port_agent
admin: 127.0.0.1:$port_admin
upstream: http://127.0.0.1:$port_backend
policies: {files: [$root/bench/policies/full.yaml]}
identity:
  tokens: $root/bench/tokens.yaml
  taskIssuers: [{issuer: orchestrator, jwks: $root/examples/keys/task-jwks.json}]
audit: {path: $1}
telemetry: $telemetry
EOF
  # shellcheck disable=SC2086
  TOOLGATE_LOG=warn env ${SOAK_ENV:-} "$toolgate" run --config "$work/toolgate.yaml" \
    >>"$work/toolgate.log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for p in $port_agent $port_admin; do wait_port "$p"; done
  # Listening comes before the first policy snapshot: wait for /readyz too.
  for _ in $(seq 100); do
    curl -sf --max-time 1 -o /dev/null "http://127.0.0.1:$port_admin/readyz" && break
    sleep 0.1
  done
}
stop_toolgate() { # a clean stop: it flushes the audit log
  kill -TERM "$pid"
  for _ in $(seq 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  wait "$pid" 2>/dev/null || true
}
for p in $port_backend $port_otlp $port_otlp_http; do wait_port "$p"; done
start_toolgate "$work/calibration-audit.log"

export BENCH_DIR=$root/bench BENCH_BODY=$root/bench/body.json
BENCH_TASK=$("$kit" task-token --agent bench-bot)
export BENCH_TASK
url=http://127.0.0.1:$port_agent
check_call() {
  local status
  status=$(curl -sS --max-time 10 -o "$work/check.body" -w '%{http_code}' \
    -H 'Content-Type: application/json' -H 'Authorization: Bearer bench-token' \
    -H "X-Toolgate-Task: $BENCH_TASK" --data-binary "@$BENCH_BODY" "$url/search")
  if [ "$status" != 200 ] || ! grep -q '"ok":true' "$work/check.body"; then
    echo "the REST call was not answered: $status $(cat "$work/check.body")" >&2
    exit 1
  fi
}
check_call

# --- saturated rate -------------------------------------------------------------------
paced_load() { # rate seconds time-limit out-file: the soak's load, open loop on $connections connections
  timeout "$3" "$kit" paced --url "$url/search" --rate "$1" --seconds "$2" \
    --warmup 0 --connections "$connections" --body-file "$BENCH_BODY" \
    --header 'Content-Type: application/json' --header 'Authorization: Bearer bench-token' \
    --header "X-Toolgate-Task: $BENCH_TASK" >"$4" 2>"$4.err"
}
if [ -n "${SOAK_RATE:-}" ]; then
  saturated="not measured: SOAK_RATE" rate=$SOAK_RATE
else
  # Saturation is measured with the soak's own load: `benchkit paced` on the same
  # connections, asked for twice what wrk gets, so each connection sends its next request
  # as soon as the last is answered; the rate is what was answered per second of wall
  # time, over SOAK_SATURATION_SECONDS (60). The generator, the backend and the sink share
  # the two cores with toolgate, and paced costs more per request than wrk, so 70% of
  # wrk's rate (a 5 s burst until 1 December, 60 s after) left no headroom for ten
  # minutes (bench/SOAK.md).
  timeout 30 wrk -t1 -c"$connections" -d5s -s "$BENCH_DIR/wrk/rest.lua" "$url" >/dev/null
  burst=$(timeout 60 wrk -t1 -c"$connections" -d10s -s "$BENCH_DIR/wrk/rest.lua" "$url" |
    awk '/^RESULT/ { for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      printf "%d\n", v["requests"] / (v["duration_us"] / 1e6) }')
  if [ -z "$burst" ] || [ "$burst" -le 0 ]; then
    echo "wrk measured no rate to size the saturation run" >&2
    exit 1
  fi
  log "wrk at c=$connections over 10 s: $burst requests/s; paced at twice that follows"
  # Twice the rate for half the time: about SOAK_SATURATION_SECONDS of wall time.
  sat_schedule=$((${SOAK_SATURATION_SECONDS:-60} / 2))
  t_start=${EPOCHREALTIME/./}
  paced_load $((burst * 2)) "$sat_schedule" $((sat_schedule * 4 + 60)) "$work/saturation.out"
  elapsed_us=$((${EPOCHREALTIME/./} - t_start))
  saturated=$(awk -v us="$elapsed_us" '{ for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] } }
    END { if (v["errors"] > 0) { print "saturation: " v["errors"] " errors" > "/dev/stderr"; exit 1 }
      printf "%d\n", v["sent"] / (us / 1e6) }' "$work/saturation.out")
  log "saturated rate with the soak's load over $((elapsed_us / 1000000)) s: $saturated requests/s"
  rate=$((saturated * percent / 100))
fi

# --- the soak -------------------------------------------------------------------------
stop_toolgate
start_toolgate "$audit"
check_call
metric() { # name-prefix: the sum of a /metrics family, empty when the scrape fails
  { curl -sS --max-time 2 "http://127.0.0.1:$port_admin/metrics" 2>/dev/null || true; } |
    awk -v m="$1" 'index($0, m) == 1 { s += $NF; n++ } END { if (n) printf "%d", s }'
}
# Call records: `kind: call`, or no kind (logs written before kinds existed); `start`
# and `policy` records are not calls. grep, not awk: the log reaches gigabytes.
call_records() {
  local plain calls
  plain=$(LC_ALL=C grep -c -v -F '"kind":' "$audit" || true)
  calls=$(LC_ALL=C grep -c -F '"kind":"call"' "$audit" || true)
  echo $((plain + calls))
}
stable_call_records() { # counted once the file stops growing (the group commit is done)
  local a b
  a=$(stat -c %s "$audit")
  for _ in $(seq 40); do
    sleep 0.5
    b=$(stat -c %s "$audit")
    [ "$a" = "$b" ] && break
    a=$b
  done
  call_records
}
records_before=$(stable_call_records)
rss_now() { awk '$1 == "VmRSS:" {print $2}' "/proc/$pid/status"; }
# Idle RSS before and after the soak (not a criterion): buffers that fill under load
# (the audit and span queues, connection buffers) are empty at both, so a difference
# there is memory the load left behind: a leak, or pages the allocator keeps.
rss_idle_before=$(rss_now)

loadavg_before=$(cut -d' ' -f1-3 /proc/loadavg)
log "soak: $rate requests/s for ${seconds}s over $connections connections" \
  "(warm-up ${warmup}s), load average $loadavg_before"
paced_load "$rate" "$seconds" $((seconds + 120)) "$work/paced.out" &
paced=$!
pids+=("$paced")

samples=$work/samples.tsv
printf 't\trss_kib\tfds\tthreads\ttasks\tcalls\n' >"$samples"
t0=${EPOCHREALTIME/./}
next=0
while kill -0 "$paced" 2>/dev/null; do
  if ! kill -0 "$pid" 2>/dev/null; then
    echo "toolgate exited during the soak: $(tail -5 "$work/toolgate.log")" >&2
    exit 1
  fi
  now_us=$((${EPOCHREALTIME/./} - t0))
  # Only samples under load: at the schedule's end the connections close.
  if ((now_us >= next * 1000000 && now_us < seconds * 1000000)); then
    rss=$(rss_now)
    threads=$(awk '$1 == "Threads:" {print $2}' "/proc/$pid/status")
    fds=$(find "/proc/$pid/fd" -mindepth 1 -maxdepth 1 | wc -l)
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$((now_us / 1000000))" "$rss" "$fds" "$threads" \
      "$(metric toolgate_runtime_alive_tasks)" "$(metric toolgate_calls_total)" >>"$samples"
    next=$((next + interval))
  fi
  sleep 0.2
done
paced_status=0
wait "$paced" || paced_status=$?
loadavg_after=$(cut -d' ' -f1-3 /proc/loadavg)
[ "$paced_status" = 0 ] || log "paced exited with $paced_status: $(cat "$work/paced.out.err")"
paced_line=$(cat "$work/paced.out")
log "paced: $paced_line"

records_after=$(stable_call_records)
sleep 10
rss_idle_after=$(rss_now)
spans_dropped=$(metric toolgate_spans_dropped_total)
peak_rss=$(awk '$1 == "VmHWM:" {print $2}' "/proc/$pid/status")
# A clean stop flushes the audit log; then the whole chain is checked.
stop_toolgate
verify_status=0
verify_out=$(timeout 600 "$toolgate" audit verify "$audit" 2>&1) || verify_status=$?
log "audit verify: $verify_out"

SOAK_SAMPLES=$samples SOAK_PROTOCOL_USED=${SOAK_PROTOCOL:-grpc} SOAK_WARMUP=$warmup SOAK_PACED="$paced_line" SOAK_PACED_STATUS=$paced_status \
  SOAK_RATE_USED=$rate SOAK_SATURATED=$saturated SOAK_PERCENT_USED=$percent \
  SOAK_DURATION=$seconds SOAK_CONN=$connections SOAK_VERIFY_STATUS=$verify_status \
  SOAK_VERIFY_OUT="$verify_out" SOAK_RECORDS=$((records_after - records_before)) \
  SOAK_PEAK_RSS=$peak_rss SOAK_IDLE_RSS="$rss_idle_before $rss_idle_after" \
  SOAK_SPANS="$(tail -1 "$work/otlp.log")" SOAK_SPANS_DROPPED=$spans_dropped \
  SOAK_LOADAVG="$loadavg_before -> $loadavg_after" SOAK_AUDIT_BYTES=$(stat -c %s "$audit") \
  python3 - <<'EOF'
# The verdict: reads the samples and the run's figures from the environment, prints the
# table, exits 1 when a criterion fails.
import os, statistics, sys

env = os.environ
rows = [line.rstrip("\n").split("\t") for line in open(env["SOAK_SAMPLES"])][1:]
samples = [dict(t=int(r[0]), rss=int(r[1]), fds=int(r[2]), threads=int(r[3]),
                tasks=int(r[4]) if r[4] else None, calls=int(r[5]) if r[5] else None)
           for r in rows if len(r) == 6 and r[1]]
warmup = int(env["SOAK_WARMUP"])
after = [s for s in samples if s["t"] >= warmup]
paced = dict(kv.split("=", 1) for kv in env["SOAK_PACED"].split())
sent, ok = int(paced.get("sent", 0)), int(paced.get("requests", 0))
errors = int(paced.get("errors", -1))

failures = []
def check(ok_, what):
    if not ok_:
        failures.append(what)

check(env["SOAK_PACED_STATUS"] == "0" and sent > 0, "the load generator did not finish")
check(errors == 0 and ok == sent, f"{errors} errors, {ok} of {sent} requests answered 2xx")
# A connection that broke stops sending, so the schedule must have been sent whole (a
# connection's share is rounded, hence the 1%).
planned = int(env["SOAK_RATE_USED"]) * int(env["SOAK_DURATION"])
check(sent >= planned * 0.99, f"{sent} requests sent of {planned} planned")
mib = lambda kib: f"{kib / 1024:.1f} MiB"
if len(after) < 6:
    failures.append(f"only {len(after)} samples after the warm-up")
    after = after or samples
rss = [s["rss"] for s in after]
median = statistics.median(rss)
spread = (min(rss) / median - 1, max(rss) / median - 1)
check(-0.10 <= spread[0] and spread[1] <= 0.10,
      f"RSS left ±10% of its median: {spread[0]:+.1%} / {spread[1]:+.1%}")

# Growth: the end (lowest of the last 3 samples, so one busy moment at the end can't
# fail the run while a leak, which never shrinks, still shows) against the start (highest
# of the first 3 post-warm-up samples). The slack covers what legitimately comes and
# goes: a stall (other work on the machine) can put every client connection's call in
# flight at once, and the upstream pool then keeps one more connection (an fd and a
# task) per client connection until its idle timeout; Tokio's blocking pool starts
# threads for file I/O when its jobs overlap and retires them after 10 s idle; the
# scrape has a connection of its own. A leak at these rates passes any of these slacks
# within minutes.
conns = int(env["SOAK_CONN"])
slack = dict(fds=conns + 8, threads=8, tasks=conns + 8)
growth = {}
for key in ("fds", "threads", "tasks"):
    values = [s[key] for s in after if s[key] is not None]
    if len(values) < 6:
        failures.append(f"{key}: not enough samples")
        continue
    start, end = max(values[:3]), min(values[-3:])
    growth[key] = (start, end, min(values), max(values))
    check(end <= start + slack[key], f"{key} grew: {start} -> {end} (slack {slack[key]})")

records = int(env["SOAK_RECORDS"])
check(env["SOAK_VERIFY_STATUS"] == "0", "audit verify failed: " + env["SOAK_VERIFY_OUT"])
check(records == sent, f"{records} call records for {sent} requests sent")

calls = [s for s in samples if s["calls"] is not None]
achieved = ((calls[-1]["calls"] - calls[0]["calls"]) / (calls[-1]["t"] - calls[0]["t"])
            if len(calls) > 1 and calls[-1]["t"] > calls[0]["t"] else 0)
at_warmup = next((s["rss"] for s in samples if s["t"] >= warmup), rss[0])
ms = lambda key: f"{int(paced.get(key, 0)) / 1000:.2f}"
every = samples[1]["t"] - samples[0]["t"] if len(samples) > 1 else 0
print(f"""
soak of toolgate (full profile, spans over {env['SOAK_PROTOCOL_USED']}), {env['SOAK_DURATION']} s at {env['SOAK_RATE_USED']} requests/s \
({env['SOAK_PERCENT_USED']}% of saturated {env['SOAK_SATURATED']}), {conns} connections
load average {env['SOAK_LOADAVG']}

figure                          value
------------------------------------------------------------------------------""")
row = lambda label, value: print(f"{label:<32}{value}")
row("requests planned / sent", f"{planned} / {sent}")
row("requests 2xx / errors", f"{ok} / {errors}")
row("achieved rate (calls/s)", f"{achieved:.0f}")
row("latency p50 / p99 / max", f"{ms('p50_us')} / {ms('p99_us')} / {ms('max_us')} ms")
row(f"samples (after {warmup} s warm-up)", f"{len(samples)} ({len(after)}), every ~{every} s")
row("RSS at warm-up end", mib(at_warmup))
row("RSS median / min / max",
    f"{mib(median)} / {mib(min(rss))} / {mib(max(rss))} ({spread[0]:+.1%} / {spread[1]:+.1%})")
if len(after) >= 12:
    # RSS over the run in (up to) ten slices, each slice's median: a trend shows here.
    step = -(-len(after) // 10)
    slices = [statistics.median(rss[i:i + step]) for i in range(0, len(rss), step)]
    row("RSS by tenth of the run", " ".join(f"{v / 1024:.1f}" for v in slices) + " MiB")
row("RSS peak (VmHWM)", mib(int(env["SOAK_PEAK_RSS"] or 0)))
row("RSS idle before / after", " / ".join(mib(int(v)) for v in env["SOAK_IDLE_RSS"].split()))
for key, (start, end, lo, hi) in growth.items():
    row(f"{key} start / end / min / max", f"{start} / {end} / {lo} / {hi} (slack {slack[key]})")
row("audit call records (new)",
    f"{records} ({int(env['SOAK_AUDIT_BYTES']) / 2**20:.0f} MiB log)")
row("audit verify", env["SOAK_VERIFY_OUT"])
row("spans (sink) / dropped",
    f"{env['SOAK_SPANS'] or '-'} / {env['SOAK_SPANS_DROPPED'] or '-'}")
print()
if failures:
    print("FAIL\n  " + "\n  ".join(failures))
    sys.exit(1)
print("PASS: 0 errors, RSS within ±10% after warm-up, no growth in fds, threads or tasks,"
      " audit complete")
EOF
