#!/usr/bin/env bash
# Where a governed call's instructions go, stage by stage: bench/stages.sh [PROFILE] [LOAD]
#
# Runs `benchkit inproc --profile PROFILE` (default full-jwt: full with the agent's JWT
# verified, then cached) under callgrind with N and 2N calls and prints, for each stage
# of the call, the instructions one more call spends in it ((2N − N) / N, inclusive of
# what the stage calls), beside the whole call's and the bare proxy's. Instruction
# counts repeat whatever else the machine does, so this is the profile behind
# BENCHMARKS.md's per-stage budget; valgrind runs SHA-256 without the CPU's SHA
# instructions, so the stages that hash (identify, the args digest, rate-limit keys,
# the audit chain) weigh more here than natively. The in-process sidecar exports no
# spans (no OTLP endpoint): bench/run.sh's full against "full, sampling 0.1" measures
# them.
#
# Knobs (environment): STAGES_CALLS=1000 (N)  STAGES_KIT=target/release/examples/benchkit
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is missing (apt-get install valgrind)" >&2; exit 1; }
profile=${1:-full-jwt}
load=${2:-rest}
calls=${STAGES_CALLS:-1000}
kit=${STAGES_KIT:-}
if [ -z "$kit" ]; then
  cargo build --release --quiet --example benchkit
  kit=$PWD/target/release/examples/benchkit
fi
work=$(mktemp -d /tmp/toolgate-stages.XXXXXX)
trap 'rm -rf "$work"' EXIT

run() { # profile calls -> callgrind file
  local out=$work/$1-$2.cg
  valgrind --tool=callgrind --callgrind-out-file="$out" "$kit" inproc \
    --profile "$1" --load "$load" --requests "$2" >/dev/null 2>&1
  echo "$out"
}
inclusive() { # callgrind file -> "instructions<TAB>function" per function, inclusive
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    sed -n 's/^ *\([0-9,]*\) ([^)]*) *???:\(.*\) \[.*/\1\t\2/p' | tr -d ,
}
for p in direct bare "$profile"; do
  one=$(run "$p" "$calls")
  two=$(run "$p" $((calls * 2)))
  awk '/^totals:/ { print $2 }' "$one" >"$work/$p.one"
  awk '/^totals:/ { print $2 }' "$two" >"$work/$p.two"
  [ "$p" = "$profile" ] && { inclusive "$one" >"$work/one.tsv"; inclusive "$two" >"$work/two.tsv"; }
done

python3 - "$work" "$profile" "$calls" <<'EOF'
import sys
work, profile, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
def total(p):
    one = int(open(f"{work}/{p}.one").read())
    two = int(open(f"{work}/{p}.two").read())
    return (two - one) / calls
def table(path):
    rows = {}
    for line in open(path):
        n, name = line.rstrip("\n").split("\t", 1)
        rows[name.strip()] = rows.get(name.strip(), 0) + int(n)
    return rows
one, two = table(f"{work}/one.tsv"), table(f"{work}/two.tsv")
direct = total("direct")
bare = total("bare") - direct
call = total(profile) - direct
# Stages in the order a REST call meets them; each the functions whose inclusive cost is
# the stage's (none of them calls another of the list), then other functions to use
# where the compiler inlined the first.
stages = [
    ("framing watch (smuggling guard)", ["toolgate::proxy::server::framing::Tracker::feed"]),
    ("identify (credential, verified-token cache)", ["toolgate::proxy::stage::identify::identify::{{closure}}"]),
    ("body read", ["toolgate::proxy::body::read_body::{{closure}}"]),
    ("classify (route, strict JSON parse)", ["toolgate::proxy::rest::classify::classify"]),
    ("args digest for the audit record", ["toolgate::proxy::outcome::Outcome::proposed"]),
    ("schema: defaults and validation", ["toolgate::policy::schema::fill_defaults", "toolgate::policy::schema::Schema::is_valid"]),
    ("task token (verified, then cached)", ["toolgate::identity::task::TaskTokens::claims"]),
    ("rules (CEL, arguments bound)", ["toolgate::proxy::stage::rules::check"],
     ["toolgate::policy::bindings::to_val", "toolgate::policy::rule::CompiledRule::evaluate_in"]),
    ("rate limits (agent and tool)", ["toolgate::limits::rate::RateLimits::spend"]),
    ("§16 rules (task, call order, spend)", ["toolgate::proxy::seeds::decide::{{closure}}"]),
    ("backend exchange (request, send, answer head)", ["toolgate::proxy::backend::exchange::Exchange::send::{{closure}}"]),
    ("span start (call and client)", ["toolgate::telemetry::spans::Tracing::start_call", "toolgate::proxy::forward::start_client"]),
    ("audit record (built, then chained and written)", ["toolgate::proxy::outcome::Outcome::record::{{closure}}", "toolgate::audit::writer::Writer::run::{{closure}}"]),
]
print(f"instructions per call, {profile}, backend and client subtracted: {call:,.0f} "
      f"(the bare proxy: {bare:,.0f}; {call / bare:.2f}×)")
print(f"{'stage':<50}{'instr/call':>12}{'share':>8}")
counted = 0
for name, *choices in stages:
    found = next(
        (fs for fs in choices if all(f in one and f in two for f in fs)),
        [f for f in choices[0] if f in one and f in two],
    )
    per = sum(two[f] - one[f] for f in found) / calls
    counted += per
    label = name if found else name + " (not found)"
    print(f"{label:<50}{per:>12,.0f}{per / call:>8.1%}")
print(f"{'the rest (hyper, tokio, routing, headers, record)':<50}{call - counted:>12,.0f}{(call - counted) / call:>8.1%}")
EOF
