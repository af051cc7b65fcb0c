-- toolgate: one call's admission, atomically (src/state/admit.rs says what each part means).
-- KEYS: 1 tool rate limiter, 2 agent rate limiter, 3 session, 4 claim, 5 and 6 spend
--       budgets (all one hash tag)
-- ARGV: 1 tool interval µs (0: none), 2 tool burst, 3 agent interval µs, 4 agent burst,
--       5 maxCalls (-1: none), 6 maxRepeats (-1: none), 7 session idle ms,
--       8 call fingerprint, 9 claim window ms (0: no claim), 10 claim value, 11 shadow (1/0),
--       12 maxSame (-1: none), 13 cost, 14 budget 1 perDay (-1: none), 15 its expiry ms,
--       16 budget 2 perDay (-1: none), 17 its expiry ms
-- Returns {0, overridden, wait µs or spent, calls} admitted; {1, 't'|'a', wait µs} rate
--         limited; {2, 'budget'|'loop'|'same', 0} refused by the session;
--         {2, 'spend-1'|'spend-2', spent} refused by a spend budget;
--         {3, held value} claimed elsewhere.
-- Values that are not ours (another type, another format) are treated as absent.

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local shadow = ARGV[11] == '1'
local overridden, overridden_wait = '', 0

local function gcra(key, interval, burst)
  if interval <= 0 then return 0 end
  local tat = redis.pcall('GET', key)
  tat = type(tat) == 'string' and tonumber(tat) or nil
  -- A TAT further ahead than a full burst can't have been written by us.
  if tat == nil or tat < now or tat > now + burst * interval then tat = now end
  local allow_at = tat - (burst - 1) * interval
  if now < allow_at then return allow_at - now end
  local next_tat = tat + interval
  redis.call('SET', key, string.format('%.0f', next_tat), 'PX',
    math.floor((next_tat - now) / 1000) + 1000)
  return 0
end

for i, which in ipairs({'t', 'a'}) do
  local interval, burst = tonumber(ARGV[i * 2 - 1]), tonumber(ARGV[i * 2])
  local wait = gcra(KEYS[i], interval, burst)
  if wait > 0 then
    if not shadow then return {1, which, string.format('%.0f', wait)} end
    if overridden == '' then overridden, overridden_wait = 'rate-' .. which, wait end
  end
end

local window = tonumber(ARGV[9])
if window > 0 then
  local held = redis.pcall('GET', KEYS[4])
  if type(held) == 'string' and string.sub(held, 1, 4) == 'tg1|' then
    return {3, held}
  end
end

local calls = 0
local session_write = nil
if ARGV[7] ~= '0' then
  local tally = redis.pcall('HMGET', KEYS[3], 'c', 'l', 's')
  if tally.err then
    redis.call('DEL', KEYS[3])
    tally = {}
  end
  calls = tonumber(tally[1]) or 0
  local last = tally[2] or ''
  local streak = tonumber(tally[3]) or 0
  if calls > 0 and last == ARGV[8] then streak = streak + 1 else streak = 1 end
  local max_calls, max_repeats = tonumber(ARGV[5]), tonumber(ARGV[6])
  local max_same = tonumber(ARGV[12])
  local same_field = 'f:' .. ARGV[8]
  local same = 0
  if max_same >= 0 then same = tonumber(redis.call('HGET', KEYS[3], same_field)) or 0 end
  local refused = ''
  if max_calls >= 0 and calls >= max_calls then
    refused = 'budget'
  elseif max_repeats >= 0 and streak > max_repeats then
    refused = 'loop'
  elseif max_same >= 0 and same >= max_same then
    refused = 'same'
  end
  if refused ~= '' then
    -- A refused call keeps the session alive but is not counted.
    redis.call('PEXPIRE', KEYS[3], ARGV[7])
    if not shadow then return {2, refused, 0} end
    if overridden == '' then overridden = refused end
  else
    calls = calls + 1
    -- maxSame counts up to 256 distinct calls per session (src/limits/session.rs).
    local track = max_same >= 0 and (same > 0 or redis.call('HLEN', KEYS[3]) < 3 + 256)
    session_write = {streak = streak, track = track, field = same_field}
  end
end

-- Spend budgets (KEYS 5 and 6): all charged or none; a refusal returns what was spent.
local cost = tonumber(ARGV[13])
local charges = {}
for i = 1, 2 do
  local per_day = tonumber(ARGV[12 + i * 2])
  if per_day >= 0 then
    local spent = tonumber(redis.pcall('GET', KEYS[4 + i])) or 0
    if spent + cost > per_day then
      if not shadow then return {2, 'spend-' .. i, string.format('%.0f', spent)} end
      if overridden == '' then overridden = 'spend-' .. i; overridden_wait = spent end
      charges = nil
      break
    end
    table.insert(charges, i)
  end
end

if session_write then
  redis.call('HSET', KEYS[3], 'c', calls, 'l', ARGV[8], 's', session_write.streak)
  if session_write.track then redis.call('HINCRBY', KEYS[3], session_write.field, 1) end
  redis.call('PEXPIRE', KEYS[3], ARGV[7])
end
if charges then
  for _, i in ipairs(charges) do
    if cost > 0 then redis.call('INCRBY', KEYS[4 + i], cost) end
    redis.call('PEXPIRE', KEYS[4 + i], ARGV[13 + i * 2])
  end
end

if window > 0 then
  redis.call('SET', KEYS[4], ARGV[10], 'PX', window)
end
return {0, overridden, string.format('%.0f', overridden_wait), calls}
