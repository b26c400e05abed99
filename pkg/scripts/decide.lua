--[[ sluice decide: all rules of ONE descriptor, decided atomically.

This script is pkg/limit's Decide (Check every rule, Apply to all only if all
admitted, refunds always) run inside Redis. Its arithmetic follows
pkg/limit operation by operation -- same formulas, same order of
floating-point operations -- so it returns the very Outcomes the memory
backend returns; the contract suite (pkg/backend/backendtest) and the
differential tests in pkg/scripts hold it to that. The comments name the Go
function each part mirrors.

KEYS (the Go side builds them)
  KEYS[1]   = <prefix>{<descriptor identity>}   the descriptor's counters
  KEYS[1+j] = <prefix>{<descriptor identity>}:<rule id>   the j-th sliding
              log rule's sorted set, in rule order
  All keys of one call share the hash tag {<identity>}, so they live in one
  cluster slot and one script may touch them all. Rules with the same id
  share one state, as they share one State in pkg/limit.
  The counters of every other rule of the descriptor live in KEYS[1], one
  string read with one GET and written with one SET ... PX (whatever the
  number of rules: a second rule costs no command): records separated by
  '|', each "<rule id> <e> <fields>", where e is the ms instant until which
  the record's state counts (its Expiry rounded up) and the fields are
  decimals separated by spaces (an absent record = zero state; the window
  is stored in the record, not in the key name, so KEYS names every key
  the script touches):
    fixed_window                  "<w> <c>"      w = window start us,
                                                 c = count
    sliding_window                "<w> <c> <p>"  p = previous window's count
    meters (token/leaky bucket,   "<l> <t>"      l = level (float, %.17g),
            gcra)                                t = us of that level
  e.g. "fw.1se 1763900001000 1763900000000000 7|tb.1ho 1763903600000 3.5 1763900000123456".
  Records of rule ids this call does not name (a request that overrides a
  limit with another unit, or rules of an older configuration) are kept as
  they are until their e passes; the key expires with its latest record.
    sliding_log                   sorted set, one member per admitted unit
                                  of cost, score = instant in us, member
                                  "<us>:<n>" with n a per-instant index
                                  written as a letter giving its digit count
                                  then the digits ("a0".."a9","b10",...), so
                                  members order like their index

ARGV (all decimal strings)
  [1] now   test-only instant in us since the Unix epoch; "" in production,
            where the script reads Redis's clock with TIME (below)
  [2] N     cost, whole units, 0 <= N <= 2^53 (0 = peek); the Go side clamps
            larger costs to 2^53, where every decision is already the same
  [3] refund "1" gives N back (is_negative_hits), "0" takes it
  then, for each rule, 5 slots, and 5 more for a calendar fixed window
  (alg 5):
  [+1] alg  0 = none (unknown unit: admits only peeks and refunds, no key
            touched), 1 = fixed_window (epoch-aligned), 2 = sliding_log,
            3 = sliding_window, 4 = meter (token_bucket, leaky_bucket, gcra),
            5 = fixed_window aligned to a time zone's calendar
  [+2] L    requests_per_unit, 0 <= L < 2^53 (the Go side clamps larger
            limits to 2^53-1, below every clamped cost)
  [+3] C    capacity (burst, or L), same range
  [+4] P    period in us (unit_multiplier x unit, at most 100 years)
  [+5] id   the rule's id (limit.Rule.ID: no space, no '|')
  alg 5 only:
  [+6] w    0 when the windows are the segments below (day, week, month,
            year units), else the width in us of the windows inside each
            segment (second/minute/hour units, whose segments are local
            days)
  [+7..10] s0 s1 s2 s3  three
            contiguous segments [s0,s1) [s1,s2) [s2,s3) in us, computed by
            the Go side around ITS clock (previous, current, next). Lua has
            no time-zone database, so the script only picks the segment that
            holds Redis's now; if none does (an instance clock off by more
            than a window) it fails with an error reply before writing
            anything. Epoch-aligned windows are computed here from now.

Returns a flat array of integers:
  { allowed (1/0), binding (0-based rule index, -1 when no rules),
    then per rule: allowed (1/0), remaining, reset_us }
  remaining and reset_us are whole numbers (floored / ceiled explicitly,
  as pkg/limit does; Redis would otherwise truncate).

