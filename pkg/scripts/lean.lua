-- lean.lua: the lean path, a shortcut for the commonest descriptor -- every
-- rule an epoch-aligned fixed window, each of its own id, taking a cost
-- (mode 0): the incumbent's configuration. It decides such a descriptor as
-- rule.lua, state.lua, fixed.lua and decision.lua do -- same reply, same
-- record, same key, same expiry -- with no table per rule: one MGET, the
-- records parsed in place, one SET ... PX when it admits. Anything else,
-- or a counter key holding anything unusual (a record of another id, one
-- that does not parse, a repeated one), and lean returns nil before
-- writing anything: decide_one then decides the descriptor the general way,
-- in the same call. It uses no function of the general way (arith.lua's
-- helpers are written out here), so that a call it decides does not define
-- them (see general.lua). Part of the decide script (see decide.lua).

-- LEANRULES: at most this many rules take the lean path.
local LEANRULES = 8

-- lean decides the descriptor whose KEYS are KEYS[k0 + 1 .. k0 + nk] and
-- whose slots after na are ARGV[a0 + 1 .. a0 + na] (N, mode, the rules),
-- and returns its reply, or nil when it is not a lean descriptor.
local function lean(KEYS, ARGV, k0, a0, nk, na)
  if nk ~= 1 or ARGV[a0 + 2] ~= '0' then return nil end
  local n = tonumber(ARGV[a0 + 1])
  local nr = (na - 2) / 5
  if n == nil or nr < 1 or nr > LEANRULES or nr ~= floor(nr) then return nil end
  -- x holds, per rule i (from 0), at 6i+1..6i+6: id, L, window start,
  -- window end, count in the window, the record's e (us; 0: none).
  local x = {}
  for i = 0, nr - 1 do
    local b = a0 + 2 + 5 * i
    local L, P, id = tonumber(ARGV[b + 2]), tonumber(ARGV[b + 4]), ARGV[b + 5]
    if ARGV[b + 1] ~= '1' or L == nil or P == nil or P <= 0 or tonumber(ARGV[b + 3]) == nil then
      return nil
    end
    for j = 0, i - 1 do
      if x[6 * j + 1] == id then return nil end -- a shared state
    end
    local m = fmod(now, P) -- floormod
    if m < 0 then m = m + P end
    local start = now - m
    x[6 * i + 1], x[6 * i + 2], x[6 * i + 3], x[6 * i + 4], x[6 * i + 5], x[6 * i + 6] =
      id, L, start, start + P, 0, 0
  end
  local key = KEYS[k0 + 1]
  local v = call('MGET', key)[1]
  if v then
    -- Records "<id> <e> <w> <c>" separated by '|', each of one of the
    -- rules.
    local pos, len = 1, #v
    while true do
      local id, e, w, c, nxt = string.match(v, '^([^ |]+) (%d+) (%d+) (%d+)()', pos)
      if not id then return nil end
      local i = -1
      for j = 0, nr - 1 do
        if x[6 * j + 1] == id then i = j break end
      end
      if i < 0 or x[6 * i + 6] ~= 0 then return nil end -- another id, or twice
      e = tonumber(e) * 1000
      if e > now then -- else expired: the zero state
        x[6 * i + 6] = e
        if tonumber(w) == x[6 * i + 3] then x[6 * i + 5] = tonumber(c) end
      else
        x[6 * i + 6] = -1 -- seen
      end
      if nxt > len then break end
      if string.byte(v, nxt) ~= 124 then return nil end -- '|'
      pos = nxt + 1
    end
  end
  -- Check every rule (fw_check); the reply holds each rule's ok, remaining
  -- and reset from out[3].
  local out = { 1, -1 }
  local allowed = true
  for i = 0, nr - 1 do
    local L, count = x[6 * i + 2], x[6 * i + 5]
    local ok = n <= L and count <= L - n -- fits
    if ok then count = count + n else allowed = false end
    local w = x[6 * i + 4] - now -- resetof
    if w > MAXWAIT then w = MAXWAIT end
    out[3 * i + 3], out[3 * i + 4], out[3 * i + 5] = ok and 1 or 0, count >= L and 0 or L - count, w > 0 and w or 0
  end
  -- Decision.Bind, on the checks (binding is 1-based here), before the
  -- peeks below, as decision.lua binds.
  local binding = -1
  for i = 1, nr do
    local ok, rem, reset = out[3 * i], out[3 * i + 1], out[3 * i + 2]
    if binding < 0 then
      if allowed or ok == 0 then binding = i end
    elseif not allowed then
      if ok == 0 and reset > out[3 * binding + 2] then binding = i end
    elseif rem < out[3 * binding + 1] or (rem == out[3 * binding + 1] and reset > out[3 * binding + 2]) then
      binding = i
    end
  end
  out[2] = binding - 1
  if not allowed then
    -- Nothing was consumed: the rules that alone admitted report a peek.
    out[1] = 0
    for i = 0, nr - 1 do
      if out[3 * i + 3] == 1 then
        local L, count = x[6 * i + 2], x[6 * i + 5]
        out[3 * i + 3], out[3 * i + 4] = count <= L and 1 or 0, count >= L and 0 or L - count
      end
    end
  end
  if allowed and n ~= 0 then
    -- Apply (fw_apply), expiry (fw_expiry: the window's end, never earlier
    -- than the record's e), one SET of every record in rule order.
    local recs, latest = {}, 0
    for i = 0, nr - 1 do
      local e = math.max(x[6 * i + 6], ceil(x[6 * i + 4] / 1000) * 1000)
      recs[i + 1] = format('%s %d %d %d', x[6 * i + 1], e / 1000, x[6 * i + 3], math.min(x[6 * i + 5] + n, MAXCHARGE))
      if e > latest then latest = e end
    end
    local px -- pxttl, in decision.lua
    if testmode then
      px = ceil((latest - now) / 1000) + TEST_TTL_SLACK_MS
    else
      px = ceil(latest / 1000) - floor(now / 1000) + 1
    end
    call('SET', key, table.concat(recs, '|'), 'PX', format('%d', px))
  end
  return out
end
