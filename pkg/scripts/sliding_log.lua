-- sliding_log.lua ~ pkg/limit/sliding_log.go: the sliding log, a sorted set
-- that is the state itself (expired entries are gone, see state.lua): one
-- entry per admitted or charged request, score = its instant, member
-- "<sum>:<cost>" with sum the running total of costs (limit.LogEntry), so
-- any stretch's cost is a difference of sums and every search is a binary
-- search by rank. Part of the decide script (see decide.lua).

local sl_reach, sl_charge, sl_rebase, sl_check, sl_apply, sl_expiry, sl_pexpire
-- define_sl defines the sliding log's functions, when a rule first needs them
-- (read_rules): once per node for a function library, once per call for
-- EVALSHA, and only in the calls that use them; also state.lua's log_entry
-- and sl_load, and sl_pexpire, which decision.lua calls.
local function define_sl()
  -- log_entry reads the entry of rank j (0-based; -1: the newest) of the
  -- sliding log key (limit.LogEntry): score = its instant, member
  -- "<sum>:<cost>" (the running sum as 20 digits, so that entries of one
  -- instant order by it, then the cost).
  function log_entry(key, j)
    local v = call('ZRANGE', key, j, j, 'WITHSCORES')
    if v[2] == nil then return nil end
    local s, n = string.match(v[1], '^([^:]+):(%d+)$')
    return { at = tonumber(v[2]), n = tonumber(n) or 0, sum = tonumber(s) or 0, m = v[1] }
  end

  -- sl_load reads a sliding log's live entries' count, base (the sum before
  -- the oldest), total cost c and newest entry (logBase).
  function sl_load(key)
    local st = { key = key, cnt = call('ZCARD', key), base = 0, c = 0, last = false, own = false, x = false }
    if st.cnt > 0 then
      local first = log_entry(key, 0)
      local last = first
      if st.cnt > 1 then last = log_entry(key, -1) end
      st.base = first.sum - first.n
      st.c = last.sum - st.base
      st.last = last
    end
    return st
  end

  -- sl_pexpire sets a sliding log's expiry to at (us), rounded up to the
  -- ms (the counter key's is decision.lua's pxttl).
  function sl_pexpire(key, at)
    if testmode then
      call('PEXPIRE', key, format('%d', ceil((at - now) / 1000) + TEST_TTL_SLACK_MS))
    else
      call('PEXPIREAT', key, format('%d', ceil(at / 1000)))
    end
  end

  -- sl_charge returns what a charged cost n adds to a log holding c: n,
  -- capped so the total stays at most 2^53 (logCharge).
  function sl_charge(c, n)
    if c >= MAXCHARGE then return 0 end
    return math.min(n, MAXCHARGE - c)
  end

  -- sl_rebase subtracts the base from every entry's sum, rewriting the
  -- log, so that sums stay exact integers (logApply).
  function sl_rebase(st)
    local v = call('ZRANGE', st.key, 0, -1, 'WITHSCORES')
    call('DEL', st.key)
    local args = {}
    for j = 1, #v, 2 do
      local s, n = string.match(v[j], '^([^:]+):(%d+)$')
      args[#args + 1] = v[j + 1]
      args[#args + 1] = format('%020.0f:%d', (tonumber(s) or 0) - st.base, tonumber(n) or 0)
      if #args >= 1000 or j + 1 >= #v then
        call('ZADD', st.key, unpack(args))
        args = {}
      end
    end
    st.last.sum = st.last.sum - st.base
    st.last.m = format('%020.0f:%d', st.last.sum, st.last.n)
    st.base = 0
  end

  -- sl_reach returns the first live entry whose sum - base is at least x,
  -- the newest when none is (logReach).
  function sl_reach(st, x)
    local lo, hi = 0, st.cnt - 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if log_entry(st.key, mid).sum - st.base >= x then hi = mid else lo = mid + 1 end
    end
    return log_entry(st.key, lo)
  end

  function sl_check(r, st, n, ref)
    local l, p = r.L, r.P
    local c = st.c
    local ok = false
    local reset = 0
    if ref then
      ok = true
      c = c - math.min(n, c)
      if c > 0 then reset = resetof(sl_reach(st, c).at + p - now) end
    elseif fits(c, n, l) then
      ok = true
      c = c + n
      if n > 0 then
        reset = resetof(p) -- the newest entry is now
      elseif c > 0 then
        reset = resetof(st.last.at + p - now)
      end
    elseif charge then
      c = c + sl_charge(c, n)
      reset = resetof(p)
    elseif n > l then
      if c > 0 then reset = resetof(st.last.at + p - now) end
    else
      reset = resetof(sl_reach(st, c - (l - n)).at + p - now) -- the k oldest units must leave
    end
    return ok, subcost(l, c), reset
  end

  function sl_apply(r, st, n, ref)
    local key, c = st.key, st.c
    if ref then
      local left = c - math.min(n, c)
      if left == 0 then
        if st.cnt > 0 then call('DEL', key) end
        st.cnt, st.base, st.c, st.last = 0, 0, 0, false
        return
      end
      -- Drop every entry after the one holding unit left, and cut that one.
      local j, lo, hi = 0, 0, st.cnt - 1
      while lo < hi do
        local mid = floor((lo + hi) / 2)
        if log_entry(key, mid).sum - st.base >= left then hi = mid else lo = mid + 1 end
      end
      j = lo
      if j < st.cnt - 1 then call('ZREMRANGEBYRANK', key, j + 1, -1) end
      local e = log_entry(key, j)
      local cut = e.sum - (st.base + left)
      if cut > 0 then
        call('ZREM', key, e.m)
        e.sum, e.n = e.sum - cut, e.n - cut
        e.m = format('%020.0f:%d', e.sum, e.n)
        call('ZADD', key, format('%d', e.at), e.m)
      end
      -- Keep st current: a rule sharing this id applies after this one.
      st.cnt, st.c, st.last = j + 1, left, e
      return
    end
    if not fits(c, n, r.L) then n = sl_charge(c, n) end
    if n == 0 then return end
    if st.cnt == 0 then st.base = 0 end
    if st.cnt > 0 and n > MAXCHARGE - st.last.sum then sl_rebase(st) end
    local e = { at = now, n = n, sum = n, m = false }
    if st.cnt > 0 then e.sum = st.last.sum + n end
    e.m = format('%020.0f:%d', e.sum, n)
    call('ZADD', key, format('%d', now), e.m)
    st.cnt, st.c, st.last = st.cnt + 1, st.c + n, e
  end

  function sl_expiry(r, st)
    if st.cnt == 0 then return 0 end
    local at = st.last.at + r.P
    if at <= now then return 0 end
    return at
  end
end
