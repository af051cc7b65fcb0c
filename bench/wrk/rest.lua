-- REST: POST /search with the ~1 KiB JSON body of bench/body.json, the same bytes every
-- time (the REST tool is idempotent, so identical calls are simply calls).
dofile(os.getenv("BENCH_DIR") .. "/wrk/report.lua")

wrk.method = "POST"
wrk.path = "/search"
wrk.body = read_body()
common_headers()

done = report
