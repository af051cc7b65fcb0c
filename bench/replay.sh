#!/usr/bin/env bash
# toolgate replay's benchmark (issue 23), one command: bench/replay.sh
#
# Builds release binaries, writes a chained audit log of 1,000,000 call records for
# examples/policies (examples/audit_log.rs) into a work folder, then times
# `toolgate replay --audit LOG --policies ... --format json` against two candidates, each
# BENCH_REPLAY_ROUNDS times:
#   unchanged  examples/policies as they are: every decision stands (exit 0, 0 changed);
#   tightened  a copy whose create_issue rule also refuses project_key OPS (exit 1, the
#              OPS issues changed from allow to deny).
# Any other exit status or count fails the run. Prints, per candidate, the median wall
# seconds, records per second at that median and the largest peak resident memory of the
# replay process (/usr/bin/time; without it, VmHWM read from /proc while it runs), and
# the log's size, how long writing it took and how long `toolgate audit verify` (the
# chain alone) takes on it, to tell hashing from re-deciding. The target: under 30 s for
# a million records, memory independent of the log's length (compare two lengths by
# running it with BENCH_REPLAY_RECORDS=200000).
#
# The log is ~620 MB at a million records; the work folder is removed on exit. Knobs
# (environment):
#   BENCH_REPLAY_RECORDS=1000000  BENCH_REPLAY_ROUNDS=3  BENCH_NO_BUILD=1
#   BENCH_KEEP=1 (keep the work folder)  TMPDIR (where the work folder goes)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
records=${BENCH_REPLAY_RECORDS:-1000000}
rounds=${BENCH_REPLAY_ROUNDS:-3}

log() { printf '== %s\n' "$*" >&2; }
fail() { printf 'FAIL: %s\n' "$*" >&2; exit 1; }

if [ -z "${BENCH_NO_BUILD:-}" ]; then
  log "building release binaries (cargo build --release --bin toolgate --example audit_log)"
  cargo build --release --quiet --bin toolgate --example audit_log
fi
toolgate=$root/target/release/toolgate
generator=$root/target/release/examples/audit_log
[ -x "$toolgate" ] && [ -x "$generator" ] || fail "no release binaries: run without BENCH_NO_BUILD"

# --- work folder and cleanup ----------------------------------------------------------
work=$(mktemp -d "${TMPDIR:-/tmp}/toolgate-replay.XXXXXX")
cleanup() {
  if [ -z "${BENCH_KEEP:-}" ]; then rm -rf "$work"; else log "kept $work"; fi
}
trap cleanup EXIT INT TERM

# measure OUT CMD...: runs CMD with stdout to OUT; prints "STATUS SECONDS PEAK_KIB"
# (PEAK_KIB is "-" when it couldn't be measured).
if [ -x /usr/bin/time ]; then
  measure() {
    local out=$1 status=0
    shift
    /usr/bin/time -f '%e %M' -o "$work/time" "$@" >"$out" 2>"$work/stderr" || status=$?
    # GNU time writes "Command exited with non-zero status N" first when it isn't 0.
    echo "$status $(tail -n 1 "$work/time")"
  }
else
  measure() {
    local out=$1 status=0 peak=- start end pid hwm
    shift
    start=$(date +%s.%N)
    "$@" >"$out" 2>"$work/stderr" &
    pid=$!
    # VmHWM only grows; the last reading before the exit is the peak but for what the
    # process added in its last 20 ms.
    while hwm=$(awk '/^VmHWM:/ {print $2}' "/proc/$pid/status" 2>/dev/null) && [ -n "$hwm" ]; do
      peak=$hwm
      sleep 0.02
    done
    wait "$pid" || status=$?
    end=$(date +%s.%N)
    echo "$status $(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}') $peak"
  }
fi

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
largest() { sort -g | tail -n 1; }

