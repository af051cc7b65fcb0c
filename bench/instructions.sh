#!/usr/bin/env bash
# Instructions per call, builds side by side: bench/instructions.sh [BENCHKIT ...]
#
# Each argument is a `benchkit` binary (`cargo build --release --example benchkit`, at any
# commit since the in-process driver exists); none: this checkout's. For every binary,
# profile (direct, bare, minimal, full) and load (rest, mcp) it runs `benchkit inproc`
# under callgrind twice, with N and 2N calls, so that start-up and warm-up cancel:
# (count at 2N − count at N) / N is what one more call costs, the backend's and the
# client's included; "direct" (the backend and client alone) is subtracted from the
# others. Instruction counts, unlike seconds, repeat for the same binary and input
# whatever else the machine is doing, so two builds compare exactly on a busy box. They
# are not time: valgrind hides SHA-NI and serialises threads, so hashing weighs more and
# contention less than natively (BENCHMARKS.md).
#
# Profiles beyond the default four: full-jwt (the agent identified by a verified JWT),
# full-budget and full-requires (full with a spend budget, with a call order: what
# DESIGN §16's rules add, read against full); older kits know only the default four.
# Knobs (environment): INSTR_CALLS=1000 (N)  INSTR_PROFILES="direct bare minimal full"
#   INSTR_LOADS="rest mcp"  INSTR_KEEP=1 (keep the callgrind files, to annotate)
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
calls=${INSTR_CALLS:-1000}
profiles=${INSTR_PROFILES:-direct bare minimal full}
loads=${INSTR_LOADS:-rest mcp}
kits=("$@")
if [ ${#kits[@]} -eq 0 ]; then
  cargo build --release --quiet --example benchkit
  kits=("$PWD/target/release/examples/benchkit")
fi
work=$(mktemp -d /tmp/toolgate-instructions.XXXXXX)
[ -n "${INSTR_KEEP:-}" ] || trap 'rm -rf "$work"' EXIT

count() { # kit profile load calls -> total instructions of the run
  local out=$work/$build-$2-$3-$4.cg
  # The kit reads bench/ and examples/ relative to its checkout: run it from there.
  (cd "$(dirname "$1")/../../.." &&
    valgrind --tool=callgrind --callgrind-out-file="$out" "$1" inproc \
      --profile "$2" --load "$3" --requests "$4" >/dev/null 2>&1)
  awk '/^totals:/ { print $2 }' "$out"
}

printf '%-40s %-6s %-8s %14s %14s\n' build load profile 'instr/call' 'minus direct'
for kit in "${kits[@]}"; do
  build=$(git -C "$(dirname "$kit")/../../.." rev-parse --short HEAD 2>/dev/null || echo "$kit")
  # The callgrind files are named after it: no slashes.
  build=${build//\//_}
  for load in $loads; do
    direct=0
    for profile in $profiles; do
      one=$(count "$kit" "$profile" "$load" "$calls")
      two=$(count "$kit" "$profile" "$load" $((calls * 2)))
      per=$(((two - one) / calls))
      [ "$profile" = direct ] && direct=$per
      printf '%-40s %-6s %-8s %14d %14d\n' "$build" "$load" "$profile" "$per" $((per - direct))
    done
  done
done
[ -z "${INSTR_KEEP:-}" ] || echo "callgrind files kept in $work"
