-- decide.lua: the entry of sluice's decide script. One call decides every
-- rule of ONE descriptor atomically, as pkg/limit's Decide does.
--
-- The script is this file followed by the others of this directory, joined
-- in the order of scripts.go's decideParts (each file's locals are visible to
-- the files after it): arith, window, rule, state, then one file per
-- algorithm named after its Go twin in pkg/limit, then decision, then
-- batch. Its
-- contract -- KEYS, every ARGV slot and unit, the records, the reply, the
-- expiries -- is pkg/scripts/CONTRACT.md; read it before changing anything.
--
-- This file: replication mode, shared locals, the clock (ARGV[1]), and the
-- opening of decide_one, which decides one descriptor (N and its mode --
-- take, refund or charge -- its ARGV[2] and ARGV[3]); batch.lua, the last file, closes it and decides
-- the call's one descriptor, or each of a batch's.

if redis.replicate_commands then
  redis.replicate_commands()
end

-- Globals used on every call, as locals (a register beats a table lookup).
local tonumber, call, fmod, floor, ceil, format =
  tonumber, redis.call, math.fmod, math.floor, math.ceil, string.format

local MAXWAIT = 9007199254740992 -- 2^53 us: limit.MaxWaitMicros
local MAXCHARGE = 9007199254740992 -- 2^53: limit.MaxCharge
local MAXOTHERS = 16 -- backend.MaxOtherStates
local TEST_TTL_SLACK_MS = 600000

-- The clock is read once per call, whatever the number of descriptors.
local now
local testmode = ARGV[1] ~= ''
if testmode then
  now = tonumber(ARGV[1])
else
  local t = call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if now == nil then
  return redis.error_reply('sluice decide: bad ARGV (now, cost)')
end

-- decide_one decides one descriptor. Its KEYS and ARGV are the
-- descriptor's own (ARGV[2] N, ARGV[3] refund, then the rules; ARGV[1] is
-- the call's now), so the files from here to decision.lua, its body, read
-- them as a single-descriptor call's. It returns the descriptor's reply, or
-- an error reply. batch.lua closes it and calls it once per descriptor.
local function decide_one(KEYS, ARGV)
local N = tonumber(ARGV[2])
local refund = ARGV[3] == '1'
local charge = ARGV[3] == '2' and N ~= 0 -- limit.Cost.Charge (never with a refund)
if N == nil then
  return redis.error_reply('sluice decide: bad ARGV (now, cost)')
end
