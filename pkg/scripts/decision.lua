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

-- expire sets a sliding log's expiry to at (us), rounded up to the ms.
local function expire(key, at)
  if testmode then
    call('PEXPIRE', key, format('%d', ceil((at - now) / 1000) + TEST_TTL_SLACK_MS))
  else
    call('PEXPIREAT', key, format('%d', ceil(at / 1000)))
  end
end

-- decide_rules decides the descriptor whose rules and states read_rules
-- and load_states set: Check every rule, Bind, Apply to all only if all
-- admitted, store, and return the descriptor's reply.
local function decide_rules(KEYS)
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
    -- of their expiries, and never earlier than the e it had.
    local expiry = {}
    for i = 1, nrules do
      local r = rules[i]
      if r.alg ~= 0 then
        local at
        if r.alg == 1 then at = fw_expiry(r, states[r.id])
        elseif r.alg == 2 then at = sl_expiry(r, states[r.id])
        elseif r.alg == 3 then at = sw_expiry(r, states[r.id])
        else at = mt_expiry(r, states[r.id])
        end
        if expiry[r.id] == nil or at > expiry[r.id] then expiry[r.id] = at end
      end
    end
    for i = 1, nrules do
      local r = rules[i]
      local id = r.id
      if r.alg ~= 0 and owner[id] == r then
        local at = expiry[id]
        if r.alg == 2 then
          if at == 0 then call('DEL', r.key) else expire(r.key, at) end
        elseif at == 0 then
          states[id].e = 0
        else
          states[id].e = math.max(states[id].e, ceil(at / 1000) * 1000)
        end
      end
    end
    dirty = true
  else
    if not allowed then
      -- Nothing was consumed: the rules that alone admitted report a peek.
      for i = 1, nrules do
        if ok[i] then
          ok[i], rem[i], reset[i] = check(rules[i], 0, false)
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

  -- Counters: this call's records, then the others kept, in one SET.
  if dirty and ncounters > 0 then
    local recs, latest = {}, 0
    for i = 1, nrules do
      local r = rules[i]
      local id = r.id
      local st = states[id]
      if r.alg ~= 0 and r.alg ~= 2 and owner[id] == r and st.e > 0 then
        local e = st.e / 1000
        if r.alg == 1 then
          recs[#recs + 1] = format('%s %d %d %d', id, e, st.w, st.c)
        elseif r.alg == 3 then
          recs[#recs + 1] = format('%s %d %d %d %d', id, e, st.w, st.c, st.p)
        else
          recs[#recs + 1] = format('%s %d %.17g %d', id, e, st.l, st.t)
        end
        if st.e > latest then latest = st.e end
      end
    end
    for j = 1, #others do
      recs[#recs + 1] = others[j][1]
      if others[j][2] > latest then latest = others[j][2] end
    end
    if #recs > 0 then
      call('SET', KEYS[1], table.concat(recs, '|'), 'PX', format('%d', pxttl(latest)))
    elseif found then
      call('DEL', KEYS[1])
    end
  end

  local out = { allowed and 1 or 0, binding < 0 and -1 or binding - 1 }
  for i = 1, nrules do
    out[3 * i] = ok[i] and 1 or 0
    out[3 * i + 1] = rem[i]
    out[3 * i + 2] = reset[i]
  end
  return out
end
