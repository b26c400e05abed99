-- reset.lua: the reset script. One call forgets chosen rules' state for one
-- descriptor atomically: it deletes the window key of each epoch-aligned
-- fixed window named in ARGV for the window holding now (lean.lua), drops
-- the records of the rule ids named from the counter string KEYS[1]
-- (keeping the other rules' records and the key's TTL, and deleting the key
-- when nothing is left) and deletes the sliding-log keys KEYS[2..]. A
-- counter key of another type is not sluice's and is left alone. ARGV[1]
-- is now (test-only instant in us; "" reads Redis's clock, as the decide
-- script does), then per rule its id and its period in us (0 for a rule
-- without window keys). It returns how many records and keys it removed.
-- Its KEYS and ARGV come from the Redis backend's resetArgs; see CONTRACT.md, "The
-- reset script".

if redis.replicate_commands then
  redis.replicate_commands() -- TIME before writes (Redis 5 and 6)
end
local now = tonumber(ARGV[1])
if ARGV[1] == '' then
  local t = redis.call('TIME')
  now = tonumber(t[1]) * 1000000 + tonumber(t[2])
end
if now == nil or #ARGV % 2 ~= 1 then
  return redis.error_reply('sluice reset: bad ARGV')
end
local removed = 0
local drop = {}
for i = 2, #ARGV, 2 do
  local id, P = ARGV[i], tonumber(ARGV[i + 1])
  drop[id] = true
  if P and P > 0 and math.fmod(P, 1000000) == 0 then
    local m = math.fmod(now, P)
    if m < 0 then m = m + P end
    removed = removed + redis.call('DEL', KEYS[1] .. ':' .. id .. ':' .. (now - m) / 1000000)
  end
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
