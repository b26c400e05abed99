-- sliding_log.lua ~ pkg/limit/sliding_log.go: the sliding log, a sorted set
-- that is the state itself (expired entries are gone, see sl_load): one
-- entry per admitted or charged request, score = its instant, member
-- "<sum>:<cost>" with sum the running total of costs (limit.LogEntry), so
-- any stretch's cost is a difference of sums and every search is a binary
-- search by rank. Part of the decide script (see decide.lua).
--
-- In the first pass of a batch decided together (defer, decide.lua) a log
-- is loaded once per call and its changes are kept on its state (st.ov)
-- instead of sent: the first keep stored entries stay, the last of them
-- replaced by cut when set, then the entries of add follow. log_entry reads
-- through them, and sl_flush sends them once no descriptor is denied.

local sl_reach, sl_charge, sl_rebase, sl_check, sl_apply, sl_expiry, sl_store, sl_flush
-- define_sl defines the sliding log's functions, when a rule first needs them
-- (read_rules): once per node for a function library, once per call for
-- EVALSHA, and only in the calls that use them; also state.lua's log_entry
-- and sl_load, and sl_store and sl_flush, which decision.lua and batch.lua
-- call.
local function define_sl()
  -- entry reads a member m and its score (limit.LogEntry).
  local function entry(m, score)
    local s, n = string.match(m, '^([^:]+):(%d+)$')
    return { at = tonumber(score), n = tonumber(n) or 0, sum = tonumber(s) or 0, m = m }
  end

  -- log_entry returns the entry of rank j (0-based; -1: the newest) of the
  -- log st as this call sees it, or nil.
  function log_entry(st, j)
    if j < 0 then j = st.cnt + j end
    local ov = st.ov
    if ov then
      if j >= ov.keep then return ov.add[j - ov.keep + 1] end
      if ov.cut and j == ov.keep - 1 then return ov.cut end
    end
    local v = call('ZRANGE', st.key, j, j, 'WITHSCORES')
    if v[2] == nil then return nil end
    return entry(v[1], v[2])
  end

  -- sl_load drops the entries of the log key of period p that no longer
  -- count (t + p <= now), then reads its live entries' count, base (the sum
  -- before the oldest), total cost c and newest entry (logBase). In the
  -- first pass of a batch decided together it loads a key once and keeps
  -- its state for the call's later descriptors.
  function sl_load(key, p)
    local st = defer and defer.logs[key]
    if st then return st end
    call('ZREMRANGEBYSCORE', key, '-inf', format('%d', now - p))
    st = { key = key, cnt = call('ZCARD', key), base = 0, c = 0, last = false, own = false, x = false, ov = false }
    if defer then
      st.ov = { keep = st.cnt, stored = st.cnt, add = {}, cut = false, cutm = false, at = 0 }
      defer.logs[key] = st
    end
    if st.cnt > 0 then
      local first = log_entry(st, 0)
      local last = first
      if st.cnt > 1 then last = log_entry(st, -1) end
      st.base = first.sum - first.n
      st.c = last.sum - st.base
      st.last = last
    end
    return st
  end

  -- sl_pexpire sets a sliding log's expiry to at (us), rounded up to the
  -- ms (the counter key's is decision.lua's pxttl).
  local function sl_pexpire(key, at)
    if testmode then
      call('PEXPIRE', key, format('%d', ceil((at - now) / 1000) + TEST_TTL_SLACK_MS))
    else
      call('PEXPIREAT', key, format('%d', ceil(at / 1000)))
    end
  end

  -- sl_can_expire fails the call before a log gains an entry when the Redis
  -- user may not set its expiry (ACL; Redis 7+, whose scripts can ask): a
  -- log written without one would never go.
  local function sl_can_expire(key)
    local cmd = testmode and 'PEXPIRE' or 'PEXPIREAT'
    if redis.acl_check_cmd and not redis.acl_check_cmd(cmd, key, '0') then
      error({ err = 'NOPERM sluice decide: this Redis user may not run ' .. cmd .. ', which a sliding log needs' })
    end
  end

  -- The three changes sl_apply makes to a log: sl_add appends entry e,
  -- sl_keep keeps its first k entries, sl_put makes e the entry of rank j
  -- in place of old (the newest). Sent at once, or kept on st.ov.
  local function sl_add(st, e)
    local ov = st.ov
    if ov then ov.add[#ov.add + 1] = e return end
    call('ZADD', st.key, format('%d', e.at), e.m)
  end

  local function sl_keep(st, k)
    local ov = st.ov
    if not ov then
      if k == 0 then call('DEL', st.key) else call('ZREMRANGEBYRANK', st.key, k, -1) end
      return
    end
    if k >= ov.keep then
      for i = #ov.add, k - ov.keep + 1, -1 do ov.add[i] = nil end
    else
      ov.keep, ov.add, ov.cut, ov.cutm = k, {}, false, false
    end
  end

  local function sl_put(st, j, e, old)
    local ov = st.ov
    if not ov then
      call('ZREM', st.key, old.m)
      call('ZADD', st.key, format('%d', e.at), e.m)
    elseif j >= ov.keep then
      ov.add[j - ov.keep + 1] = e
    else -- j == ov.keep - 1: sl_keep kept it last
      if not ov.cut then ov.cutm = old.m end
      ov.cut = e
    end
  end

  -- sl_charge returns what a charged cost n adds to a log holding c: n,
  -- capped so the total stays at most 2^53 (logCharge).
  function sl_charge(c, n)
    if c >= MAXCHARGE then return 0 end
    return math.min(n, MAXCHARGE - c)
  end

  -- sl_rebase subtracts the base from every entry's sum, rewriting the
  -- stored log (it changes no decision, so it is sent even in a first
  -- pass) and the entries kept on st.ov, so that sums stay exact integers
  -- (logApply).
  function sl_rebase(st)
    local ov = st.ov
    local v = call('ZRANGE', st.key, 0, -1, 'WITHSCORES')
    call('DEL', st.key)
    local args = {}
    for j = 1, #v, 2 do
      local e = entry(v[j], v[j + 1])
      local m = format('%020.0f:%d', e.sum - st.base, e.n)
      if ov and ov.cut and ov.cutm == v[j] then ov.cutm = m end
      args[#args + 1] = v[j + 1]
      args[#args + 1] = m
      if #args >= 1000 or j + 1 >= #v then
        call('ZADD', st.key, unpack(args))
        args = {}
      end
    end
    local function rebase(e)
      e.sum = e.sum - st.base
      e.m = format('%020.0f:%d', e.sum, e.n)
    end
    if ov then
      if ov.cut then rebase(ov.cut) end
      for i = 1, #ov.add do rebase(ov.add[i]) end
    end
    if not (ov and (ov.cut == st.last or ov.add[#ov.add] == st.last)) then rebase(st.last) end
    st.base = 0
  end

  -- sl_reach returns the first live entry whose sum - base is at least x,
  -- the newest when none is (logReach), and its rank.
  function sl_reach(st, x)
    local lo, hi = 0, st.cnt - 1
    while lo < hi do
      local mid = floor((lo + hi) / 2)
      if log_entry(st, mid).sum - st.base >= x then hi = mid else lo = mid + 1 end
    end
    return log_entry(st, lo), lo
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
    local c = st.c
    if ref then
      local left = c - math.min(n, c)
      if left == 0 then
        if st.cnt > 0 then sl_keep(st, 0) end
        st.cnt, st.base, st.c, st.last = 0, 0, 0, false
        return
      end
      -- Drop every entry after the one holding unit left, and cut that one.
      local j, lo = sl_reach(st, left) -- the entry holding unit left
      if lo < st.cnt - 1 then sl_keep(st, lo + 1) end
      local cut = j.sum - (st.base + left)
      if cut > 0 then
        local e = { at = j.at, n = j.n - cut, sum = j.sum - cut, m = false }
        e.m = format('%020.0f:%d', e.sum, e.n)
        sl_put(st, lo, e, j)
        j = e
      end
      -- Keep st current: a rule sharing this id applies after this one.
      st.cnt, st.c, st.last = lo + 1, left, j
      return
    end
    if not fits(c, n, r.L) then n = sl_charge(c, n) end
    if n == 0 then return end
    sl_can_expire(st.key)
    if st.cnt == 0 then st.base = 0 end
    if st.cnt > 0 and n > MAXCHARGE - st.last.sum then sl_rebase(st) end
    local e = { at = now, n = n, sum = n, m = false }
    if st.cnt > 0 then e.sum = st.last.sum + n end
    e.m = format('%020.0f:%d', e.sum, n)
    sl_add(st, e)
    st.cnt, st.c, st.last = st.cnt + 1, st.c + n, e
  end

  function sl_expiry(r, st)
    if st.cnt == 0 then return 0 end
    local at = st.last.at + r.P
    if at <= now then return 0 end
    return at
  end

  -- sl_store makes the log st expire at at (us; 0: it is empty and goes),
  -- or keeps that for sl_flush.
  function sl_store(st, at)
    if st.ov then
      st.ov.at = at
      return
    end
    if at == 0 then call('DEL', st.key) else sl_pexpire(st.key, at) end
  end

  -- sl_flush sends the changes kept on st.ov (sl_store was called).
  function sl_flush(st)
    local ov, key = st.ov, st.key
    if ov.at == 0 then
      call('DEL', key)
      return
    end
    if ov.keep < ov.stored then call('ZREMRANGEBYRANK', key, ov.keep, -1) end
    if ov.cut then
      call('ZREM', key, ov.cutm)
      call('ZADD', key, format('%d', ov.cut.at), ov.cut.m)
    end
    for i = 1, #ov.add do call('ZADD', key, format('%d', ov.add[i].at), ov.add[i].m) end
    sl_pexpire(key, ov.at)
  end
end
