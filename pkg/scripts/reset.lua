-- reset.lua: the reset script. One call forgets chosen rules' state for one
-- descriptor atomically: it drops the records of the rule ids named in
-- ARGV from the counter string KEYS[1] (keeping the other rules' records
-- and the key's TTL, and deleting the key when nothing is left) and deletes
-- the sliding-log keys KEYS[2..]. A counter key of another type is not
-- sluice's and is left alone. It returns how many records and keys it
-- removed. Its KEYS and ARGV come from the Redis backend's resetArgs; see
-- CONTRACT.md, "The reset script".

local removed = 0
local drop = {}
for i = 1, #ARGV do
  drop[ARGV[i]] = true
end
if redis.call('TYPE', KEYS[1]).ok == 'string' then
  local kept = {}
  local n = 0
  for rec in string.gmatch(redis.call('GET', KEYS[1]), '[^|]+') do
    if drop[string.match(rec, '^[^ ]*')] then
      n = n + 1
    else
      kept[#kept + 1] = rec
    end
  end
  removed = removed + n
  if #kept == 0 then
    redis.call('DEL', KEYS[1])
  elseif n > 0 then
    redis.call('SET', KEYS[1], table.concat(kept, '|'), 'KEEPTTL')
  end
end
for i = 2, #KEYS do
  removed = removed + redis.call('DEL', KEYS[i])
end
return removed