Writes: only when every rule admitted a nonzero cost (a refund always
applies). Every written state expires at its Expiry (limit.Rule.Expiry)
rounded UP to the millisecond -- deleting it earlier would forget state that
still counts, and it is idle after that: a sliding log's key, a counter's
record (e), and the counter key with its latest record. The counter key may
live up to 2 ms longer: it is written with SET ... PX (SET ... PXAT needs Redis 6.2),
which counts from Redis's clock when SET runs -- on Redis 7.2+ the
script's start, up to a millisecond before the TIME read here, hence 1 ms
added; on older versions the moment SET runs, which can be a millisecond
boundary after TIME. Living a little longer is harmless: the window or
instant is in the value, so a stale counter reads as empty. A state that
becomes equivalent to empty is deleted (a record dropped, a key deleted
when nothing is left in it). Sliding logs drop expired members on every
call (that changes no decision). Nothing is written on a denial or a peek.

Why a script and not MULTI: every rule must be read before any is written
(all-or-nothing needs the whole decision first), keys can expire between
separate commands, and the write is conditional on what was read. A script
does read-decide-write atomically in one round trip.

Why this shape: inside Redis, each redis.call costs about as much as the
Lua around it (~1.5-3 us), so the script makes as few as it can: TIME, one
GET for all counters, one SET for all counters (SET ... PX sets value and
expiry in one command, where a hash needs HSET and PEXPIREAT), and nothing
for a peek or a denial. Numbers passed to redis.call go as strings: Redis
formats a Lua number argument with %.17g, which costs more than the
command. See docs/decisions/0012 and 0013.

Why TIME comes from Redis: service instances' clocks drift; every instance
sharing this Redis agrees on Redis's clock, so windows and buckets do not
depend on which instance served a request. Redis >= 5 replicates a script's
effects, not the script, so calling TIME before writing is allowed (on
Redis 5/6 after redis.replicate_commands(), done below; Redis 7 always
does). Test-only time (ARGV[1]) lets the contract suite run on a fake
clock; since Redis expires keys on its own clock, which a fake one does not
follow, keys written in that mode get their TTL relative to the fake now
plus TEST_TTL_SLACK_MS, so slow test runs do not lose state early.
Every command used exists since Redis 2.6.12 (SET ... PX).

Numbers: Lua numbers are float64. Instants (< 2^53 us, until year 2255),
counts, limits and costs (clamped below 2^53) are exact integers; remainders use
math.fmod, which is exact. Meter levels are floats computed with the same
operations as the Go code and stored with %.17g, which round-trips.
]]

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

-- arith.go ---------------------------------------------------------------

local function floormod(a, b)
  local m = fmod(a, b)
  if m < 0 then m = m + b end
  return m
end

local function floorcount(x) -- floorCount
  if not (x > 0) then return 0 end
  return floor(x)
end

local function ceilmicros(x) -- ceilMicros
  if not (x > 0) then return 0 end
  if x >= MAXWAIT then return MAXWAIT end
  return ceil(x)
end

local function resetof(w) -- resetOf, in us
  if w <= 0 then return 0 end
  if w > MAXWAIT then return MAXWAIT end
  return w
end

local function settle(t, floor, ok) -- settle
  if t <= floor then t = floor + 1 end
  for _ = 1, 4 do
    if ok(t) then break end
    t = t + 1
  end
  for _ = 1, 4 do
    if t - 1 <= floor or not ok(t - 1) then break end
    t = t - 1
  end
  return t
end

local function subcost(a, b)
  if b >= a then return 0 end
  return a - b
end

local function fits(used, n, lim)
  return n <= lim and used <= lim - n
end

-- rules --------------------------------------------------------------------

