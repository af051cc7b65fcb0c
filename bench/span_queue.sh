#!/usr/bin/env bash
# Peak resident memory of full toolgate under a saturated REST load, by the span queue's
# bound (telemetry.maxQueuedSpans): how much of the peak is spans waiting for export.
#
# Starts on loopback bench/run.sh's backend and OTLP sink, then for each bound in
# SPAN_QUEUES runs toolgate with bench/policies/full.yaml, drives it with wrk (REST, c=64)
# for SPAN_SECONDS, and prints its peak and final RSS and the spans it dropped. Needs the
# release binaries (cargo build --release --bin toolgate --example benchkit) and wrk.
# Knobs: SPAN_QUEUES="4096 512 4096 512"  SPAN_SECONDS=12  SPAN_PORT_BASE=19500
#   TOOLGATE=/path/to/another/toolgate (compare a build)  SPAN_ENV="NAME=value ..." (its environment)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
kit=$root/target/release/examples/benchkit
toolgate=${TOOLGATE:-$root/target/release/toolgate}
base=${SPAN_PORT_BASE:-19500}
work=$(mktemp -d /tmp/toolgate-spans.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT INT TERM
"$kit" backend --listen "127.0.0.1:$base" >"$work/backend.log" 2>&1 &
pids+=($!)
"$kit" otlp-sink --listen "127.0.0.1:$((base + 5))" >"$work/sink.log" 2>&1 &
pids+=($!)
sleep 1
export BENCH_DIR=$root/bench BENCH_BODY=$root/bench/body.json
BENCH_TASK=$("$kit" task-token --agent bench-bot)
export BENCH_TASK
for queue in ${SPAN_QUEUES:-4096 512 4096 512}; do
  cat >"$work/toolgate.yaml" <<EOT
listen: 127.0.0.1:$((base + 1))
admin: 127.0.0.1:$((base + 11))
upstream: http://127.0.0.1:$base
policies: {files: [$root/bench/policies/full.yaml]}
identity:
  tokens: $root/bench/tokens.yaml
  taskIssuers: [{issuer: orchestrator, jwks: $root/examples/keys/task-jwks.json}]
audit: {path: $work/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$((base + 5))', serviceName: span-queue, maxQueuedSpans: $queue}
EOT
  rm -f "$work/audit.log"
  # SPAN_ENV: extra environment for toolgate (e.g. an allocator option).
  # shellcheck disable=SC2086
  TOOLGATE_LOG=warn env ${SPAN_ENV:-} "$toolgate" run --config "$work/toolgate.yaml" >"$work/toolgate.log" 2>&1 &
  pid=$!
  sleep 1
  result=$(wrk -t1 -c64 -d"${SPAN_SECONDS:-12}s" -s "$root/bench/wrk/rest.lua" "http://127.0.0.1:$((base + 1))" | grep '^RESULT' || true)
  peak=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  rss=$(awk '/VmRSS/ {print $2}' "/proc/$pid/status")
  dropped=$(curl -s "127.0.0.1:$((base + 11))/metrics" | awk '/^toolgate_spans_dropped_total/ {print $2}')
  requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$result")
  printf 'maxQueuedSpans %5s: peak %3d MB, after %3d MB, spans dropped %s, requests %s\n' \
    "$queue" $((peak / 1024)) $((rss / 1024)) "${dropped:-?}" "${requests:-?}"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
done
tail -1 "$work/sink.log"
