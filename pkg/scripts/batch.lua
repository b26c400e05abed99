-- batch.lua: closes define_general (general.lua) with decide_general,
-- then decide_one, which decides one descriptor, and decide_call,
-- the entry of every call: one descriptor (the single layout: KEYS and
-- ARGV are the descriptor's), or, when ARGV[2] is "b" or "t", a batch of
-- descriptors, each decided by decide_one on its own keys and slots, in
-- order, exactly as if each were its own call (see CONTRACT.md,
-- "Batches"). Part of the decide script (see decide.lua): the script runs
-- decide_call(KEYS, ARGV); the function library registers it.

  -- decide_general decides one descriptor the general way. Its KEYS and
  -- ARGV are the descriptor's own (ARGV[2] N, ARGV[3] the mode, then the
  -- rules; ARGV[1] is the call's now). It returns the descriptor's reply,
  -- or an error reply.
  function decide_general(KEYS, ARGV)
    N = tonumber(ARGV[2])
    refund = ARGV[3] == '1'
    charge = ARGV[3] == '2' and N ~= 0 -- limit.Cost.Charge (never with a refund)
    if N == nil then
      return redis.error_reply('sluice decide: bad ARGV (now, cost)')
    end
    local err = read_rules(KEYS, ARGV)
    if err then return err end
    load_states(KEYS)
    return decide_rules(KEYS)
  end
end -- define_general (opened in general.lua)

-- decide_one decides one descriptor (KEYS and ARGV as decide_general's):
-- on the window path when it can (lean.lua), else the general way.
local function decide_one(KEYS, ARGV)
  local r = windows(KEYS, ARGV, 0, 1, #KEYS, #ARGV - 1)
  if r then return r end
  if not decide_general then define_general() end
  return decide_general(KEYS, ARGV)
end

-- decide_item decides the descriptor of a batch whose KEYS follow KEYS[k]
-- and whose nk and na are ARGV[a] and ARGV[a + 1]: the window path reads
-- its slots in place; the general way gets copies.
local function decide_item(KEYS, ARGV, k, a, nk, na)
  local r = windows(KEYS, ARGV, k, a + 1, nk, na)
  if r then return r end
  local keys, argv = {}, { ARGV[1] }
  for j = 1, nk do keys[j] = KEYS[k + j] end
  for j = 1, na do argv[j + 1] = ARGV[a + 1 + j] end
  return decide_one(keys, argv)
end

-- decide_call decides one call: it reads the clock once, whatever the
-- number of descriptors, then decides the call's descriptor or each of a
-- batch's.
local function decide_call(KEYS, ARGV)
  tonumber, fmod, floor, ceil, format, call =
    _G.tonumber, math.fmod, math.floor, math.ceil, string.format, redis.call
  -- Effects replication, so that TIME may come before writes (Redis 5 and
  -- 6; Redis 7 always replicates effects, and functions have no choice).
  if redis.replicate_commands then
    redis.replicate_commands()
  end
  testmode = ARGV[1] ~= ''
  saving = nil
  if testmode then
    now = tonumber(ARGV[1])
  else
    local t = call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if now == nil then
    return redis.error_reply('sluice decide: bad ARGV (now, cost)')
  end

  if ARGV[2] ~= 'b' and ARGV[2] ~= 't' then
    return decide_one(KEYS, ARGV)
  end
  -- "t" instead of "b": the batch is decided together (CONTRACT.md, "Batches
  -- decided together"): if any descriptor is denied, none consumes.
  local together = ARGV[2] == 't'

  -- A batch: ARGV[1] now, ARGV[2] "b", then per descriptor: nk (its number of
  -- KEYS), na (its number of slots after na: N, refund, the rules' slots),
  -- and those slots. Its shape is checked whole before any descriptor is
  -- decided, so a malformed batch writes nothing.
  local nargv, nkeys = #ARGV, #KEYS
  local heads = {} -- ARGV index of each descriptor's nk
  do
    local a, k = 2, 0
    while a < nargv do
      local nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
      if nk == nil or na == nil or nk < 1 or na < 2 or a + 2 + na > nargv or k + nk > nkeys then
        return redis.error_reply('sluice decide: bad batch ARGV at slot ' .. (a + 1))
      end
      heads[#heads + 1] = a + 1
      a, k = a + 2 + na, k + nk
    end
    if k ~= nkeys then
      return redis.error_reply('sluice decide: batch names ' .. k .. ' KEYS, got ' .. nkeys)
    end
  end

  -- Together: every key's value and time to live before anything is
  -- decided, so that a denial can put them all back (script time stands
  -- still, so the restored TTLs are exact); the window keys, which are not
  -- in KEYS, are added by the window path before its first write to each.
  local saved
  if together then
    -- Refuse before writing anything when a denial could not be undone.
    if redis.acl_check_cmd and not (redis.acl_check_cmd('RESTORE', KEYS[1], '0', '') and
        redis.acl_check_cmd('DUMP', KEYS[1])) then
      return redis.error_reply('sluice decide: NOPERM: deciding descriptors together needs DUMP and RESTORE, which this Redis user may not run')
    end
    saved = {}
    for j = 1, nkeys do
      local key = KEYS[j]
      if saved[key] == nil then
        saved[key] = { call('DUMP', key), call('PTTL', key) }
      end
    end
    saving = saved
  end

  -- Decide each descriptor in order; together, a denial undoes them all and
  -- decides them again: a refund and a denied charged cost as before, an
  -- admitted cost as a peek, a denied one keeps its reply.
  local replies, args, keyss = {}, {}, {}
  local denied = false
  do
    local k = 0
    for h = 1, #heads do
      local a = heads[h]
      local nk, na = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
      local r
      if together then
        local keys, argv = {}, { ARGV[1] }
        for j = 1, nk do keys[j] = KEYS[k + j] end
        for j = 1, na do argv[j + 1] = ARGV[a + 1 + j] end
        r, args[h], keyss[h] = decide_one(keys, argv), argv, keys
      else
        -- A descriptor's failure is its own, also when a command fails
        -- inside it (a key of the wrong type): the others are decided.
        local ok, e = pcall(decide_item, KEYS, ARGV, k, a, nk, na)
        r = ok and e or { err = type(e) == 'table' and e.err or tostring(e) }
      end
      replies[h] = r
      k = k + nk
      denied = denied or (replies[h].err == nil and replies[h][1] == 0)
    end
  end
  saving = nil
  if together and denied then
    for key, v in pairs(saved) do
      if v[1] then
        call('RESTORE', key, v[2] > 0 and v[2] or 0, v[1], 'REPLACE')
      else
        call('DEL', key)
      end
    end
    for h = 1, #heads do
      local r, argv = replies[h], args[h]
      if r.err == nil then
        local no = r[1] == 0
        if argv[3] == '1' or (argv[3] == '2' and no) then
          replies[h] = decide_one(keyss[h], argv)
        elseif not no then
          argv[2] = '0'
          replies[h] = decide_one(keyss[h], argv)
        end
      end
    end
  end

  -- The reply: each descriptor's reply, one after the other. A descriptor
  -- whose call fails replies -1, the length of the error message, then its
  -- bytes: the others are decided all the same.
  local out, n = {}, 0
  local byte = string.byte
  for h = 1, #heads do
    local r = replies[h]
    if r.err then
      local msg = r.err
      out[n + 1], out[n + 2] = -1, #msg
      n = n + 2
      for j = 1, #msg do out[n + j] = byte(msg, j) end
      n = n + #msg
    else
      for j = 1, #r do out[n + j] = r[j] end
      n = n + #r
    end
  end
  return out
end
