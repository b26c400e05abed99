-- state.lua ~ pkg/limit/state.go: each rule's state, loaded once per rule
-- id -- the counter records of KEYS[1] (one MGET), and the sliding logs'
-- sorted sets, trimmed of expired members. Part of the decide script (see
-- decide.lua; the record format is in CONTRACT.md).

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
