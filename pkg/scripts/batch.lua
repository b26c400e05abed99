-- batch.lua: closes decide_one (opened in decide.lua) and decides the
-- call: one descriptor (the single layout: KEYS and ARGV are the
-- descriptor's), or, when ARGV[2] is "b", a batch of descriptors, each
-- decided by decide_one on its own keys and slots, in order, exactly as if
-- each were its own call (see CONTRACT.md, "Batches"). Part of the decide
-- script (see decide.lua).

end -- decide_one

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
-- still, so the restored TTLs are exact).
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
    local keys, argv = {}, { ARGV[1] }
    for j = 1, nk do keys[j] = KEYS[k + j] end
    for j = 1, na do argv[j + 1] = ARGV[a + 1 + j] end
    k = k + nk
    local r
    if together then
      r = decide_one(keys, argv)
    else
      -- A descriptor's failure is its own, also when a command fails
      -- inside it (a key of the wrong type): the others are decided.
      local ok, e = pcall(decide_one, keys, argv)
      r = ok and e or { err = type(e) == 'table' and e.err or tostring(e) }
    end
    replies[h], args[h], keyss[h] = r, argv, keys
    denied = denied or (replies[h].err == nil and replies[h][1] == 0)
  end
end
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
