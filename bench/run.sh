#!/usr/bin/env bash
# toolgate's load benchmark, one command: bench/run.sh
#
# Builds release binaries, starts on loopback a fast backend, nginx as a plain reverse
# proxy, a bare pass-through proxy on toolgate's own hyper stack (the floor), and
# toolgate minimal and full (and full's variants, knobs below), then drives each with
# the same wrk load (REST POST with a ~1 KiB JSON body, and MCP tools/call, at
# concurrency 16 and 64), interleaving targets and rounds so that machine noise hits
# them alike. Then an open-loop run at 1,000 requests/s per target for added latency
# (and the target's CPU and context switches per call there, where waking threads costs
# more than the work). Prints one table (median of rounds):
# requests/s, p50, p99, peak RSS and ratios against nginx, the bare proxy and the
# backend alone; the CPU per call of each target and of the backend, OTLP sink and wrk
# around it; and the targets, each ratio with the CPU per call it would allow.
#
# It installs wrk and nginx with apt-get when missing (it expects to run as root, as on
# the project's machines). Everything it starts listens on 127.0.0.1 and is stopped on
# exit. Whole run: about 10 minutes after the build. Knobs (environment):
#   BENCH_ROUNDS=3  BENCH_SECONDS=4  BENCH_PACED_RATE=1000  BENCH_PACED_SECONDS=5
#   BENCH_PACED_ROUNDS=3
#   BENCH_PORT_BASE=18800  BENCH_KEEP=1 (keep the work folder)  BENCH_NO_BUILD=1
#   BENCH_BEFORE=/path/to/an/older/toolgate: also run that binary with the full profile
#     ("full-before", and "minimal-before" with the minimal profile), side by side with
#     this one, to measure an optimization
#   BENCH_REDIS=0: leave out "full-redis", the full profile with its state on a local
#     redis-server (state.backend: redis; docs/state.md), measured with the others
#   BENCH_APPROVAL=0: leave out "full-approval", the full profile whose grants also carry
#     a human approval with a `when` that is false for every call of the load
#     (bench/policies/full-approval.yaml), so no call is held: what a false approval
#     condition costs
#   BENCH_SAMPLED=0: leave out "full-sampled", the full profile with trace sampling at
#     0.1 (sampler: parentbased_traceidratio; the load sends no traceparent, so about
#     one call in ten is sampled)
#   BENCH_JWT=0: leave out "full-jwt", the full profile whose agent presents a JWT
#     (identity.jwt, verified then cached) instead of the static token
#   BENCH_PERF=0: leave out the independent CPU count (perf stat's task-clock on each
#     target during each closed-loop run, printed beside the /proc figure)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh
root=$PWD
rounds=${BENCH_ROUNDS:-3}
seconds=${BENCH_SECONDS:-4}
paced_rate=${BENCH_PACED_RATE:-1000}
paced_seconds=${BENCH_PACED_SECONDS:-5}
paced_rounds=${BENCH_PACED_ROUNDS:-3}
base=${BENCH_PORT_BASE:-18800}

log() { printf '== %s\n' "$*" >&2; }

