-- decide.lua: the entry of sluice's decide script. One call decides every
-- rule of ONE descriptor atomically, as pkg/limit's Decide does.
--
-- The script is this file followed by the others of this directory, joined
-- in the order of scripts.go's decideParts (each file's locals are visible to
-- the files after it): arith, window, rule, state, then one file per
-- algorithm named after its Go twin in pkg/limit, then decision. Its
-- contract -- KEYS, every ARGV slot and unit, the records, the reply, the
-- expiries -- is pkg/scripts/CONTRACT.md; read it before changing anything.
--
-- This file: replication mode, shared locals, the clock and the call's
-- first three ARGV slots (now, N, refund).

if redis.replicate_commands then
  redis.replicate_commands()
end

-- Globals used on every call, as locals (a register beats a table lookup).
local tonumber, call, fmod, floor, ceil, format =
  tonumber, redis.call, math.fmod, math.floor, math.ceil, string.format

local MAXWAIT = 9007199254740992 -- 2^53 us: limit.MaxWaitMicros
local TEST_TTL_SLACK_MS = 600000

local now
local testmode = ARGV[1] ~= ''
if testmode then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
local N = tonumber(ARGV[2])
local refund = ARGV[3] == '1'
if now == nil or N == nil then
  return redis.error_reply('sluice decide: bad ARGV (now, cost)')
end
