#!/usr/bin/env bash
# Runs every cargo-fuzz target (or those named) for 10 million executions each, then
# minimizes its corpus into fuzz/corpus/<target>/ and prints the executions per target.
#
#   fuzz/run.sh                      # all six targets, one after the other
#   fuzz/run.sh sse jsonrpc          # just these
#   FUZZ_SECONDS=900 fuzz/run.sh manifest   # stop a slow target after 15 minutes
#   FUZZ_NO_BUILD=1 fuzz/run.sh      # reuse the fuzzer binaries already built
#
# Needs the nightly toolchain (libFuzzer's instrumentation); the rest of the project
# builds on stable. Logs go to fuzz/logs/<target>.log, new inputs to the git-ignored
# fuzz/corpus-work/<target>/ until the minimized set replaces fuzz/corpus/<target>/. Crashing inputs land in fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked

# Longest input per target: a little above the largest real input it models, so the
# fuzzer spends its time on structure rather than on ever longer bodies.
declare -A MAX_LEN=(
  [classify]=4096      # a REST request line plus a small JSON body
  [jsonrpc]=8192       # room for a batch past MAX_BATCH (100) short messages
  [manifest]=8192      # examples/policies/*.yaml together are ~3.3 KB
  [admission]=16384    # the largest AdmissionReview fixture is ~10 KB
  [sse]=4096           # several events, and events past the size limit (16–2056 B)
  [audit_verify]=12288 # the demo's 19-record log is ~9 KB
)
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(classify jsonrpc manifest admission sse audit_verify)

# One build for every target, then each fuzzer binary run directly (what `cargo fuzz run`
# does after building): every target fuzzes the same source, even in a working tree that
# others edit meanwhile, and no target waits for a rebuild.
# FUZZ_NO_BUILD=1 reuses the binaries already built.
[ -n "${FUZZ_NO_BUILD:-}" ] || nice -n 10 cargo +nightly fuzz build
bin=fuzz/target/x86_64-unknown-linux-gnu/release

mkdir -p fuzz/logs
for t in "${targets[@]}"; do
  mkdir -p "fuzz/corpus-work/$t" "fuzz/artifacts/$t"
  extra=()
  if [ -n "${FUZZ_SECONDS:-}" ]; then extra+=("-max_total_time=$FUZZ_SECONDS"); fi
  # -runs: the deliverable (10M executions). -rss_limit_mb: memory must stay bounded; a
  # run whose resident set passes 2 GB is reported as a crash (libFuzzer also refuses
  # any single allocation above it). -timeout: one input taking 10 s is a hang.
  # nice: the machine is shared with builds.
  start=$(date +%s)
  nice -n 10 "$bin/$t" "fuzz/corpus-work/$t" "fuzz/corpus/$t" \
    -artifact_prefix="fuzz/artifacts/$t/" -dict="fuzz/dict/$t.dict" \
    -runs=10000000 -rss_limit_mb=2048 -timeout=10 -max_len="${MAX_LEN[$t]}" \
    -print_final_stats=1 "${extra[@]}" >"fuzz/logs/$t.log" 2>&1 || true
  echo "$t: $(( $(date +%s) - start )) s; $(grep -E '^Done|^==.*ERROR|^SUMMARY' "fuzz/logs/$t.log" | head -3)"
  # Keep a small set that reaches every edge the run reached: seeds and finds merged
  # (what `cargo fuzz cmin` does), choosing a minimal cover of edges (-set_cover_merge)
  # rather than of every hit-count bucket (-use_counters=0), which kept ~1,800 files.
  rm -rf "fuzz/corpus-min/$t" && mkdir -p "fuzz/corpus-min/$t"
  nice -n 10 "$bin/$t" -set_cover_merge=1 -use_counters=0 -max_len="${MAX_LEN[$t]}" \
    -rss_limit_mb=2048 -timeout=10 \
    "fuzz/corpus-min/$t" "fuzz/corpus-work/$t" "fuzz/corpus/$t" >"fuzz/logs/$t.cmin.log" 2>&1
  rm -rf "fuzz/corpus/$t" && mv "fuzz/corpus-min/$t" "fuzz/corpus/$t"
done

printf '\n%-13s %12s %8s %9s %8s %6s\n' target executions exec/s rss_mb files KB
for t in "${targets[@]}"; do
  log="fuzz/logs/$t.log"
  runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  speed=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  rss=$(grep -o 'stat::peak_rss_mb: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo '?')
  files=$(find "fuzz/corpus/$t" -type f | wc -l)
  kb=$(du -sk "fuzz/corpus/$t" | cut -f1)
  printf '%-13s %12s %8s %9s %8s %6s\n' "$t" "$runs" "$speed" "$rss" "$files" "$kb"
done
