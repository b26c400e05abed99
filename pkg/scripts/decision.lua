-- decision.lua ~ pkg/limit/decision.go: Check every rule, Bind, Apply to
-- all only if all admitted (a refund and a charge always apply), store each
-- state with its expiry (a read extends a lowered meter's), and reply. Part of the decide script (see decide.lua).

local function check(r, n, ref)
  if r.alg == 1 then return fw_check(r, states[r.id], n, ref) end
  if r.alg == 2 then return sl_check(r, states[r.id], n, ref) end
  if r.alg == 3 then return sw_check(r, states[r.id], n, ref) end
  if r.alg == 4 then return mt_check(r, states[r.id], n, ref) end
  return n == 0 or ref, 0, 0 -- unknown unit
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

-- decide_rules decides the descriptor whose rules and states read_rules
-- and load_states set: Check every rule, Bind, Apply to all only if all
-- admitted, store, and return the descriptor's reply. Each rule's outcome
-- goes straight into the reply (out[3i] allowed as 1/0, out[3i+1]
-- remaining, out[3i+2] reset), which Bind then reads: one table, not one
-- per field. For up to three rules it is built at its size (every slot is
-- set below), so that filling it does not grow it twice.
local function decide_rules(KEYS)
  local out
  if nrules == 1 then out = { 1, -1, 0, 0, 0 }
  elseif nrules == 2 then out = { 1, -1, 0, 0, 0, 0, 0, 0 }
  elseif nrules == 3 then out = { 1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  else out = { 1, -1 }
  end
  local allowed = true
  for i = 1, nrules do
    local r = rules[i]
    local ok, rem, reset = check(r, N, refund)
    if not ok then allowed = false end
    out[3 * i], out[3 * i + 1], out[3 * i + 2] = ok and 1 or 0, rem, reset
  end

  -- Decision.Bind (binding is 1-based here)
  local binding = -1
  for i = 1, nrules do
    if binding < 0 then
      if allowed or out[3 * i] == 0 then binding = i end
    elseif not allowed then
      if out[3 * i] == 0 and out[3 * i + 2] > out[3 * binding + 2] then binding = i end
    else
      local rem, brem = out[3 * i + 1], out[3 * binding + 1]
      if rem < brem or (rem == brem and out[3 * i + 2] > out[3 * binding + 2]) then
        binding = i
      end
    end
  end
  if not allowed then out[1] = 0 end
  out[2] = binding < 0 and -1 or binding - 1

  local write = (allowed or charge) and N ~= 0
  local dirty = trimmed -- the counter key must be rewritten
  if write then
    for i = 1, nrules do
      local r = rules[i]
      if r.alg == 1 then fw_apply(r, states[r.id], N, refund)
      elseif r.alg == 2 then sl_apply(r, states[r.id], N, refund)
      elseif r.alg == 3 then sw_apply(r, states[r.id], N, refund)
      elseif r.alg == 4 then mt_apply(r, states[r.id], N, refund)
      end
    end
    -- Store each state once; rules sharing an id keep it until the latest
    -- of their expiries (st.x), and never earlier than the e it had.
    for i = 1, nrules do
      local r = rules[i]
      if r.alg ~= 0 then
        local st = states[r.id]
        local at
        if r.alg == 1 then at = fw_expiry(r, st)
        elseif r.alg == 2 then at = sl_expiry(r, st)
        elseif r.alg == 3 then at = sw_expiry(r, st)
        else at = mt_expiry(r, st)
        end
        if not st.x or at > st.x then st.x = at end
      end
    end
    for i = 1, nrules do
      local r = rules[i]
      local st = states[r.id]
      if r.alg ~= 0 and st.own == r then
        local at = st.x
        if r.alg == 2 then
          if at == 0 then call('DEL', r.key) else sl_pexpire(r.key, at) end
        elseif r.wkey then
          win_set(r.wkey, st.c, r.wend) -- a window key (lean.lua)
        elseif at == 0 then
          st.e = 0
        else
          at = ceil(at / 1000) * 1000
          if at > st.e then st.e = at end
        end
      end
    end
    dirty = true
  else
    if not allowed then
      -- Nothing was consumed: the rules that alone admitted report a peek.
      for i = 1, nrules do
        if out[3 * i] == 1 then
          local ok, rem, reset = check(rules[i], 0, false)
          out[3 * i], out[3 * i + 1], out[3 * i + 2] = ok and 1 or 0, rem, reset
        end
      end
    end
    -- A read extends the e of a meter whose rate was lowered (the only
    -- state whose expiry depends on the limit).
    for i = 1, nrules do
      local r = rules[i]
      if r.alg == 4 then
        local st = states[r.id]
        if st.e > 0 then
          local at = mt_fields_expiry(r, st)
          if at > 0 and ceil(at / 1000) * 1000 > st.e then
            st.e = ceil(at / 1000) * 1000
            dirty = true
          end
        end
      end
    end
  end

  -- Counters: this call's records, then the others kept, in one SET of
  -- their concatenation (built with .., no table: usually one record).
  if dirty and ncounters > 0 then
    local v, latest = false, 0
    for i = 1, nrules do
      local r = rules[i]
      local st = states[r.id]
      if r.alg ~= 0 and r.alg ~= 2 and st.own == r and st.e > 0 then
        local e = st.e / 1000
        local rec
        if r.alg == 1 then
          rec = format('%s %d %d %d', r.id, e, st.w, st.c)
        elseif r.alg == 3 then
          rec = format('%s %d %d %d %d', r.id, e, st.w, st.c, st.p)
        else
          rec = format('%s %d %.17g %d', r.id, e, st.l, st.t)
        end
        if v then v = v .. '|' .. rec else v = rec end
        if st.e > latest then latest = st.e end
      end
    end
    if others then
      for j = 1, #others do
        if v then v = v .. '|' .. others[j][1] else v = others[j][1] end
        if others[j][2] > latest then latest = others[j][2] end
      end
    end
    if v then
      call('SET', KEYS[1], v, 'PX', format('%d', pxttl(latest)))
    elseif found then
      call('DEL', KEYS[1])
    end
  end
  return out
end

-- TAKES: the commonest descriptors of the general way -- one sliding window
-- or one meter, or up to three rules of distinct ids, each a sliding
-- window, a meter or an epoch-aligned fixed window (the mixed descriptor),
-- taking a cost that every rule admits -- are decided by take below, in
-- locals, without the tables of read_rules, load_states and decide_rules
-- (tests turn it off to compare with the loop above).
local TAKES = true

-- took keeps, per rule position (up to three), the rule its five slots
-- give ({ the slot strings, alg, L, C, P, id }), so that a call whose
-- slots are the same strings as the call before's reads no number: a
-- function library keeps it from one call to the next, a script builds it
-- per call. Its slot fields are only read (by take, drain and whole_at);
-- take also keeps on it a sliding window's record head (fe, fw, fh: the
-- head '<id> <e> <w> ' for that e and w), a function of them alone.
local took = {}

-- took_rule returns the rule of position i whose slots follow ARGV[b], as
-- read_rules reads it, or nil when they are malformed (the loop above says
-- how).
local function took_rule(i, ARGV, b)
  local as, ls, cs, ps, id = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
  local r = took[i]
  if r and r.as == as and r.ls == ls and r.cs == cs and r.ps == ps and r.id == id then return r end
  local alg, L, C, P = tonumber(as), tonumber(ls), tonumber(cs), tonumber(ps)
  if alg == nil or L == nil or C == nil or P == nil or id == nil then return nil end
  if P <= 0 then alg = 0 end
  r = { as = as, ls = ls, cs = cs, ps = ps, id = id, alg = alg, L = L, C = C, P = P }
  took[i] = r
  return r
end

-- The counter record of one rule, matched anchored where read_records
-- matches it in place (see there: the same captures and classes).
local RECORD = '^([^%s|]+) (%d+) ([0-9.e+-]+) ([0-9.e+-]+) ?([0-9.e+-]*)()'

-- take decides, as check, bind, apply and store above would, a descriptor
-- of the single layout (KEYS and ARGV its own) whose cost (mode 0, N > 0, a
-- whole number) every rule admits, of one to three rules of distinct ids,
-- each a sliding window (alg 3), a meter (alg 4) or an epoch-aligned fixed
-- window on its window key (alg 1), at least one of them keeping a counter
-- record; and only when KEYS[1] is absent or holds nothing but records of
-- those rules' ids, in rule order, as this script writes them. It returns
-- the descriptor's reply, or nil, having written nothing, for any other
-- descriptor, state or outcome -- a denial included -- which the loop above
-- then decides from the start (on the value of KEYS[1] take read, if it
-- read it: read_v).
--
-- What it writes is what the loop writes: the counter key's records
-- formatted the same, with the same PX. The one difference is a fixed
-- window's key: its cost is taken optimistically, as the window path takes
-- it (INCRBY, EXPIREAT when the call created the key), after every other
-- rule admitted, instead of GET then SET ... PX; when the window denies,
-- its count is put back (DECRBY, or DEL of a key the call created) before
-- returning nil.
local function take(KEYS, ARGV)
  read_v = nil
  if not TAKES or ARGV[3] ~= '0' or #KEYS ~= 1 then return nil end
  local na, nr = #ARGV, 0
  if na == 8 then nr = 1 elseif na == 13 then nr = 2 elseif na == 18 then nr = 3 else return nil end
  local ns = ARGV[2]
  local n = tonumber(ns)
  if not (n and n > 0 and n <= MAXCHARGE and n == floor(n)) then return nil end
  local r1, r2, r3 = took_rule(1, ARGV, 3), nil, nil
  if not r1 then return nil end
  if nr > 1 then
    r2 = took_rule(2, ARGV, 8)
    if not r2 or r2.id == r1.id then return nil end
    if nr > 2 then
      r3 = took_rule(3, ARGV, 13)
      if not r3 or r3.id == r1.id or r3.id == r2.id then return nil end
    end
  end
  -- Each rule's state (s1..s3: w c p of a sliding window, l t of a meter;
  -- e its record's e, 0 when absent or expired) and whether it keeps a
  -- record (a window rule: its key, limit, end, EXPIREAT argument).
  local wr_, wkey, wL, wend, wes -- the one fixed window (at most one)
  local wi = 0
  local counters = 0
  for i = 1, nr do
    local r = i == 1 and r1 or (i == 2 and r2 or r3)
    local alg = r.alg
    if alg == 1 then
      if wi ~= 0 then return nil end
      local L, e, tail, es = win_rule(i, r.ls, r.ps, r.id)
      if not L or n > L then return nil end
      wi, wkey, wL, wend, wes = i, KEYS[1] .. tail, L, e, es
    elseif alg == 3 then
      if not sw_check then define_sw() end
      counters = counters + 1
    elseif alg == 4 then
      if not mt_check then define_mt() end
      counters = counters + 1
    else
      return nil
    end
  end
  if counters == 0 then return nil end

  -- The records: absent, or each of a counter rule's id, in rule order.
  local a1, b1, c1, e1, a2, b2, c2, e2, a3, b3, c3, e3 = 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0
  local v = pcall_redis('GET', KEYS[1])
  read_v = v -- for load_states, if the loop decides
  if v then
    if type(v) ~= 'string' then return nil end
    local pos, len, j = 1, #v, 1
    while pos <= len do
      local id, e, x, y, z, nxt = string.match(v, RECORD, pos)
      if not id or not (nxt > len or string.byte(v, nxt) == 124) then return nil end -- '|'
      local r
      while true do
        if j > nr then return nil end
        r = j == 1 and r1 or (j == 2 and r2 or r3)
        if r.alg ~= 1 and r.id == id then break end
        j = j + 1
      end
      local at = tonumber(e) * 1000
      if at > now then
        local f1, f2, f3 = tonumber(x) or 0, tonumber(y) or 0, 0
        if r.alg == 3 then f3 = tonumber(z) or 0 end
        if j == 1 then a1, b1, c1, e1 = f1, f2, f3, at
        elseif j == 2 then a2, b2, c2, e2 = f1, f2, f3, at
        else a3, b3, c3, e3 = f1, f2, f3, at
        end
      end
      j = j + 1
      pos = nxt + 1
    end
  end

  -- Check each counter rule (sw_check, mt_check: admitted, a cost taken),
  -- apply (sw_apply, mt_apply), and the state's expiry (sw_expiry,
  -- mt_expiry), rounded up to the ms as the loop stores it; its record.
  -- The reply, built at its size; for one rule none but the short form
  -- below (rem1, reset1), except in a batch decided together (saving),
  -- whose items' allowed is read from the long form.
  local out, rem1, reset1 = false, 0, 0
  if nr == 2 then out = { 1, 0, 0, 0, 0, 0, 0, 0 }
  elseif nr == 3 then out = { 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  elseif saving then out = { 1, 0, 0, 0, 0 }
  end
  local val, latest = false, 0
  for i = 1, nr do
    local r = i == 1 and r1 or (i == 2 and r2 or r3)
    local alg = r.alg
    if alg ~= 1 then
      local f1, f2, f3, se
      if i == 1 then f1, f2, f3, se = a1, b1, c1, e1
      elseif i == 2 then f1, f2, f3, se = a2, b2, c2, e2
      else f1, f2, f3, se = a3, b3, c3, e3
      end
      local rem, reset, at, rec
      if alg == 3 then
        -- f1 w, f2 c, f3 p
        local p, l = r.P, r.L
        local start = now - floormod(now, p)
        local prev, cur
        if f1 == start then prev, cur = f3, f2
        elseif f1 == start - p then prev, cur = f2, 0
        else prev, cur = 0, 0
        end
        local el = now - start
        -- sw_est(prev, cur, el, p) + n <= l, written out
        if not ((prev * (p - el)) / p + cur + n <= l) then return nil end
        cur = cur + n
        if MAXCHARGE < cur then cur = MAXCHARGE end
        rem = floorcount(l - ((prev * (p - el)) / p + cur))
        -- sw_whole, and sw_expiry after apply: the same instant
        if cur > 0 then at = start + 2 * p
        elseif prev > 0 then at = start + p
        else return nil -- an empty state: the loop deletes its record
        end
        reset = resetof(at - now)
        at = ceil(at / 1000) * 1000
        if se > at then at = se end
        -- The record's head ('<id> <e> <w> ') is kept on the rule while e
        -- and w stay the same (a whole window, usually).
        if r.fe ~= at or r.fw ~= start then
          r.fe, r.fw, r.fh = at, start, format('%s %d %d ', r.id, at / 1000, start)
        end
        rec = r.fh .. format('%d %d', cur, prev)
      else
        -- f1 l, f2 t
        local c = r.C
        local lv = drain(r, f1, f2, now)
        if not (lv + n <= c) then return nil end
        lv = lv + n
        -- mt_apply's level is the same (drain is a function of its
        -- arguments) but clamped to MAXCHARGE: a level above it (a capacity
        -- above 2^53, which the Go side never sends) is left to the loop.
        if MAXCHARGE < lv then return nil end
        rem = floorcount(c - lv)
        local wat = whole_at(r, lv, now)
        reset = resetof(wat - now)
        if wat <= now then return nil end -- an empty state: the loop deletes its record
        at = ceil(wat / 1000) * 1000
        if se > at then at = se end
        rec = format('%s %d %.17g %d', r.id, at / 1000, lv, now)
      end
      if out then out[3 * i], out[3 * i + 1], out[3 * i + 2] = 1, rem, reset else rem1, reset1 = rem, reset end
      if val then val = val .. '|' .. rec else val = rec end
      if at > latest then latest = at end
    end
  end

  -- The fixed window, taken last (fw_check on the count before the call).
  if wi ~= 0 then
    if saving then win_save(wkey) end
    local c = pcall_redis('INCRBY', wkey, ns)
    if type(c) ~= 'number' then return nil end -- not a count: the loop reads it
    if not fits(c - n, n, wL) then
      if c == n then call('DEL', wkey) else call('DECRBY', wkey, ns) end
      return nil
    end
    if c == n then win_expire(wkey, wend, wes) end
    local w = wend - now
    if w > MAXWAIT then w = MAXWAIT end
    if out then out[3 * wi], out[3 * wi + 1], out[3 * wi + 2] = 1, subcost(wL, c), w else rem1, reset1 = subcost(wL, c), w end
  end

  call('SET', KEYS[1], val, 'PX', format('%d', pxttl(latest)))

  -- One rule's reply in its short form (CONTRACT.md, "Reply": admitted,
  -- its remaining and reset), as decide_call and put_reply would shorten
  -- the long one.
  if not out then return { rem1, reset1 } end
  -- Decision.Bind of an admitted cost: the least remaining, then the
  -- latest reset.
  if nr > 1 then
    local b = 1
    for i = 2, nr do
      local rem, brem = out[3 * i + 1], out[3 * b + 1]
      if rem < brem or (rem == brem and out[3 * i + 2] > out[3 * b + 2]) then b = i end
    end
    out[2] = b - 1
  end
  return out
end
