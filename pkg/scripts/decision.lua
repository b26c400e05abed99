-- decision.lua ~ pkg/limit/decision.go: Check every rule, Bind, Apply to
-- all only if all admitted (a refund and a charge always apply), store each
-- state with its expiry (a read extends a lowered meter's), and reply. Part
-- of the decide script (see decide.lua).

-- keep_writer notes, in the first pass of a batch decided together, that
-- the descriptor being decided (defer.h) wrote key: the first writer of a
-- key puts it in defer.order, every writer in defer.who[key].
local function keep_writer(key)
  local w = defer.who[key]
  if not w then
    w = {}
    defer.who[key] = w
    defer.order[#defer.order + 1] = key
  end
  if w[#w] ~= defer.h then w[#w + 1] = defer.h end
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

-- store stores the state st of its first rule r, which must count until at
-- (us; 0: it is empty): a sliding log sends (or keeps) its changes; a
-- counter state's e becomes at rounded up to the millisecond, never earlier
-- than it was (its record is written with the descriptor's counter key).
local function store(r, st, at)
  if r.alg == 2 then
    sl_store(st, at)
    if defer then keep_writer(r.key) end
  elseif at == 0 then
    st.e = 0
  else
    at = ceil(at / 1000) * 1000
    if at > st.e then st.e = at end
  end
end

-- px_s is the PX of a counter written now (px_now, px_test) that must live
-- until px_at (us), formatted once for the descriptors expiring together.
local px_at, px_now, px_test, px_s

-- decide_rules decides the descriptor whose rules and states read_rules
-- and load_states set (ck: its counter key): Check every rule, Bind, Apply to all only if all
-- admitted, store, and return the descriptor's reply. Each rule's outcome
-- goes straight into the reply (out[3i] allowed as 1/0, out[3i+1]
-- remaining, out[3i+2] reset), which Bind then reads: one table, not one
-- per field. For up to three rules it is built at its size (every slot is
-- set below), so that filling it does not grow it twice.
local function decide_rules(ck)
  local out
  if nrules == 1 then out = { 1, -1, 0, 0, 0 }
  elseif nrules == 2 then out = { 1, -1, 0, 0, 0, 0, 0, 0 }
  elseif nrules == 3 then out = { 1, -1, 0, 0, 0, 0, 0, 0, 0, 0, 0 }
  else out = { 1, -1 }
  end
  local allowed = true
  for i = 1, nrules do
    local r = rules[i]
    local ok, rem, reset = r.check(r, r.st, N, refund)
    if not ok then allowed = false end
    out[3 * i], out[3 * i + 1], out[3 * i + 2] = ok and 1 or 0, rem, reset
  end

  -- Decision.Bind (binding is 1-based here): a descriptor's one rule binds
  local binding, first = -1, 1
  if nrules == 1 then binding, first = 1, 2 end
  for i = first, nrules do
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
    -- Apply every rule, then store each state once with the latest expiry
    -- of its rules (st.x); without a shared state each stores as it applies.
    for i = 1, nrules do
      local r = rules[i]
      local st = r.st
      if st then
        r.apply(r, st, N, refund)
        if not shared then store(r, st, r.expiry(r, st)) end
      end
    end
    if shared then
      for i = 1, nrules do
        local r = rules[i]
        local st = r.st
        if st then
          local at = r.expiry(r, st)
          if not st.x or at > st.x then st.x = at end
        end
      end
      for i = 1, nrules do
        local r = rules[i]
        local st = r.st
        if st and st.own == r then store(r, st, st.x) end
      end
    end
    dirty = true
  else
    if not allowed then
      -- Nothing was consumed: the rules that alone admitted report a peek.
      for i = 1, nrules do
        if out[3 * i] == 1 then
          local r = rules[i]
          local ok, rem, reset = r.check(r, r.st, 0, false)
          out[3 * i], out[3 * i + 1], out[3 * i + 2] = ok and 1 or 0, rem, reset
        end
      end
    end
    -- A read extends the e of a meter whose rate was lowered (the only
    -- state whose expiry depends on the limit).
    for i = 1, nrules do
      local r = rules[i]
      if r.alg == 4 then
        local st = r.st
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
      local st = r.st
      if r.alg ~= 0 and r.alg ~= 2 and st.own == r and st.e > 0 then
        local e = st.e / 1000
        local rec
        if r.alg == 1 then
          local pfx = r.pfx
          if r.pw ~= r.start or r.pe ~= r.wend then pfx = fw_prefix(r) end
          if st.w == r.start and st.e == r.pem then
            -- The record of the current window (state.lua's fw_prefix);
            -- a count below 10^14 is written by .. (%.14g: every digit).
            local c = st.c
            if c < 1e14 then rec = pfx .. c
            else rec = pfx .. format('%d', c)
            end
          else
            rec = format('%s %d %d %d', r.id, e, st.w, st.c)
          end
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
    if v and (latest ~= px_at or now ~= px_now or testmode ~= px_test) then
      px_at, px_now, px_test, px_s = latest, now, testmode, format('%d', pxttl(latest))
    end
    if defer then
      -- The first pass of a batch decided together: kept, not sent.
      if v or found then
        defer.v[ck] = { v, px_s }
        keep_writer(ck)
      end
    elseif v then
      call('SET', ck, v, 'PX', px_s)
    elseif found then
      call('DEL', ck)
    end
  end
  return out
end