local nrules = 0
local rules = {}
-- Which algorithms this call needs: only their functions are defined below
-- (each closure a script defines costs Redis CPU on every call).
local has_fw, has_sl, has_sw, has_mt = false, false, false, false
local nargv = #ARGV
local nkeys = 1 -- KEYS cursor: the last key given to a rule
local b = 3 -- ARGV cursor: the slot before this rule's first
while b < nargv do
  local i = nrules + 1
  -- Every field a rule gets is named here, so the table is sized once.
  local r = {
    alg = tonumber(ARGV[b + 1]),
    L = tonumber(ARGV[b + 2]),
    C = tonumber(ARGV[b + 3]),
    P = tonumber(ARGV[b + 4]),
    id = ARGV[b + 5],
    key = false, -- sliding log: its sorted set
    start = false, wend = false, -- fixed window: the window holding now
    wl = false, wat = false, -- meter: level after apply, its whole_at
  }
  if r.alg == nil or r.L == nil or r.C == nil or r.P == nil or r.id == nil then
    return redis.error_reply('sluice decide: bad ARGV for rule ' .. i)
  end
  if r.P <= 0 then r.alg = 0 end
  if r.alg == 2 then
    nkeys = nkeys + 1
    r.key = KEYS[nkeys]
  end
  -- The fixed window holding now (window.go, Rule.Window).
  if r.alg == 1 then
    r.start = now - floormod(now, r.P)
    r.wend = r.start + r.P
  elseif r.alg == 5 then
    r.alg = 1
    local w = tonumber(ARGV[b + 6])
    local s = { tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10]) }
    if w == nil or s[1] == nil or s[2] == nil or s[3] == nil or s[4] == nil then
      return redis.error_reply('sluice decide: bad calendar ARGV for rule ' .. i)
    end
    b = b + 5
    for j = 1, 3 do
      if s[j] <= now and now < s[j + 1] then
        if w == 0 then
          r.start, r.wend = s[j], s[j + 1]
        else
          r.start = now - floormod(now - s[j], w)
          r.wend = r.start + w
          if r.wend > s[j + 1] then r.wend = s[j + 1] end
        end
        break
      end
    end
    if not r.start then
      return redis.error_reply(format(
        'sluice decide: Redis time %d us is outside the calendar windows [%d, %d) computed by the service for rule %d: service clock skewed by more than a window',
        now, s[1], s[4], i))
    end
  end
  b = b + 5
  nrules = i
  rules[i] = r
  if r.alg == 1 then has_fw = true
  elseif r.alg == 2 then has_sl = true
  elseif r.alg == 3 then has_sw = true
  elseif r.alg == 4 then has_mt = true
  end
