#!/usr/bin/env bash
# Where a loaded sidecar spends its CPU, one command: bench/profile.sh [minimal|full|full-jwt] [rest|mcp]
#
# Starts on loopback the load benchmark's backend and OTLP sink and one toolgate with
# bench/policies/{profile}.yaml (full: audit to a file, spans to the sink, as
# bench/run.sh runs it; full-jwt: full with the agent identified by a JWT, verified then
# cached, as run.sh's full-jwt target), drives it with wrk at c=64 and samples the sidecar alone with
# `perf record -e cpu-clock` (a software clock: these machines have no hardware
# counters). Prints two tables: the share of samples per component (kernel, allocator,
# each crate family, toolgate's own code) and the top symbols. Release binaries carry
# their symbol names, so no special build is needed.
#
# Knobs (environment): PROFILE_SECONDS=10  PROFILE_CONNECTIONS=64  PROFILE_TOP=40
#   PROFILE_PORT_BASE=18900  PROFILE_BINARY=target/release/toolgate  PROFILE_NO_BUILD=1
#   PROFILE_KEEP=1 (keep the work folder with perf.data)
#   PROFILE_CALLGRAPH=dwarf (also each toolgate function with its callees: the stages)
#   PROFILE_ENV="NAME=value ..." (toolgate's extra environment, e.g. an allocator option)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
root=$PWD
profile=${1:-full}
load=${2:-rest}
seconds=${PROFILE_SECONDS:-10}
connections=${PROFILE_CONNECTIONS:-64}
top=${PROFILE_TOP:-40}
base=${PROFILE_PORT_BASE:-18900}
case $profile in minimal | full | full-jwt) ;; *) echo "profile: minimal, full or full-jwt" >&2; exit 2 ;; esac
policies=${profile%-jwt}
case $load in rest | mcp) ;; *) echo "load: rest or mcp" >&2; exit 2 ;; esac
command -v perf >/dev/null || { echo "perf is missing (apt-get install linux-perf)" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install wrk)" >&2; exit 1; }

if [ -z "${PROFILE_NO_BUILD:-}" ]; then
  cargo build --release --quiet --bin toolgate --example benchkit
fi
toolgate=${PROFILE_BINARY:-$root/target/release/toolgate}
kit=$root/target/release/examples/benchkit

work=$(mktemp -d /tmp/toolgate-profile.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  if [ -z "${PROFILE_KEEP:-}" ]; then rm -rf "$work"; else echo "kept $work" >&2; fi
}
trap cleanup EXIT INT TERM

port_backend=$base port_otlp=$((base + 1)) port_sidecar=$((base + 2))
ports_free "$base" $((base + 12)) PROFILE_PORT_BASE
"$kit" backend --listen "127.0.0.1:$port_backend" >"$work/backend.log" 2>&1 &
pids+=($!)
"$kit" otlp-sink --listen "127.0.0.1:$port_otlp" >"$work/otlp.log" 2>&1 &
pids+=($!)
extra="audit: {path: 'off'}"
# full-jwt's agent presents a JWT and there is no token file, as in bench/run.sh.
credentials="tokens: $root/bench/tokens.yaml"
[ "$profile" = full-jwt ] &&
  credentials="jwt: [{issuer: agents, audience: toolgate-bench, jwks: $root/examples/keys/task-jwks.json}]"
if [ "$policies" = full ]; then
  extra="audit: {path: $work/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-profile}"
fi
cat >"$work/toolgate.yaml" <<EOF
listen: 127.0.0.1:$port_sidecar
admin: 127.0.0.1:$((port_sidecar + 10))
upstream: http://127.0.0.1:$port_backend
policies: {files: [$root/bench/policies/$policies.yaml]}
identity:
  taskIssuers: [{issuer: orchestrator, jwks: $root/examples/keys/task-jwks.json}]
  $credentials
$extra
EOF
# shellcheck disable=SC2086
TOOLGATE_LOG=warn env ${PROFILE_ENV:-} "$toolgate" run --config "$work/toolgate.yaml" \
  >"$work/toolgate.log" 2>&1 &
pids+=($!)
sidecar=$!
for p in $port_backend $port_otlp $port_sidecar; do wait_port "$p"; done

export BENCH_DIR=$root/bench BENCH_BODY=$root/bench/body.json
BENCH_TASK=$("$kit" task-token --agent bench-bot)
export BENCH_TASK
if [ "$profile" = full-jwt ]; then
  BENCH_AUTH="Bearer $("$kit" agent-token --agent bench-bot)"
  export BENCH_AUTH
