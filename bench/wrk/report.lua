-- Shared by the wrk scripts: one machine-readable line per run for bench/run.sh.
-- Non-2xx answers count as errors (summary.errors.status), so a refused call can't pass
-- for a fast one.
function report(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "RESULT requests=%d duration_us=%d errors=%d p50_us=%d p99_us=%d\n",
    summary.requests, summary.duration,
    e.connect + e.read + e.write + e.status + e.timeout,
    latency:percentile(50), latency:percentile(99)))
end

function read_body()
  local f = assert(io.open(os.getenv("BENCH_BODY"), "r"))
  local text = f:read("*a"):gsub("%s+$", "")
  f:close()
  return text
end

function common_headers()
  wrk.headers["Content-Type"] = "application/json"
  -- The target's credential: the static token, or an agent JWT (run.sh sets BENCH_AUTH).
  wrk.headers["Authorization"] = os.getenv("BENCH_AUTH") or "Bearer bench-token"
  wrk.headers["X-Toolgate-Task"] = os.getenv("BENCH_TASK")
end