end
if b ~= nargv or nkeys ~= #KEYS then
  return redis.error_reply('sluice decide: ' .. nargv .. ' ARGV and ' .. #KEYS .. ' KEYS for ' .. nrules .. ' rules')
end

-- state --------------------------------------------------------------------

-- States are loaded once per rule id and shared by rules with the same
-- id, as pkg/limit shares one State between them. Counter states come from
-- the records of KEYS[1], read with one MGET (which, unlike GET, reads a
-- key of another type as nil: anything but a counter string reads as
-- empty). others keeps the records of ids this call does not name.
local states = {}
local owner = {} -- rule id -> the first rule with that id
local ncounters = 0
for i = 1, nrules do
  local r = rules[i]
  if r.alg ~= 0 and states[r.id] == nil then
    owner[r.id] = r
    if r.alg == 2 then
      -- The sorted set is the state (false: loaded). Drop entries with
      -- t + P <= now: they no longer count.
      states[r.id] = false
      call('ZREMRANGEBYSCORE', r.key, '-inf', format('%d', now - r.P))
    else
      states[r.id] = { w = 0, c = 0, p = 0, l = 0, t = 0 }
      ncounters = ncounters + 1
    end
  end
end
local found = false -- KEYS[1] held a counter string
local others, others_at = {}, 0 -- kept records, and the latest of their e (us)

-- read_record loads one record of KEYS[1] into its rule's state, or keeps
-- it in others when this call names no rule of its id. Fields are decimals
-- (a meter's level may have '.', 'e' and signs): a record holding anything
-- else, such as "nan" or "inf" that tonumber would take, does not match
-- and reads as empty.
local function read_record(rec)
  local id, e, x, y, z = string.match(rec, '^(%S+) (%d+) ([-+.%de]+) ([-+.%de]+) ?([-+.%de]*)$')
  local st = states[id]
  if st then
    if owner[id].alg == 4 then
      st.l, st.t = tonumber(x) or 0, tonumber(y) or 0
    else
      st.w, st.c, st.p = tonumber(x) or 0, tonumber(y) or 0, tonumber(z) or 0
    end
  elseif id and st == nil then
    local at = tonumber(e) * 1000
    if at > now then
      others[#others + 1] = rec
      if at > others_at then others_at = at end
    end
  end
end

if ncounters > 0 then
  local v = call('MGET', KEYS[1])[1]
  if v then
    found = true
    if string.find(v, '|', 1, true) then
      for rec in string.gmatch(v, '[^|]+') do read_record(rec) end
    else
      read_record(v) -- the usual case, one record: no iterator
    end
  end
end

-- fixed.go -------------------------------------------------------------------

local fw_count, fw_check, fw_apply, fw_expiry
if has_fw then
  function fw_count(r, st)
    if st.w == r.start then return st.c end
    return 0
  end

  function fw_check(r, st, n, ref)
    local count = fw_count(r, st)
    local ok = false
    if ref then
      ok = true
      count = subcost(count, n)
    elseif fits(count, n, r.L) then
      ok = true
      count = count + n
    end
    return ok, subcost(r.L, count), resetof(r.wend - now)
  end

  function fw_apply(r, st, n, ref)
    local count = fw_count(r, st)
    if ref then count = subcost(count, n) else count = count + n end
    st.w, st.c = r.start, count
  end

  function fw_expiry(r, st)
    if st.c > 0 then return r.wend end -- st.w == r.start after apply
    return 0
  end
end

-- sliding_window.go ----------------------------------------------------------

local sw_roll, sw_est, sw_whole, sw_check, sw_apply, sw_expiry
if has_sw then
  function sw_roll(r, st, t)
    local start = t - floormod(t, r.P)
    if st.w == start then return start, st.p, st.c end
    if st.w == start - r.P then return start, st.c, 0 end
    return start, 0, 0
  end

  function sw_est(prev, cur, e, p)
    return (prev * (p - e)) / p + cur
  end

  function sw_whole(start, p, prev, cur)
    if cur > 0 then return start + 2 * p end
    if prev > 0 then return start + p end
    return now
  end

  function sw_check(r, st, n, ref)
    local p, l = r.P, r.L
    local start, prev, cur = sw_roll(r, st, now)
    local e = now - start
    local ok = false
    if ref then
      ok = true
      cur = subcost(cur, n)
    elseif sw_est(prev, cur, e, p) + n <= l then
      ok = true
      cur = cur + n
    end
    local rem = floorcount(l - sw_est(prev, cur, e, p))
    if ok or n > l then
      return ok, rem, resetof(sw_whole(start, p, prev, cur) - now)
    end
    local t
    if fits(cur, n, l) then
      t = start + p - floor(((l - cur - n) * p) / prev)
    else
      t = start + 2 * p - floor(((l - n) * p) / cur)
    end
    t = settle(t, now, function(x)
      local s2, pv, cu = sw_roll(r, st, x)
      return sw_est(pv, cu, x - s2, p) + n <= l
    end)
    return ok, rem, resetof(t - now)
  end

  function sw_apply(r, st, n, ref)
    local start, prev, cur = sw_roll(r, st, now)
    if ref then cur = subcost(cur, n) else cur = cur + n end
    st.w, st.p, st.c = start, prev, cur
  end

  function sw_expiry(r, st)
    if st.c > 0 then return st.w + 2 * r.P end
    if st.p > 0 then return st.w + r.P end
    return 0
  end
end

-- meter.go -------------------------------------------------------------------

local drain, whole_at, mt_check, mt_apply, mt_expiry
if has_mt then
  function drain(r, level, at, t)
    local elapsed = t - at
    if elapsed < 0 then elapsed = 0 end
    if r.L == 0 then
      if elapsed >= r.P then return 0 end
      return level
    end
    local lv = level - (elapsed * r.L) / r.P
    if lv < 0 then return 0 end
    return lv
  end

  function whole_at(r, level, at) -- meterWholeAt
    if not (level > 0) then return at end
    if r.L == 0 then return at + r.P end
    local t = at + ceilmicros((level * r.P) / r.L)
    return settle(t, at, function(x) return drain(r, level, at, x) <= 0 end)
  end

  function mt_check(r, st, n, ref)
    local c = r.C
    local lv = drain(r, st.l, st.t, now)
    local ok = false
    if ref then
      ok = true
      lv = math.max(0, lv - n)
    elseif lv + n <= c then
      ok = true
      lv = lv + n
    end
    local rem = floorcount(c - lv)
    local reset
    if ok and n > 0 then
      -- After Apply the state is (lv, now): keep its whole_at for mt_expiry.
      r.wl, r.wat = lv, whole_at(r, lv, now)
      reset = resetof(r.wat - now)
    elseif ok or n > c then
      reset = resetof(whole_at(r, st.l, st.t) - now)
    elseif r.L == 0 then
      reset = resetof(st.t + r.P - now)
    else
      local t = now + ceilmicros(((lv + n - c) * r.P) / r.L)
      t = settle(t, now, function(x) return drain(r, st.l, st.t, x) + n <= c end)
      reset = resetof(t - now)
    end
    return ok, rem, reset
  end

  function mt_apply(r, st, n, ref)
    local lv = drain(r, st.l, st.t, now)
    if ref then lv = math.max(0, lv - n) else lv = lv + n end
    st.l, st.t = lv, now
  end

  function mt_expiry(r, st)
    local at
    if st.t == now and st.l == r.wl then
      at = r.wat
    else
      at = whole_at(r, st.l, st.t)
    end
    if at <= now then return 0 end
    return at
  end
end

-- sliding_log.go (the sorted set is the state; expired entries are gone) -----

local zscore_at, sl_check, sl_apply, sl_expiry
if has_sl then
  function zscore_at(key, rank)
    local v = call('ZRANGE', key, rank, rank, 'WITHSCORES')
    return tonumber(v[2])
  end

  function sl_check(r, n, ref)
    local l, p = r.L, r.P
    local c = call('ZCARD', r.key)
    local ok = false
    if ref then
      ok = true
      c = c - math.min(n, c)
    elseif fits(c, n, l) then
      ok = true
      c = c + n
    end
    local rem = subcost(l, c)
    local reset = 0
    if ok and c == 0 then
      reset = 0
    elseif ok and n > 0 and not ref then
      reset = resetof(p)
    elseif ok or n > l then
      if c > 0 then reset = resetof(zscore_at(r.key, c - 1) + p - now) end
    else
      local k = c + n - l
      reset = resetof(zscore_at(r.key, k - 1) + p - now)
    end
    return ok, rem, reset
  end

  function sl_apply(r, n, ref)
    if ref then
      local m = math.min(n, call('ZCARD', r.key))
      if m > 0 then call('ZREMRANGEBYRANK', r.key, -m, -1) end
      return
    end
    local nows = format('%d', now)
    local stamp = nows .. ':'
    local k = call('ZCOUNT', r.key, nows, nows)
    local args = {}
    local j = 0
    while j < n do
      local digits = format('%d', k + j)
      args[#args + 1] = nows
      args[#args + 1] = stamp .. string.char(96 + #digits) .. digits
      j = j + 1
      if #args >= 1000 or j >= n then
        call('ZADD', r.key, unpack(args))
        args = {}
      end
    end
  end

  function sl_expiry(r)
    local v = call('ZRANGE', r.key, -1, -1, 'WITHSCORES')
    if v[2] == nil then return 0 end
    local at = tonumber(v[2]) + r.P
    if at <= now then return 0 end
    return at
  end
end

-- decision.go: Check every rule, Bind, Apply if allowed ------------------

local function check(r, n, ref)
  if r.alg == 1 then return fw_check(r, states[r.id], n, ref) end
  if r.alg == 2 then return sl_check(r, n, ref) end
  if r.alg == 3 then return sw_check(r, states[r.id], n, ref) end
  if r.alg == 4 then return mt_check(r, states[r.id], n, ref) end
  return n == 0 or ref, 0, 0 -- unknown unit
end

local ok, rem, reset = {}, {}, {}
for i = 1, nrules do
  ok[i], rem[i], reset[i] = check(rules[i], N, refund)
end

-- Decision.Bind
local allowed = true
for i = 1, nrules do
  if not ok[i] then allowed = false end
end
local binding = -1
for i = 1, nrules do
  if binding < 0 then
    if allowed or not ok[i] then binding = i end
  elseif not allowed then
    if not ok[i] and reset[i] > reset[binding] then binding = i end
  elseif rem[i] < rem[binding] or (rem[i] == rem[binding] and reset[i] > reset[binding]) then
    binding = i
  end
end

-- pxttl returns the PX of a counter written now that must live until at
-- (us): Expiry rounded up to the millisecond, plus 1 ms because PX may
-- count from a command time up to a millisecond before TIME (see the top).
local function pxttl(at)
  if testmode then
    return ceil((at - now) / 1000) + TEST_TTL_SLACK_MS
  end
  return ceil(at / 1000) - floor(now / 1000) + 1
end

-- expire sets a sliding log's expiry to at (us), rounded up to the ms.
local function expire(key, at)
  if testmode then
    call('PEXPIRE', key, format('%d', ceil((at - now) / 1000) + TEST_TTL_SLACK_MS))
  else
    call('PEXPIREAT', key, format('%d', ceil(at / 1000)))
  end
end

if allowed then
  if N ~= 0 then
    for i = 1, nrules do
      local r = rules[i]
      if r.alg == 1 then fw_apply(r, states[r.id], N, refund)
      elseif r.alg == 2 then sl_apply(r, N, refund)
      elseif r.alg == 3 then sw_apply(r, states[r.id], N, refund)
      elseif r.alg == 4 then mt_apply(r, states[r.id], N, refund)
      end
    end
    -- Store each state once; rules sharing an id keep it until the latest
    -- of their expiries.
    local expiry = {}
    for i = 1, nrules do
      local r = rules[i]
      if r.alg ~= 0 then
        local at
        if r.alg == 1 then at = fw_expiry(r, states[r.id])
        elseif r.alg == 2 then at = sl_expiry(r)
        elseif r.alg == 3 then at = sw_expiry(r, states[r.id])
        else at = mt_expiry(r, states[r.id])
        end
        if expiry[r.id] == nil or at > expiry[r.id] then expiry[r.id] = at end
      end
    end
    -- Counters: this call's records, then the others kept, in one SET.
    local recs, latest = {}, others_at
    for i = 1, nrules do
      local r = rules[i]
      local id = r.id
      local at, st = expiry[id], states[id]
      if r.alg == 0 or owner[id] ~= r then
        -- an unknown unit (no state), or an id stored with its first rule
      elseif r.alg == 2 then
        if at == 0 then call('DEL', r.key) else expire(r.key, at) end
      elseif at > 0 then
        local e = ceil(at / 1000)
        if r.alg == 1 then
          recs[#recs + 1] = format('%s %d %d %d', id, e, st.w, st.c)
        elseif r.alg == 3 then
          recs[#recs + 1] = format('%s %d %d %d %d', id, e, st.w, st.c, st.p)
        else
          recs[#recs + 1] = format('%s %d %.17g %d', id, e, st.l, st.t)
        end
        if at > latest then latest = at end
      end
    end
    if ncounters > 0 then
      for j = 1, #others do recs[#recs + 1] = others[j] end
      if #recs > 0 then
        call('SET', KEYS[1], table.concat(recs, '|'), 'PX', format('%d', pxttl(latest)))
      elseif found then
        call('DEL', KEYS[1])
      end
    end
  end
else
  -- Nothing was consumed: the rules that alone admitted report a peek.
  for i = 1, nrules do
    if ok[i] then
      ok[i], rem[i], reset[i] = check(rules[i], 0, false)
    end
  end
end

local out = { allowed and 1 or 0, binding < 0 and -1 or binding - 1 }
for i = 1, nrules do
  out[3 * i] = ok[i] and 1 or 0
  out[3 * i + 1] = rem[i]
  out[3 * i + 2] = reset[i]
end
return out
