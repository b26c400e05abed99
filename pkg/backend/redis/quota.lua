-- quota.lua: one client's report of one Rate Limit Quota Service bucket,
-- for every rule of the bucket's node, and the share granted to it.
--
-- KEYS[i]  the state of rule i for this bucket: a hash. Every key of one
--          call carries the bucket's hash tag, so they share a slot.
--          field "m<member>" = "<demand> <share> <seen µs> <window> <mine>"
--          per client (mine: its own usage in that window);
--          field "w" = the current window's start (µs), "u" = what all
--          clients used in it (window rules only).
-- ARGV[1]  member: the client (one Envoy stream), unique across instances
-- ARGV[2]  now, µs since the epoch (the caller's clock)
-- ARGV[3]  stale, µs: members not seen since now-stale are dropped
-- then per rule i, ARGV[3+5(i-1)+1 .. +5]:
--          demand (cost per period), limit (per period), window start (µs;
--          0 for a rate rule: no usage kept), used (cost admitted since
--          the member's last report), keep (ms since the epoch: PEXPIREAT)
--
-- Returns per rule: share, used (window's usage after this report), mine
-- (the member's own), members (live, this one included), the demands' sum
-- (a string).
--
-- The share is the member's max-min fair target (what
-- pkg/backend.FairTarget computes), floored, and at most what the other
-- members' shares leave of the limit: so the shares of all members sum to
-- at most the limit. It is a script and not MULTI because the grant reads
-- every member's share: two instances granting at once must not both see
-- the same free part.
local member, now, stale = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local me = 'm' .. member
local out = {}
for i, key in ipairs(KEYS) do
  local a = 3 + 5 * (i - 1)
  local demand = math.max(tonumber(ARGV[a + 1]), 0)
  local limit = tonumber(ARGV[a + 2])
  local window = tonumber(ARGV[a + 3])
  local total, mine_used = 0, 0
  if window > 0 then
    if tonumber(redis.call('HGET', key, 'w') or '0') ~= window then
      redis.call('HSET', key, 'w', ARGV[a + 3], 'u', 0)
    end
    total = redis.call('HINCRBY', key, 'u', ARGV[a + 4])
  end
  local all = redis.call('HGETALL', key)
  local demands, others, sum, gone = {demand}, 0, demand, {}
  for j = 1, #all, 2 do
    local f = all[j]
    if f == me and window > 0 then
      local w, u = string.match(all[j + 1], '^%S+ %S+ %S+ (%S+) (%S+)$')
      if tonumber(w) == window then
        mine_used = tonumber(u)
      end
    elseif string.sub(f, 1, 1) == 'm' and f ~= me then
      local d, s, seen = string.match(all[j + 1], '^(%S+) (%S+) (%S+)')
      if tonumber(seen) < now - stale then
        gone[#gone + 1] = f
      else
        d = math.max(tonumber(d), 0)
        demands[#demands + 1] = d
        others = others + tonumber(s)
        sum = sum + d
      end
    end
  end
  if #gone > 0 then
    redis.call('HDEL', key, unpack(gone))
  end
  table.sort(demands)
  local n, left, mine = #demands, limit, nil
  for k, d in ipairs(demands) do
    local got = math.min(d, left / (n - k + 1))
    left = left - got
    if mine == nil and d == demand then
      mine = got
    end
  end
  local share = math.floor(mine + left / n)
  local free = math.max(limit - others, 0)
  if share > free then
    share = free
  end
  if window > 0 then
    mine_used = mine_used + tonumber(ARGV[a + 4])
  end
  redis.call('HSET', key, me, string.format('%.17g %d %d %d %d', demand, share, now, window, mine_used))
  redis.call('PEXPIREAT', key, ARGV[a + 5])
  out[#out + 1] = share
  out[#out + 1] = total
  out[#out + 1] = mine_used
  out[#out + 1] = n
  out[#out + 1] = string.format('%.17g', sum)
end
return out
