-- rule.lua ~ pkg/limit/rule.go: the rules of the call, read from ARGV (five
-- slots each, ten for a calendar-aligned fixed window; see CONTRACT.md) and
-- given their keys. Part of the decide script (see decide.lua).

-- rc keeps, per rule position, the rules its slots last gave, by id (at
-- most RC_IDS ids a position: then it starts again; rcn counts them),
-- with those slot strings (as, ls, cs, ps): a rule whose slots are the
-- same strings is read again from rc, parsing nothing -- from one
-- descriptor of a batch to the next, and, in a function library, from one
-- call to the next, also when descriptors of different rules alternate.
-- What a rule's table holds for one call (a sliding log's key, a fixed
-- window's start and end, a meter's wl and wat, sh: the position of the
-- first rule of its id) is set again on every read, and its state (st) by
-- every load_states, so a kept rule never carries a value of another
-- call; its record prefix (pfx, state.lua) is kept with the window it was
-- made for (pw, pe). Its algorithm's functions are its check, apply and
-- expiry.
local rc, rcn = {}, {}
local RC_RULES, RC_IDS = 32, 16

-- rules_a0 is the a0 of the slots rules were last read from in this call
-- (nil: none, or a failed read; decide_call clears it): a batch's repeat
-- items have the a0 of the item they repeat, and read no rule again.
local rules_a0

-- shared: two rules of the descriptor share a state (one id), so every
-- rule must apply before any computes its expiry (decision.lua).
local shared

-- none_check is the check of a rule of an unknown unit (alg 0): it keeps no
-- state and admits only what consumes nothing.
local function none_check(r, st, n, ref)
  return n == 0 or ref, 0, 0
end

-- read_rules reads into rules[1 .. nrules] the rules of the descriptor
-- whose slots after its N and mode are ARGV[a0 + 3 .. a0 + na] and whose
-- KEYS are KEYS[k0 + 1 .. k0 + nk], and gives each sliding log its key. It
-- returns an error reply for malformed slots, else nil. rules is one table
-- for the whole call (and, in a function library, for every call): slots
-- past nrules hold earlier descriptors' rules and are never read.
local function read_rules(KEYS, ARGV, k0, a0, nk, na)
  if a0 == rules_a0 then
    -- The slots the rules were read from last, a batch's repeat item: the
    -- same rules, given this descriptor's keys.
    local nkeys = k0 + 1
    for i = 1, nrules do
      local r = rules[i]
      r.wl = false
      if r.alg == 2 then
        nkeys = nkeys + 1
        r.key = KEYS[nkeys]
      end
    end
    if nkeys ~= k0 + nk then
      return redis.error_reply('sluice decide: ' .. nk .. ' KEYS for ' .. nrules .. ' rules')
    end
    return
  end
  rules_a0 = nil
  nrules = 0
  if not rules then rules = {} end
  local last = a0 + na
  local nkeys = k0 + 1 -- KEYS cursor: the last key given to a rule
  local b = a0 + 2 -- ARGV cursor: the slot before this rule's first
  while b < last do
    local i = nrules + 1
    local as, ls, cs, ps, id = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
    local m = rc[i]
    local r = m and id and m[id]
    if not (r and r.as == as and r.ls == ls and r.cs == cs and r.ps == ps) then
      r = { as = as, ls = ls, cs = cs, ps = ps, id = id,
        alg = tonumber(as), L = tonumber(ls), C = tonumber(cs), P = tonumber(ps),
        key = false, start = 0, wend = 0, wl = false, wat = 0, cal = false,
        st = false, sh = 0, pfx = false, pw = false, pe = false, pem = 0,
        check = false, apply = false, expiry = false }
      if r.alg == nil or r.L == nil or r.C == nil or r.P == nil or id == nil then
        return redis.error_reply('sluice decide: bad ARGV for rule ' .. i)
      end
      if r.P <= 0 then r.alg = 0 end
      if r.alg == 5 then r.alg, r.cal = 1, true end
      -- The algorithm's functions, defined when first needed, are the
      -- rule's: decision.lua calls r.check, r.apply and r.expiry.
      local alg = r.alg
      if alg == 1 then
        if not fw_check then define_fw() end
        r.check, r.apply, r.expiry = fw_check, fw_apply, fw_expiry
      elseif alg == 2 then
        if not sl_check then define_sl() end
        r.check, r.apply, r.expiry = sl_check, sl_apply, sl_expiry
      elseif alg == 3 then
        if not sw_check then define_sw() end
        r.check, r.apply, r.expiry = sw_check, sw_apply, sw_expiry
      elseif alg == 4 then
        if not mt_check then define_mt() end
        r.check, r.apply, r.expiry = mt_check, mt_apply, mt_expiry
      else
        r.check = none_check
      end
      if i <= RC_RULES then
        if not m or rcn[i] >= RC_IDS then
          m = {}
          rc[i], rcn[i] = m, 0
        end
        if not m[id] then rcn[i] = rcn[i] + 1 end
        m[id] = r
      end
    end
    local alg = r.alg
    r.wl = false
    if alg == 2 then
      nkeys = nkeys + 1
      r.key = KEYS[nkeys]
    elseif alg == 1 then
      -- The fixed window holding now (window.lua).
      if r.cal then
        local start, wend = calendar_window(ARGV, b, i)
        if not start then return redis.error_reply(wend) end
        r.start, r.wend = start, wend
        b = b + 5
      else
        r.start, r.wend = epoch_window(r.P)
      end
    end
    b = b + 5
    nrules = i
    rules[i] = r
  end
  if b ~= last or nkeys ~= k0 + nk then
    return redis.error_reply('sluice decide: ' .. (na + 1) .. ' ARGV and ' .. nk .. ' KEYS for ' .. nrules .. ' rules')
  end
  -- Rules of one id share one state (state.lua): each rule's sh is the
  -- position of the first rule of its id, its own when it is the first
  -- (or keeps no state: alg 0).
  shared = false
  if nrules > 8 then
    local first = {}
    for i = 1, nrules do
      local r = rules[i]
      local f = i
      if r.alg ~= 0 then
        f = first[r.id]
        if not f then f = i; first[r.id] = i end
      end
      r.sh = f
      if f ~= i then shared = true end
    end
  else
    for i = 1, nrules do
      local r = rules[i]
      local id, f = r.id, i
      if r.alg ~= 0 then
        for j = 1, i - 1 do
          local q = rules[j]
          if q.id == id and q.alg ~= 0 then f = j; break end
        end
      end
      r.sh = f
      if f ~= i then shared = true end
    end
  end
  rules_a0 = a0
end
