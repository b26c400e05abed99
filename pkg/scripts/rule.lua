-- rule.lua ~ pkg/limit/rule.go: the rules of the call, read from ARGV (five
-- slots each, ten for a calendar-aligned fixed window; see CONTRACT.md) and
-- given their keys. Part of the decide script (see decide.lua).

-- read_rules reads the descriptor's rules from its ARGV into rules, and
-- gives each sliding log its key. A rule's table is built with its five
-- slots, which sizes its hash part to 8 entries; each algorithm adds at
-- most three more fields (a sliding log its key; a fixed window start,
-- wend and wkey; a meter wl and wat, the level after apply and its
-- whole_at), so the table is never resized, and it is built faster than
-- one naming every algorithm's fields. It returns an error reply for malformed slots, else
-- nil.
local function read_rules(KEYS, ARGV)
  nrules, rules = 0, {}
  local nargv = #ARGV
  local nkeys = 1 -- KEYS cursor: the last key given to a rule
  local b = 3 -- ARGV cursor: the slot before this rule's first
  while b < nargv do
    local i = nrules + 1
    local r = {
      alg = tonumber(ARGV[b + 1]),
      L = tonumber(ARGV[b + 2]),
      C = tonumber(ARGV[b + 3]),
      P = tonumber(ARGV[b + 4]),
      id = ARGV[b + 5],
    }
    if r.alg == nil or r.L == nil or r.C == nil or r.P == nil or r.id == nil then
      return redis.error_reply('sluice decide: bad ARGV for rule ' .. i)
    end
    if r.P <= 0 then r.alg = 0 end
    -- The algorithm's functions, defined when first needed.
    if (r.alg == 1 or r.alg == 5) and not fw_check then define_fw()
    elseif r.alg == 2 and not sl_check then define_sl()
    elseif r.alg == 3 and not sw_check then define_sw()
    elseif r.alg == 4 and not mt_check then define_mt()
    end
    if r.alg == 2 then
      nkeys = nkeys + 1
      r.key = KEYS[nkeys]
    end
    -- The fixed window holding now (window.lua).
    if r.alg == 1 then
      r.start, r.wend = epoch_window(r.P)
      -- Its window key (lean.lua): a third field beside start and wend.
      if fmod(r.P, 1000000) == 0 then r.wkey = KEYS[1] .. ':' .. r.id .. ':' .. r.start / 1000000 end
    elseif r.alg == 5 then
      r.alg = 1
      local start, wend = calendar_window(ARGV, b, i)
      if not start then return redis.error_reply(wend) end
      r.start, r.wend = start, wend
      b = b + 5
    end
    b = b + 5
    nrules = i
    rules[i] = r
  end
  if b ~= nargv or nkeys ~= #KEYS then
    return redis.error_reply('sluice decide: ' .. nargv .. ' ARGV and ' .. #KEYS .. ' KEYS for ' .. nrules .. ' rules')
  end
end
