-- lean.lua: the window path, for the commonest descriptor -- every rule an
-- epoch-aligned fixed window (alg 1) or of an unknown unit (alg 0), the
-- incumbent's configuration -- in any mode, with any number of rules, ids
-- shared or not. Each rule's count lives in a key of its own that names
-- its window (CONTRACT.md, "Window keys"):
--     <KEYS[1]>:<rule id>:<window start in whole seconds>
-- a plain integer written with INCRBY and expiring at the window's end, so
-- a key that lingers never counts again and expiry is only garbage
-- collection. The key is built here from KEYS[1], in its hash tag's slot,
-- and is not in KEYS (decision 0017 says why that is safe).
--
-- It decides such a descriptor as pkg/limit's Decide does: every rule is
-- checked on the counts before the call, the cost applies to all only if
-- all admit (a refund and a charge always apply), rules sharing one id
-- share one key and each applies the cost to it, counts stop at 2^53. A
-- cost is taken optimistically: INCRBY each key, and on a denial put every
-- key back (DECRBY, or DEL for a key the call created, so no key is left
-- without its expiry). A peek, and a cost no limit can hold, only read.
-- One rule taking a cost, and two or three of distinct ids taking a cost
-- every limit can hold (win_take), are written out; any other shape goes
-- through one general loop (decision 0059).
-- Any other descriptor (a sliding window, a meter, a sliding log, a
-- calendar-aligned window) returns nil and is decided the general way, on
-- the records of KEYS[1]. It uses no function of the general way (arith.lua's
-- helpers are written out here), so that a call it decides does not define
-- them (see general.lua). Part of the decide script (see decide.lua).

-- WINDOWS: descriptors of fixed windows take the window path (tests turn it
-- off to compare with the general way).
local WINDOWS = true

-- saving, when set (a batch decided together, batch.lua), maps each key to
-- its DUMP and PTTL before the call's first write to it: the window path
-- adds each window key it writes, so that a denial can put it back.
local saving

local function win_save(key)
  if saving[key] == nil then
    saving[key] = { call('DUMP', key), call('PTTL', key) }
  end
end

