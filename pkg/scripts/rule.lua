-- rule.lua ~ pkg/limit/rule.go: the rules of the call, read from ARGV (five
-- slots each, ten for a calendar-aligned fixed window; see CONTRACT.md) and
-- given their keys. Part of the decide script (see decide.lua).

-- rc keeps, per rule position, the rule its slots last gave, with those
-- slot strings (as, ls, cs, ps): a rule whose slots are the same strings
-- is read again from rc, parsing nothing -- from one descriptor of a batch
-- to the next, and, in a function library, from one call to the next.
-- What a rule's table holds for one call (a sliding log's key, a fixed
-- window's start and end, a meter's wl and wat) is set again on every
-- read, so a kept rule never carries a value of another call.
local rc = {}
local RC_RULES = 32

-- read_rules reads into rules the rules of the descriptor whose slots after
-- its N and mode are ARGV[a0 + 3 .. a0 + na] and whose KEYS are
-- KEYS[k0 + 1 .. k0 + nk], and gives each sliding log its key. It returns
-- an error reply for malformed slots, else nil.
local function read_rules(KEYS, ARGV, k0, a0, nk, na)
  nrules, rules = 0, {}
  local last = a0 + na
  local nkeys = k0 + 1 -- KEYS cursor: the last key given to a rule
  local b = a0 + 2 -- ARGV cursor: the slot before this rule's first
  while b < last do
    local i = nrules + 1
    local as, ls, cs, ps, id = ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5]
    local r = rc[i]
    if not (r and r.as == as and r.ls == ls and r.cs == cs and r.ps == ps and r.id == id) then
      r = { as = as, ls = ls, cs = cs, ps = ps, id = id,
        alg = tonumber(as), L = tonumber(ls), C = tonumber(cs), P = tonumber(ps),
        key = false, start = 0, wend = 0, wl = false, wat = 0, cal = false }
      if r.alg == nil or r.L == nil or r.C == nil or r.P == nil or id == nil then
        return redis.error_reply('sluice decide: bad ARGV for rule ' .. i)
      end
      if r.P <= 0 then r.alg = 0 end
      if r.alg == 5 then r.alg, r.cal = 1, true end
      if i <= RC_RULES then rc[i] = r end
    end
    -- The algorithm's functions, defined when first needed.
    local alg = r.alg
    if alg == 1 and not fw_check then define_fw()
    elseif alg == 2 and not sl_check then define_sl()
    elseif alg == 3 and not sw_check then define_sw()
    elseif alg == 4 and not mt_check then define_mt()
    end
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
end
