-- MCP: a tools/call POST to /mcp with the same arguments as the REST load plus a cursor
-- unique to each request (and a fresh JSON-RPC id), so duplicate suppression never turns
-- the load into replays. The cursor names the run too: every round is a new wrk process
-- whose counters start again, and a shared state (state.backend: redis) remembers every
-- earlier round's calls for their whole dedupe window.
dofile(os.getenv("BENCH_DIR") .. "/wrk/report.lua")

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local args = read_body():gsub("}$", "")
local counter = 0
-- This run: the time and an address unique to this Lua state.
local run = string.format("%x%s", os.time(), tostring({}):match("0x(%x+)") or "0")

function init()
  wrk.method = "POST"
  wrk.path = "/mcp"
  common_headers()
  wrk.headers["Accept"] = "application/json, text/event-stream"
end

function request()
  counter = counter + 1
  local body = string.format(
    '{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"mcp_search_logs","arguments":%s,"cursor":"%s-%d-%d"}}}',
    counter, args, run, tid or 0, counter)
  return wrk.format(nil, nil, nil, body)
end

done = report