-- win_expire makes key expire at wend (us, a whole second): at the window's
-- end on Redis's clock, or, on the test clock, that far from now plus
-- TEST_TTL_SLACK_MS. es, when given, is wend in seconds as a string
-- (win_rule's): Redis 7.0 formats a number argument of a command with
-- snprintf's %.17g, a string it takes as it is. The command goes through
-- cmd when given (redis.pcall: a failure is returned, not raised), and its
-- reply is returned.
local function win_expire(key, wend, es, cmd)
  if testmode then
    return (cmd or call)('PEXPIRE', key, ceil((wend - now) / 1000) + TEST_TTL_SLACK_MS)
  end
  return (cmd or call)('EXPIREAT', key, es or wend / 1000000)
end

-- win_set writes c, the count the general way computed, to the window key
-- key of the window ending at wend (us), or deletes it when c is 0. One
-- SET ... PX (PXAT needs Redis 6.2): PX counts from a command time up to a
-- millisecond before TIME (decision.lua's pxttl), so the key may live up
-- to 2 ms past the window's end, when it no longer counts anyway.
local function win_set(key, c, wend)
  if saving then win_save(key) end
  if c == 0 then
    call('DEL', key)
    return
  end
  local px
  if testmode then
    px = ceil((wend - now) / 1000) + TEST_TTL_SLACK_MS
  else
    px = wend / 1000 - floor(now / 1000) + 1
  end
  call('SET', key, format('%d', c), 'PX', px)
end

-- win_start returns the start (us) of the epoch-aligned window of period P
-- holding now.
local function win_start(P)
  local m = fmod(now, P)
  if m < 0 then m = m + P end
  return now - m
end

-- win_rule returns, for the epoch-aligned fixed window at position i (from
-- 1) of a descriptor whose limit, period and id slots are ls, ps and id:
-- its limit, its window's end (us), its window key's tail after KEYS[1]
-- (':<id>:<window start s>') and the end in seconds as a string (for
-- EXPIREAT); or nil when the slots are not such a window's. It keeps them
-- for the first WR_RULES positions in wr (at 8i-7 .. 8i: the three slots,
-- the limit, the window's start and end, the tail, the end's string), so
-- that a rule of the same slots at the same position, in the same window,
-- parses and formats nothing: a function library keeps wr from one call to
-- the next (its size bounded), a script from one descriptor of a batch to
-- the next.
local WR_RULES = 16
local wr
local function win_rule(i, ls, ps, id)
  if not wr then wr = {} end
  local c = 8 * i
  if ls == wr[c - 7] and ps == wr[c - 6] and id == wr[c - 5] and now < wr[c - 2] and now >= wr[c - 3] then
    return wr[c - 4], wr[c - 2], wr[c - 1], wr[c]
  end
  local L, P = tonumber(ls), tonumber(ps)
  if not (L and P and P > 0 and fmod(P, 1000000) == 0) then return nil end
  local start = win_start(P)
  local wend = start + P
  local tail, es = ':' .. id .. ':' .. start / 1000000, format('%d', wend / 1000000)
  if i <= WR_RULES then
    wr[c - 7], wr[c - 6], wr[c - 5], wr[c - 4], wr[c - 3], wr[c - 2], wr[c - 1], wr[c] = ls, ps, id, L, start, wend, tail, es
  end
  return L, wend, tail, es
end

-- win_take decides a descriptor of nr = 2 or 3 epoch-aligned fixed windows
-- of distinct ids (so distinct keys) taking a cost that every limit can
-- hold -- the commonest call after one rule's -- written out in locals,
-- with no table but the reply: the counts are taken (INCRBY), and on a
-- denial put back, as the general part below would. It returns nil,
-- before writing anything, when the slots are not such a descriptor's.
-- A batch's loop (decide_batch, batch.lua) decides the same descriptors
-- itself, with the same commands in the same order: a change to one is a
-- change to both (TestBatchWindowsTaken compares them).
local function win_take(KEYS, ARGV, k0, a0, nr)
  if ARGV[a0 + 2] ~= '0' or ARGV[a0 + 3] ~= '1' or ARGV[a0 + 8] ~= '1' then return nil end
  local id1, id2 = ARGV[a0 + 7], ARGV[a0 + 12]
  if id1 == id2 then return nil end
  local ns = ARGV[a0 + 1]
  local n = tonumber(ns)
  if not (n and n > 0) then return nil end
  local L1, e1, t1, x1 = win_rule(1, ARGV[a0 + 4], ARGV[a0 + 6], id1)
  if not L1 or n > L1 then return nil end
  local L2, e2, t2, x2 = win_rule(2, ARGV[a0 + 9], ARGV[a0 + 11], id2)
  if not L2 or n > L2 then return nil end
  local L3, e3, t3, x3, id3
  if nr == 3 then
    id3 = ARGV[a0 + 17]
    if ARGV[a0 + 13] ~= '1' or id3 == id1 or id3 == id2 then return nil end
    L3, e3, t3, x3 = win_rule(3, ARGV[a0 + 14], ARGV[a0 + 16], id3)
    if not L3 or n > L3 then return nil end
  end
  local base = KEYS[k0 + 1]
  local k1, k2 = base .. t1, base .. t2
  local w1, w2 = e1 - now, e2 - now
  if w1 > MAXWAIT then w1 = MAXWAIT end
  if w2 > MAXWAIT then w2 = MAXWAIT end
  if nr == 2 then
    if saving then win_save(k1) win_save(k2) end
    local v1 = call('INCRBY', k1, ns)
    local v2 = call('INCRBY', k2, ns)
    if v1 <= L1 and v2 <= L2 then
      if v1 == n then win_expire(k1, e1, x1) end
      if v2 == n then win_expire(k2, e2, x2) end
      local r1, r2 = L1 - v1, L2 - v2
      -- Decision.Bind: the least remaining, then the latest reset.
      local b = 0
      if r2 < r1 or (r2 == r1 and w2 > w1) then b = 1 end
      return { 1, b, 1, r1, w1, 1, r2, w2 }
    end
    -- Denied: every count put back (DECRBY's reply is exact, INCRBY's a
    -- float past 2^53); the rule that admitted reports a peek.
    local a1, a2 = v1 <= L1, v2 <= L2
    if v1 == n then v1 = 0 call('DEL', k1) else v1 = call('DECRBY', k1, ns) end
    if v2 == n then v2 = 0 call('DEL', k2) else v2 = call('DECRBY', k2, ns) end
    local b = 0
    if a1 or (not a2 and w2 > w1) then b = 1 end
    return { 0, b, a1 and 1 or 0, v1 >= L1 and 0 or L1 - v1, w1, a2 and 1 or 0, v2 >= L2 and 0 or L2 - v2, w2 }
  end
  local k3 = base .. t3
  local w3 = e3 - now
  if w3 > MAXWAIT then w3 = MAXWAIT end
  if saving then win_save(k1) win_save(k2) win_save(k3) end
  local v1 = call('INCRBY', k1, ns)
  local v2 = call('INCRBY', k2, ns)
  local v3 = call('INCRBY', k3, ns)
  if v1 <= L1 and v2 <= L2 and v3 <= L3 then
    if v1 == n then win_expire(k1, e1, x1) end
    if v2 == n then win_expire(k2, e2, x2) end
    if v3 == n then win_expire(k3, e3, x3) end
    local r1, r2, r3 = L1 - v1, L2 - v2, L3 - v3
    local b, r, w = 0, r1, w1
    if r2 < r or (r2 == r and w2 > w) then b, r, w = 1, r2, w2 end
    if r3 < r or (r3 == r and w3 > w) then b = 2 end
    return { 1, b, 1, r1, w1, 1, r2, w2, 1, r3, w3 }
  end
  local a1, a2, a3 = v1 <= L1, v2 <= L2, v3 <= L3
  if v1 == n then v1 = 0 call('DEL', k1) else v1 = call('DECRBY', k1, ns) end
  if v2 == n then v2 = 0 call('DEL', k2) else v2 = call('DECRBY', k2, ns) end
  if v3 == n then v3 = 0 call('DEL', k3) else v3 = call('DECRBY', k3, ns) end
  -- Decision.Bind on a denial: the denying rule of the latest reset.
  local b, w = -1, 0
  if not a1 then b, w = 0, w1 end
  if not a2 and (b < 0 or w2 > w) then b, w = 1, w2 end
  if not a3 and (b < 0 or w3 > w) then b = 2 end
  return { 0, b, a1 and 1 or 0, v1 >= L1 and 0 or L1 - v1, w1, a2 and 1 or 0, v2 >= L2 and 0 or L2 - v2, w2,
    a3 and 1 or 0, v3 >= L3 and 0 or L3 - v3, w3 }
end

-- windows decides the descriptor whose KEYS are KEYS[k0 + 1 .. k0 + nk] and
-- whose slots after na are ARGV[a0 + 1 .. a0 + na] (N, mode, the rules),
-- and returns its reply, or nil when it is not a descriptor of fixed
-- windows (or its slots are malformed: the general way says how).
local function windows(KEYS, ARGV, k0, a0, nk, na)
  if not WINDOWS or nk ~= 1 then return nil end
  -- The commonest call, written out: one rule, a cost taken.
  if na == 7 and ARGV[a0 + 2] == '0' and ARGV[a0 + 3] == '1' then
    local ns = ARGV[a0 + 1]
    local n = tonumber(ns)
    -- The rule's limit, window end, key tail and EXPIREAT argument, kept
    -- from the call before when its slots and window are the same.
    local L, wend, tail, es = win_rule(1, ARGV[a0 + 4], ARGV[a0 + 6], ARGV[a0 + 7])
    if n and L and n > 0 and n <= L then
      local key = KEYS[k0 + 1] .. tail
      if saving then win_save(key) end
      local v = call('INCRBY', key, ns)
      local w = wend - now
      if w > MAXWAIT then w = MAXWAIT end
      if v <= L then
        if v == n then win_expire(key, wend, es) end
        return { 1, 0, 1, L - v, w }
      end
      -- Put it back; DECRBY's reply is the count exactly (INCRBY's is a
      -- float, inexact past 2^53).
      if v == n then v = 0 call('DEL', key) else v = call('DECRBY', key, ns) end
      return { 0, 0, 0, v >= L and 0 or L - v, w }
    end
  end

  if na == 12 or na == 17 then
    local r = win_take(KEYS, ARGV, k0, a0, na == 12 and 2 or 3)
    if r then return r end
  end
  local nr = (na - 2) / 5
  if nr < 0 or nr ~= floor(nr) then return nil end -- a calendar rule's 10 slots
  -- Any other algorithm: the general way, before building anything.
  for i = a0 + 3, a0 + 5 * nr - 2, 5 do
    local alg = ARGV[i]
    if alg ~= '1' and alg ~= '0' then return nil end
  end
  local ns, mode = ARGV[a0 + 1], ARGV[a0 + 2]
  local n = tonumber(ns)
  if n == nil or n < 0 or n ~= floor(n) then return nil end
  local ref = mode == '1'
  local chg = mode == '2' and n ~= 0
  -- Two flat tables (each table costs Redis time): x holds per rule i
  -- (from 0), at 3i+1..3i+3, its limit (false: alg 0), the index in y of
  -- its key, its reset; y holds per key, at j..j+6, the key, its window's
  -- end (us, and at j+6 in s as a string), how many rules apply the cost to
  -- it, the count before the call, what the call adds to it (at most 2^53),
  -- and whether it was put back at once (its INCRBY reached 2^53, where the
  -- reply is an inexact float). Both, and the reply (out, below), are made
  -- with room for five rules of five keys: a table that grows is rehashed
  -- at every power of 2 (Lua 5.1 has no table.new), which cost 2 us of a
  -- call of four rules.
  local f = false
  local x = { f, f, f, f, f, f, f, f, f, f, f, f, f, f, f }
  local y = { f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f, f }
  local ny = 0 -- y's length
  local fits = true -- no rule refuses the cost whatever the count
  local base = KEYS[k0 + 1]
  for i = 0, nr - 1 do
    local b = a0 + 5 * i + 2
    local alg = ARGV[b + 1]
    if alg == '1' then
      local l, wend, tail, es = win_rule(i + 1, ARGV[b + 2], ARGV[b + 4], ARGV[b + 5])
      if l == nil then return nil end
      local key = base .. tail
      local j = 1
      while j < ny and y[j] ~= key do j = j + 7 end
      if j > ny then
        y[j], y[j + 1], y[j + 2], y[j + 3], y[j + 4], y[j + 5], y[j + 6] = key, wend, 0, 0, 0, false, es
        ny = ny + 7
      end
      y[j + 2] = y[j + 2] + 1
      local w = wend - now
      if w > MAXWAIT then w = MAXWAIT end
      x[3 * i + 1], x[3 * i + 2], x[3 * i + 3] = l, j, w
      if n > l then fits = false end
    elseif alg == '0' then
      x[3 * i + 1], x[3 * i + 2], x[3 * i + 3] = false, 0, 0
      if n ~= 0 and not ref then fits = false end
    else
      return nil
    end
  end

  -- The counts before the call. A key of one rule gets the cost's own
  -- string (ns), Redis formatting no number.
  local write = n ~= 0 and (ref or chg or fits)
  for j = 1, ny, 7 do
    local key = y[j]
    if write then
      local a, as = n, ns
      if y[j + 2] > 1 then
        a = n * y[j + 2]
        if a > MAXCHARGE then a = MAXCHARGE end
        as = a
      end
      y[j + 4] = a
      if saving then win_save(key) end
      if ref then
        local v = call('DECRBY', key, as)
        if v <= 0 then call('DEL', key) end
        y[j + 3] = v + a
      else
        local v = call('INCRBY', key, as)
        if v >= MAXCHARGE then
          v = call('DECRBY', key, as)
          if v == 0 then call('DEL', key) end
          y[j + 3], y[j + 5] = v, true
        else
          y[j + 3] = v - a
        end
      end
    else
      y[j + 3] = tonumber(call('GET', key)) or 0
    end
  end

  -- Check every rule on the counts before the call (fw_check); the reply
  -- holds each rule's ok, remaining and reset from out[3] (its nils make
  -- room, and end the reply where Redis reads it to the first nil).
  local out = { 1, -1, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil }
  local allowed = true
  for i = 0, nr - 1 do
    local l = x[3 * i + 1]
    local ok, rem = false, 0
    if l then
      local count = y[x[3 * i + 2] + 3]
      if ref then
        ok = true
        count = count > n and count - n or 0
      elseif n <= l and count <= l - n then
        ok = true
        count = count + n
      elseif chg then
        count = count + n
        if count > MAXCHARGE then count = MAXCHARGE end
      end
      rem = count >= l and 0 or l - count
    else
      ok = n == 0 or ref -- unknown unit: only peeks and refunds
    end
    if not ok then allowed = false end
    out[3 * i + 3], out[3 * i + 4], out[3 * i + 5] = ok and 1 or 0, rem, x[3 * i + 3]
  end
  -- Decision.Bind, on the checks (binding is 1-based here), before the
  -- peeks below, as decision.lua binds.
  local binding = -1
  for i = 1, nr do
    local ok, rem, rs = out[3 * i], out[3 * i + 1], out[3 * i + 2]
    if binding < 0 then
      if allowed or ok == 0 then binding = i end
    elseif not allowed then
      if ok == 0 and rs > out[3 * binding + 2] then binding = i end
    elseif rem < out[3 * binding + 1] or (rem == out[3 * binding + 1] and rs > out[3 * binding + 2]) then
      binding = i
    end
  end
  out[2] = binding < 0 and -1 or binding - 1
  if not allowed then
    out[1] = 0
    if not chg then
      -- Nothing was consumed: the cost taken is put back, and the rules
      -- that alone admitted report a peek.
      if write then
        for j = 1, ny, 7 do
          if y[j + 5] then -- already put back
          elseif y[j + 3] == 0 then call('DEL', y[j])
          else call('DECRBY', y[j], y[j + 2] == 1 and ns or y[j + 4])
          end
        end
      end
      for i = 0, nr - 1 do
        local l = x[3 * i + 1]
        if l and out[3 * i + 3] == 1 then
          local count = y[x[3 * i + 2] + 3]
          out[3 * i + 3], out[3 * i + 4] = count <= l and 1 or 0, count >= l and 0 or l - count
        end
      end
      return out
    end
  end
  if write and not ref then
    -- Counts stop at 2^53 (SET drops the TTL: it is set again); a key the
    -- call created expires with its window.
    for j = 1, ny, 7 do
      local key = y[j]
      if y[j + 5] then
        if y[j + 3] > MAXCHARGE - y[j + 4] then
          call('SET', key, '9007199254740992')
        else
          call('INCRBY', key, y[j + 4])
        end
        win_expire(key, y[j + 1], y[j + 6])
      elseif y[j + 3] == 0 then
        win_expire(key, y[j + 1], y[j + 6])
      end
    end
  end
  return out
end
