-- sliding_log.lua ~ pkg/limit/sliding_log.go: the sliding log, a sorted set
-- that is the state itself (expired entries are gone, see state.lua). Part
-- of the decide script (see decide.lua); defined only when a rule of the
-- call needs it.

local zscore_at, sl_check, sl_apply, sl_expiry
if has_sl then
  function zscore_at(key, rank)
    local v = call('ZRANGE', key, rank, rank, 'WITHSCORES')
    return tonumber(v[2])
  end

  function sl_check(r, n, ref)
    local l, p = r.L, r.P
    local c = call('ZCARD', r.key)
    local ok = false
    if ref then
      ok = true
      c = c - math.min(n, c)
    elseif fits(c, n, l) then
      ok = true
      c = c + n
    end
    local rem = subcost(l, c)
    local reset = 0
    if ok and c == 0 then
      reset = 0
    elseif ok and n > 0 and not ref then
      reset = resetof(p)
    elseif ok or n > l then
      if c > 0 then reset = resetof(zscore_at(r.key, c - 1) + p - now) end
    else
      local k = c + n - l
      reset = resetof(zscore_at(r.key, k - 1) + p - now)
    end
    return ok, rem, reset
  end

  function sl_apply(r, n, ref)
    if ref then
      local m = math.min(n, call('ZCARD', r.key))
      if m > 0 then call('ZREMRANGEBYRANK', r.key, -m, -1) end
      return
    end
    local nows = format('%d', now)
    local stamp = nows .. ':'
    local k = call('ZCOUNT', r.key, nows, nows)
    local args = {}
    local j = 0
    while j < n do
      local digits = format('%d', k + j)
      args[#args + 1] = nows
      args[#args + 1] = stamp .. string.char(96 + #digits) .. digits
      j = j + 1
      if #args >= 1000 or j >= n then
        call('ZADD', r.key, unpack(args))
        args = {}
      end
    end
  end

  function sl_expiry(r)
    local v = call('ZRANGE', r.key, -1, -1, 'WITHSCORES')
    if v[2] == nil then return 0 end
    local at = tonumber(v[2]) + r.P
    if at <= now then return 0 end
    return at
  end
end