fi
url="http://127.0.0.1:$port_sidecar"
# A short warm-up, so that the profile shows the steady state, not the first calls.
wrk -t1 -c"$connections" -d2s -s "bench/wrk/$load.lua" "$url" >/dev/null
# The sidecar's CPU time (user + system, clock ticks) from /proc, around the load.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$sidecar/stat"; }
ticks_before=$(cpu_ticks)
wrk -t1 -c"$connections" -d"${seconds}s" -s "bench/wrk/$load.lua" "$url" >"$work/wrk.txt" &
load_pid=$!
perf record -q -e cpu-clock -F "${PROFILE_FREQUENCY:-1999}" ${PROFILE_CALLGRAPH:+--call-graph "$PROFILE_CALLGRAPH"} -p "$sidecar" -o "$work/perf.data" -- sleep "$((seconds - 1))" \
  2>"$work/perf.log"
wait "$load_pid"
ticks_after=$(cpu_ticks)
requests=$(sed -n 's/.*RESULT requests=\([0-9]*\).*/\1/p' "$work/wrk.txt")
grep RESULT "$work/wrk.txt" >&2
# CPU per call includes perf's own sampling overhead: compare builds with this script,
# not with bench/run.sh's figures.
awk -v t=$((ticks_after - ticks_before)) -v hz="$(getconf CLK_TCK)" -v n="$requests" \
  'BEGIN { printf "sidecar CPU per call: %.1f us (%d requests)\n", t / hz * 1e6 / n, n }' >&2
awk '/^VmRSS|^VmHWM/ { printf "%s %.1f MB  ", $1, $2 / 1024 } END { print "" }' \
  "/proc/$sidecar/status" >&2

perf report -i "$work/perf.data" --no-children --sort dso,sym --stdio 2>/dev/null |
  grep -E '^ +[0-9]' >"$work/symbols.txt"
python3 - "$work/symbols.txt" "$top" <<'EOF'
import re, sys
rows = []
for line in open(sys.argv[1]):
    m = re.match(r"\s*([\d.]+)%\s+(\S+)\s+\[(.)\]\s+(.*)", line)
    if m:
        rows.append((float(m.group(1)), m.group(2), m.group(3), m.group(4).strip()))
# Components, first match wins: the crate a symbol's path names, else where it lives.
families = [
    ("kernel", lambda d, s, k: k == "k"),
    ("allocator (mimalloc, memcpy)", lambda d, s, k: s.startswith(("mi_", "_mi_")) or "memcpy" in s or "memmove" in s or "memset" in s),
    ("libc", lambda d, s, k: d.startswith("libc")),
    ("opentelemetry / prost (spans)", lambda d, s, k: re.search(r"opentelemetry|prost|tonic", s)),
    ("cel", lambda d, s, k: re.search(r"\bcel\b|cel::|cel_", s)),
    ("jsonschema / regex", lambda d, s, k: re.search(r"jsonschema|regex|fancy_regex", s)),
    ("serde_json", lambda d, s, k: "serde_json" in s),
    ("hyper / h2 / http", lambda d, s, k: re.search(r"\bhyper|httparse|\bhttp::|h2::", s)),
    ("tokio / futures", lambda d, s, k: re.search(r"tokio|futures|mio::", s)),
    ("sha2 / hmac / crypto", lambda d, s, k: re.search(r"sha2|hmac|sha256|ring::|jsonwebtoken|base64", s, re.I)),
    ("tracing", lambda d, s, k: re.search(r"tracing", s)),
    ("toolgate", lambda d, s, k: "toolgate" in s),
    ("std / alloc / core", lambda d, s, k: re.search(r"\b(std|alloc|core)::", s)),
]
share = {}
for pct, dso, kind, sym in rows:
    for name, test in families:
        if test(dso, sym, kind):
            share[name] = share.get(name, 0) + pct
            break
    else:
        share["other"] = share.get("other", 0) + pct
print("\n| component | share of samples |\n|---|---:|")
for name, pct in sorted(share.items(), key=lambda kv: -kv[1]):
    print(f"| {name} | {pct:.1f}% |")
print("\n| share | symbol |\n|---:|---|")
for pct, dso, kind, sym in rows[: int(sys.argv[2])]:
    print(f"| {pct:.2f}% | {sym[:110]} |")
EOF
# With call graphs (PROFILE_CALLGRAPH=dwarf), toolgate's functions by the share of
# samples in them and what they call: its stages, natively (bench/stages.sh counts
# them under callgrind, which runs SHA-256 without the CPU's SHA instructions).
if [ -n "${PROFILE_CALLGRAPH:-}" ]; then
  echo
  echo "| share with callees | toolgate function |"
  echo "|---:|---|"
  perf report -i "$work/perf.data" --children --sort sym --stdio 2>/dev/null |
    sed -n 's/^ *\([0-9.]*%\) *[0-9.]*% *\[.\] \(toolgate::.*\)/| \1 | \2 |/p' | head -"$top"
fi
