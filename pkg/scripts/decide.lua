-- decide.lua: the first part of sluice's decide script. One call decides
-- every rule of ONE descriptor atomically, as pkg/limit's Decide does (or
-- each descriptor of a batch, one after the other, or a batch together).
--
-- The script is this file followed by the others of this directory, joined
-- in the order of pkg/scripts/scripts.go's decideParts (each file's locals
-- are visible to the files after it): arith, window, state, one file per
-- algorithm named after its Go twin in pkg/limit, rule, decision, then
-- batch (the entry, decide_call). Its contract -- KEYS, every ARGV slot and
-- unit, the records, the reply, the expiries, how it runs as a script and
-- as a function library -- is pkg/scripts/CONTRACT.md; read it before
-- changing anything. Every key it touches is one of the call's KEYS.
--
-- This file: the shared locals.

-- Every function of the script is defined at the top level or inside the
-- define_* function of its algorithm, never per descriptor, and the state of the call -- the
-- clock, the cost, the rules, their states -- lives in locals that each
-- call and each descriptor set before using them. Loaded as a Redis
-- function library (FUNCTION LOAD, Redis 7+) the functions are created
-- once per node and a call only runs them; run with EVALSHA they are
-- created on every call, only those the call uses. Nothing at the top
-- level may read a global: a library is loaded where none can be read.

-- Globals used on every call, as locals (an upvalue beats a table lookup),
-- set by decide_call when call is nil: on every call of a script (each runs
-- the whole source), on the first call of a function library (loaded where
-- no global -- math, string, tonumber, redis.call -- may be read yet, on
-- Redis 7.0), and never again.
local tonumber, fmod, floor, ceil, format, call, pcall_redis

local MAXWAIT = 9007199254740992 -- 2^53 us: limit.MaxWaitMicros
local MAXCHARGE = 9007199254740992 -- 2^53: limit.MaxCharge
local MAXOTHERS = 16 -- backend.MaxOtherStates
local TEST_TTL_SLACK_MS = 600000

-- The call's clock (decide_call reads it once per call, whatever the
-- number of descriptors) and the descriptor's cost (decide_one sets it: N,
-- and its mode -- take, refund or charge).
local now, testmode
local N, refund, charge
-- The descriptor's rules (rule.lua's read_rules sets them).
local nrules, rules

-- defer, when set, is the first pass of a batch decided together
-- (batch.lua): every write the descriptors would make is kept here instead
-- of sent, and every read sees the writes kept, so that nothing is written
-- until no descriptor is denied. v: counter key -> { value or false
-- (deleted), PX }; logs: sliding log key -> its state, with its pending
-- changes (sliding_log.lua); order: the keys in the order first written;
-- who: key -> the descriptors (their reply index, h) that wrote it.
local defer