# --- the log ----------------------------------------------------------------------------
log "writing $records call records ($work/audit.log)"
read -r status gen_seconds _ < <(measure "$work/gen.out" "$generator" --records "$records" --out "$work/audit.log")
[ "$status" = 0 ] || fail "the generator exited $status: $(cat "$work/stderr")"
bytes=$(stat -c %s "$work/audit.log")
lines=$(wc -l <"$work/audit.log")
[ "$lines" = $((records + 2)) ] || fail "the log has $lines lines, not $((records + 2))"
read -r status verify_seconds verify_kib < <(measure "$work/verify.out" "$toolgate" audit verify "$work/audit.log")
[ "$status" = 0 ] || fail "audit verify exited $status: $(cat "$work/verify.out")"

# --- the candidates ---------------------------------------------------------------------
cp -r "$root/examples/policies" "$work/tightened"
sed -i "s/expr: \"args.project_key != 'SEC'\"/expr: \"args.project_key != 'SEC' \&\& args.project_key != 'OPS'\"/" \
  "$work/tightened/agents.yaml"
grep -q "args.project_key != 'OPS'" "$work/tightened/agents.yaml" \
  || fail "examples/policies/agents.yaml changed: the tightened candidate's edit no longer applies"

# check NAME OUT STATUS: the replay's exit status and counts are the candidate's.
check() {
  local name=$1 out=$2 status=$3 counts
  counts=$(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print(r["replayed"]+r["skipped"], r["changed"])' "$out") \
    || fail "$name: the replay's output is not its JSON report: $(head -c 300 "$out") $(cat "$work/stderr")"
  read -r seen changed <<<"$counts"
  [ "$seen" = $((records + 2)) ] || fail "$name: replay saw $seen records, not $((records + 2))"
  case $name in
    unchanged) [ "$status" = 0 ] && [ "$changed" = 0 ] \
      || fail "unchanged: exit $status, $changed changed (expected exit 0, 0 changed): $(cat "$work/stderr")" ;;
    tightened) [ "$status" = 1 ] && [ "$changed" -gt 0 ] \
      || fail "tightened: exit $status, $changed changed (expected exit 1, some changed): $(cat "$work/stderr")" ;;
  esac
  echo "$changed"
}

declare -A seconds peak changed
for round in $(seq "$rounds"); do
  # Interleaved, so that a busy moment on the machine hits both candidates alike.
  for name in unchanged tightened; do
    policies=$root/examples/policies
    [ "$name" = tightened ] && policies=$work/tightened
    log "round $round/$rounds: replay against the $name candidate"
    read -r status wall kib < <(measure "$work/$name.json" "$toolgate" replay \
      --audit "$work/audit.log" --policies "$policies" --format json)
    changed[$name]=$(check "$name" "$work/$name.json" "$status")
    seconds[$name]+="$wall "
    peak[$name]+="$kib "
  done
done

# --- the results ------------------------------------------------------------------------
printf '\nreplay of %s call records (%s lines), log %s MB (%s bytes), %s rounds\n' \
  "$records" "$lines" "$(awk -v b="$bytes" 'BEGIN {printf "%.1f", b / 1e6}')" "$bytes" "$rounds"
printf 'load average now: %s\n' "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '  writing the log (examples/audit_log): %s s\n' "$gen_seconds"
printf '  audit verify (the chain alone):       %s s, peak RSS %s KiB\n' "$verify_seconds" "$verify_kib"
# The target is 30 s for a million records: at other lengths, the same rate.
printf '%-10s %8s %24s %10s %12s %22s\n' candidate changed "wall s (median; rounds)" records/s "peak RSS MB" "met (30 s per 1M)"
for name in unchanged tightened; do
  med=$(tr ' ' '\n' <<<"${seconds[$name]}" | grep . | median)
  top=$(tr ' ' '\n' <<<"${peak[$name]}" | grep . | largest)
  printf '%-10s %8s %24s %10s %12s %22s\n' "$name" "${changed[$name]}" "$med (${seconds[$name]% })" \
    "$(awk -v n="$records" -v s="$med" 'BEGIN {printf "%.0f", n / s}')" \
    "$(awk -v k="$top" 'BEGIN {if (k == "-") print "-"; else printf "%.1f", k / 1024}')" \
    "$(awk -v n="$records" -v s="$med" 'BEGIN {print (s * 1e6 < 30 * n) ? "yes" : "no"}')"
done