# --- tools ----------------------------------------------------------------------------
missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || missing+=(nginx)
with_redis=${BENCH_REDIS:-1}
with_approval=${BENCH_APPROVAL:-1}
with_sampled=${BENCH_SAMPLED:-1}
with_jwt=${BENCH_JWT:-1}
[ "$with_redis" = 0 ] || command -v redis-server >/dev/null || missing+=(redis-server)
if [ ${#missing[@]} -gt 0 ]; then
  log "installing ${missing[*]} (apt-get, as root)"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi
nginx_bin=$(command -v nginx || echo /usr/sbin/nginx)

if [ -z "${BENCH_NO_BUILD:-}" ]; then
  log "building release binaries (cargo build --release --bin toolgate --example benchkit)"
  cargo build --release --quiet --bin toolgate --example benchkit
fi
toolgate=$root/target/release/toolgate
kit=$root/target/release/examples/benchkit

# --- work folder and cleanup ----------------------------------------------------------
work=$(mktemp -d /tmp/toolgate-bench.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  [ -f "$work/nginx/nginx.pid" ] && kill "$(cat "$work/nginx/nginx.pid")" 2>/dev/null || true
  wait 2>/dev/null || true
  if [ -z "${BENCH_KEEP:-}" ]; then rm -rf "$work"; else log "kept $work"; fi
}
trap cleanup EXIT INT TERM

port_backend=$base
port_nginx=$((base + 1))
port_bare=$((base + 2))
port_minimal=$((base + 3))
port_full=$((base + 4))
port_otlp=$((base + 5))
# Each toolgate's admin listener is its port + 10: full-before 6 (16), full-approval
# 7 (17), full-redis 8 (18) and redis 9, full-sampled 10 (20), minimal-before 11 (21),
# full-jwt 12 (22).
port_full_approval=$((base + 7))
port_full_sampled=$((base + 10))
ports_free "$base" $((base + 22)) BENCH_PORT_BASE
port_full_jwt=$((base + 12))

# --- servers --------------------------------------------------------------------------
log "starting backend, nginx, bare proxy, OTLP sink, toolgate minimal and full in $work"
"$kit" backend --listen "127.0.0.1:$port_backend" >"$work/backend.log" 2>&1 &
pids+=($!)
pid_backend=$!
"$kit" bare-proxy --listen "127.0.0.1:$port_bare" --upstream "http://127.0.0.1:$port_backend" \
  >"$work/bare.log" 2>&1 &
pids+=($!)
pid_bare=$!
"$kit" otlp-sink --listen "127.0.0.1:$port_otlp" >"$work/otlp.log" 2>&1 &
pids+=($!)
pid_sink=$!

mkdir -p "$work/nginx"
cat >"$work/nginx/nginx.conf" <<EOF
# A plain reverse proxy, tuned as one would for a fair comparison: a worker per core,
# an upstream keep-alive pool, no access log.
worker_processes auto;
pid $work/nginx/nginx.pid;
error_log $work/nginx/error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  client_body_temp_path $work/nginx/body;
  proxy_temp_path $work/nginx/proxy;
  fastcgi_temp_path $work/nginx/fastcgi;
  uwsgi_temp_path $work/nginx/uwsgi;
  scgi_temp_path $work/nginx/scgi;
  upstream backend {
    server 127.0.0.1:$port_backend;
    keepalive 256;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:$port_nginx;
    keepalive_requests 1000000;
    client_body_buffer_size 64k;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
EOF
"$nginx_bin" -p "$work/nginx" -c "$work/nginx/nginx.conf" -e "$work/nginx/error.log"

static_identity="identity:
  tokens: $root/bench/tokens.yaml
  taskIssuers: [{issuer: orchestrator, jwks: $root/examples/keys/task-jwks.json}]"
start_toolgate() { # name port policies extra-yaml [binary] [identity-yaml]
  local name=$1 port=$2 binary=${5:-$toolgate} identity=${6:-$static_identity}
  mkdir -p "$work/$name"
  cat >"$work/$name/toolgate.yaml" <<EOF
listen: 127.0.0.1:$port
admin: 127.0.0.1:$((port + 10))
upstream: http://127.0.0.1:$port_backend
policies: {files: [$root/bench/policies/$3]}
$identity
$4
EOF
  TOOLGATE_LOG=warn "$binary" run --config "$work/$name/toolgate.yaml" >"$work/$name.log" 2>&1 &
  pids+=($!)
}
start_toolgate minimal "$port_minimal" minimal.yaml "audit: {path: 'off'}"
pid_minimal=${pids[-1]}
start_toolgate full "$port_full" full.yaml "audit: {path: $work/full/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-bench}"
pid_full=${pids[-1]}
for p in $port_backend $port_nginx $port_bare $port_minimal $port_full $port_otlp; do wait_port "$p"; done
port_before=$((base + 6))
port_minimal_before=$((base + 11))
if [ -n "${BENCH_BEFORE:-}" ]; then
  start_toolgate full-before "$port_before" full.yaml "audit: {path: $work/full-before/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-bench-before}" "$BENCH_BEFORE"
  pid_before=${pids[-1]}
  wait_port "$port_before"
  start_toolgate minimal-before "$port_minimal_before" minimal.yaml "audit: {path: 'off'}" "$BENCH_BEFORE"
  pid_minimal_before=${pids[-1]}
  wait_port "$port_minimal_before"
fi

port_redis=$((base + 9))
port_full_redis=$((base + 8))
if [ "$with_redis" != 0 ]; then
  redis-server --port "$port_redis" --bind 127.0.0.1 --save '' --appendonly no \
    --dir "$work" >"$work/redis.log" 2>&1 &
  pids+=($!)
  wait_port "$port_redis"
  start_toolgate full-redis "$port_full_redis" full.yaml "audit: {path: $work/full-redis/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-bench-redis}
state: {backend: redis, redis: {url: 'redis://127.0.0.1:$port_redis/0'}}"
  pid_full_redis=${pids[-1]}
  wait_port "$port_full_redis"
fi
if [ "$with_approval" != 0 ]; then
  # No approvers in the settings: the sidecar starts without them, and nothing is held.
  start_toolgate full-approval "$port_full_approval" full-approval.yaml "audit: {path: $work/full-approval/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-bench-approval}"
  pid_full_approval=${pids[-1]}
  wait_port "$port_full_approval"
fi
if [ "$with_jwt" != 0 ]; then
  # The same agent, identified by a JWT from the `agents` issuer (benchkit agent-token)
  # and no token file: what verifying (then caching) an agent's token costs.
  start_toolgate full-jwt "$port_full_jwt" full.yaml "audit: {path: $work/full-jwt/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-bench-jwt}" "" "identity:
  jwt: [{issuer: agents, audience: toolgate-bench, jwks: $root/examples/keys/task-jwks.json}]
  taskIssuers: [{issuer: orchestrator, jwks: $root/examples/keys/task-jwks.json}]"
  pid_full_jwt=${pids[-1]}
  wait_port "$port_full_jwt"
fi
if [ "$with_sampled" != 0 ]; then
  start_toolgate full-sampled "$port_full_sampled" full.yaml "audit: {path: $work/full-sampled/audit.log}
telemetry: {otlpEndpoint: 'http://127.0.0.1:$port_otlp', serviceName: toolgate-bench-sampled, sampler: parentbased_traceidratio, samplerRatio: 0.1}"
  pid_full_sampled=${pids[-1]}
  wait_port "$port_full_sampled"
fi

export BENCH_DIR=$root/bench BENCH_BODY=$root/bench/body.json
BENCH_TASK=$("$kit" task-token --agent bench-bot)
export BENCH_TASK
agent_jwt=$("$kit" agent-token --agent bench-bot)
auth() { # target: its Authorization header's value
  if [ "$1" = full-jwt ]; then echo "Bearer $agent_jwt"; else echo "Bearer bench-token"; fi
}

declare -A port=([direct]=$port_backend [nginx]=$port_nginx [bare]=$port_bare
  [minimal]=$port_minimal [full]=$port_full [full-before]=$port_before
  [minimal-before]=$port_minimal_before [full-jwt]=$port_full_jwt
  [full-redis]=$port_full_redis [full-approval]=$port_full_approval
  [full-sampled]=$port_full_sampled)
targets=(direct nginx bare minimal full)
[ -n "${BENCH_BEFORE:-}" ] && targets+=(full-before minimal-before)
[ "$with_redis" != 0 ] && targets+=(full-redis)
[ "$with_approval" != 0 ] && targets+=(full-approval)
[ "$with_sampled" != 0 ] && targets+=(full-sampled)
[ "$with_jwt" != 0 ] && targets+=(full-jwt)

# --- sanity: every target answers both loads with a real, allowed result ---------------
check() { # target
  local url="http://127.0.0.1:${port[$1]}" out
  out=$(curl -sS -D - -o "$work/check.body" -H 'Content-Type: application/json' \
    -H "Authorization: $(auth "$1")" -H "X-Toolgate-Task: $BENCH_TASK" \
    --data-binary "@$BENCH_BODY" "$url/search")
  grep -q '^HTTP/1.1 200' <<<"$out" && grep -q '"ok":true' "$work/check.body" || {
    echo "$1: the REST call was not answered: $out $(cat "$work/check.body")" >&2
    exit 1
  }
  local args
  args=$(sed 's/}[[:space:]]*$//' "$BENCH_BODY")
  curl -sS -o "$work/check.body" -H 'Content-Type: application/json' \
    -H 'Accept: application/json, text/event-stream' \
    -H "Authorization: $(auth "$1")" -H "X-Toolgate-Task: $BENCH_TASK" \
    --data-binary "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"tools/call\",\"params\":{\"name\":\"mcp_search_logs\",\"arguments\":$args,\"cursor\":\"check\"}}}" \
    "$url/mcp"
  grep -q '"isError":false' "$work/check.body" || {
    echo "$1: the MCP call was not answered: $(cat "$work/check.body")" >&2
    exit 1
  }
}
for t in "${targets[@]}"; do check "$t"; done

rss_kib() { # pid [field]: the process's (and, for nginx, its workers') memory
  local field=${2:-VmRSS} total=0 p
  for p in $1 $(pgrep -P "$1" || true); do
    total=$((total + $(awk -v f="$field:" '$1 == f {print $2}' "/proc/$p/status" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
declare -A pid=([direct]=$pid_backend [nginx]=$(cat "$work/nginx/nginx.pid") [bare]=$pid_bare
  [minimal]=$pid_minimal [full]=$pid_full [full-before]=${pid_before:-0}
  [minimal-before]=${pid_minimal_before:-0} [full-jwt]=${pid_full_jwt:-0}
  [full-redis]=${pid_full_redis:-0} [full-approval]=${pid_full_approval:-0}
  [full-sampled]=${pid_full_sampled:-0})
results=$work/results.tsv
: >"$results"
for t in "${targets[@]}"; do
  printf 'idle\t%s\t%s\n' "$t" "$(rss_kib "${pid[$t]}")" >>"$results"
done

run_wrk() { # target load conc seconds -> RESULT line
  local script=$BENCH_DIR/wrk/$2.lua
  BENCH_AUTH=$(auth "$1") wrk -t1 -c"$3" -d"${4}s" -s "$script" "http://127.0.0.1:${port[$1]}" |
    grep '^RESULT' || true
}

# CPU time, so the table can say where a saturated box's two cores went per call.
clk_tck=$(getconf CLK_TCK)
tree() { echo "$1" $(pgrep -P "$1" || true); } # pid: it and its children (nginx's workers)
cpu_ticks() { # pid: user + system clock ticks of a process tree
  local total=0 p
  for p in $(tree "$1"); do
    # Fields after the command name, which is in parentheses and may hold spaces.
    total=$((total + $(sed 's/.*) //' "/proc/$p/stat" 2>/dev/null | awk '{t += $12 + $13} END {print t + 0}')))
  done
  echo "$total"
}
switches() { # pid: voluntary context switches of a process tree's live threads
  local total=0 p
  for p in $(tree "$1"); do
    total=$((total + $(cat /proc/"$p"/task/*/status 2>/dev/null |
      awk '/^voluntary_ctxt_switches/ {s += $2} END {print s + 0}')))
  done
  echo "$total"
}
cpu_snapshot() { # target -> $snapshot: "target backend sink wrk"
  # wrk's CPU is this shell's finished children's, which `times` must report from this
  # shell: in a $(…) subshell it would start from zero.
  times >"$work/times"
  snapshot="$(cpu_ticks "${pid[$1]}") $(cpu_ticks "$pid_backend") $(cpu_ticks "$pid_sink")"
  snapshot+=" $(tail -1 "$work/times" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60000 + a[2] * 1000 } printf "%d", t }')"
}
cpu_fields() { # before after -> key=value fields for the results line
  local -a a=($1) b=($2)
  echo "clk_tck=$clk_tck cpu_target_ticks=$((b[0] - a[0])) cpu_backend_ticks=$((b[1] - a[1]))" \
    "cpu_sink_ticks=$((b[2] - a[2])) cpu_wrk_ms=$((b[3] - a[3]))"
}

# An independent count of the target's CPU (issue 49): perf's task-clock, attached to the
# target's process tree for exactly the wrk run, beside the /proc ticks above. The two
# agreeing is what lets the tables' CPU per call be trusted; BENCH_PERF=0 leaves it out.
with_perf=${BENCH_PERF:-1}
if [ "$with_perf" != 0 ] && ! perf stat -x, -e task-clock true >/dev/null 2>&1; then
  log "perf stat is not available here: no independent CPU count"
  with_perf=0
fi
perf_start() { # target: perf stat on its process tree, in the background
  [ "$with_perf" != 0 ] || return 0
  perf stat -x, -e task-clock -p "$(tree "${pid[$1]}" | tr ' ' ',')" -o "$work/perf.out" &
  perf_pid=$!
  sleep 0.05 # perf attaches before the load starts
}
perf_stop() { # -> $perf_field: " perf_target_ms=N" (the target's task-clock), or nothing
  perf_field=
  [ "$with_perf" != 0 ] || return 0
  # Not in a $(…) subshell: only this shell can wait for perf to write its count.
  kill -INT "$perf_pid" 2>/dev/null || true
  wait "$perf_pid" 2>/dev/null || true
  perf_field=$(awk -F, '$3 == "task-clock" { printf " perf_target_ms=%.1f", $1 }' "$work/perf.out")
}

load_averages() { cut -d' ' -f1-3 /proc/loadavg; }
log "load average before: $(load_averages) (nproc $(nproc))"
printf 'loadavg_before\t%s\n' "$(load_averages)" >>"$results"

# --- closed-loop load: wrk, interleaved ------------------------------------------------
for load in rest mcp; do
  for conc in 16 64; do
    log "warm-up: $load c=$conc"
    for t in "${targets[@]}"; do run_wrk "$t" "$load" "$conc" 1 >/dev/null; done
  done
done
# The targets in the order of round $1: rotated each round, so no target always runs
# first or right after another.
rotate() {
  local by=$(($1 % ${#targets[@]}))
  order=("${targets[@]:$by}" "${targets[@]:0:$by}")
}
for round in $(seq "$rounds"); do
  rotate "$round"
  for load in rest mcp; do
    for conc in 16 64; do
      for t in "${order[@]}"; do
        cpu_snapshot "$t"
        before=$snapshot
        perf_start "$t"
        line=$(run_wrk "$t" "$load" "$conc" "$seconds")
        cpu_snapshot "$t"
        perf_stop
        cpu="$(cpu_fields "$before" "$snapshot")$perf_field"
        log "round $round $load c=$conc $t: ${line#RESULT } $cpu"
        printf 'wrk\t%s\t%s\t%s\t%s\t%s %s\n' "$t" "$load" "$conc" "$round" "${line#RESULT }" "$cpu" >>"$results"
      done
    done
  done
done

# --- open-loop load at a fixed rate: added latency --------------------------------------
admit_timing() { # full-redis's admission round trips so far: "seconds count"
  { curl -sS --max-time 2 "http://127.0.0.1:$((port_full_redis + 10))/metrics" || true; } |
    awk '/^toolgate_state_duration_seconds_sum\{.*op="admit"/ { s = $NF }
      /^toolgate_state_duration_seconds_count\{.*op="admit"/ { c = $NF }
      END { printf "%s %d\n", (s == "" ? 0 : s), c }'
}
# Three rounds by default, so the median is one run's and a single outlier can't move it.
for round in $(seq "$paced_rounds"); do
  rotate "$round"
  for t in "${order[@]}"; do
    # At this rate the box is mostly idle: what a call costs there is its own work plus
    # the threads it wakes, so the target's CPU and context switches are counted too.
    ticks0=$(cpu_ticks "${pid[$t]}") switches0=$(switches "${pid[$t]}")
    [ "$t" = full-redis ] && admit0=$(admit_timing)
    line=$("$kit" paced --url "http://127.0.0.1:${port[$t]}/search" --rate "$paced_rate" \
      --seconds "$paced_seconds" --connections 16 --body-file "$BENCH_BODY" \
      --header 'Content-Type: application/json' --header "Authorization: $(auth "$t")" \
      --header "X-Toolgate-Task: $BENCH_TASK")
    line+=" clk_tck=$clk_tck cpu_target_ticks=$(($(cpu_ticks "${pid[$t]}") - ticks0))"
    line+=" switches=$(($(switches "${pid[$t]}") - switches0))"
    if [ "$t" = full-redis ]; then
      # The admission round trip as the sidecar's own Redis client makes it, over the
      # same calls: the sum and count of toolgate_state_duration_seconds{op="admit"}.
      read -r sum0 count0 <<<"$admit0"
      read -r sum1 count1 <<<"$(admit_timing)"
      line+=" admit_seconds=$(awk -v a="$sum0" -v b="$sum1" 'BEGIN { printf "%.6f", b - a }')"
      line+=" admit_count=$((count1 - count0))"
    fi
    log "paced round $round $t: $line"
    printf 'paced\t%s\t%s\t%s\n' "$t" "$round" "$line" >>"$results"
  done
done

for t in "${targets[@]}"; do
  printf 'peak\t%s\t%s\n' "$t" "$(rss_kib "${pid[$t]}" VmHWM)" >>"$results"
  printf 'after\t%s\t%s\n' "$t" "$(rss_kib "${pid[$t]}")" >>"$results"
done
printf 'loadavg_after\t%s\n' "$(load_averages)" >>"$results"
printf 'cores\t%s\n' "$(nproc)" >>"$results"
printf 'machine\t%s cores, %s\n' "$(nproc)" "$(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo)" >>"$results"
[ -f "$work/full/audit.log" ] && printf 'audit_records\t%s\n' "$(wc -l <"$work/full/audit.log")" >>"$results"
printf 'spans\t%s\n' "$(tail -1 "$work/otlp.log" 2>/dev/null)" >>"$results"
if [ "$with_redis" != 0 ]; then
  # One Redis round trip from a single client: a PING, and the admission script itself
  # (src/state/admit.lua, which full-redis loaded) with both rate limits and a session,
  # for "full-redis stays within one round trip of full".
  p50() { tr '\r' '\n' | grep -o 'p50=[0-9.]*' | tail -1 | cut -d= -f2; }
  printf 'redis_rtt\t%s\n' "$(redis-benchmark -q -p "$port_redis" -c 1 -n 20000 -t ping 2>/dev/null | p50)" >>"$results"
  sha=$(redis-cli -p "$port_redis" -x script load <"$root/src/state/admit.lua")
  printf 'redis_admit_rtt\t%s\n' "$(redis-benchmark -q -p "$port_redis" -c 1 -n 20000 \
    EVALSHA "$sha" 4 '{b}:t' '{b}:a' '{b}:s' '{b}:c' 1000 1000000 1000 1000000 -1 -1 3600000 fp 0 '' 0 \
    2>/dev/null | p50)" >>"$results"
  # The same script through toolgate's own Redis client on Tokio, idle (benchkit redis-rtt).
  printf 'redis_admit_rtt_stack\t%s\n' "$("$kit" redis-rtt --url "redis://127.0.0.1:$port_redis/" -- \
    EVALSHA "$sha" 4 '{b}:t' '{b}:a' '{b}:s' '{b}:c' 1000 1000000 1000 1000000 -1 -1 3600000 fp 0 '' 0 \
    2>/dev/null | p50)" >>"$results"
fi

python3 "$root/bench/table.py" "$results"
