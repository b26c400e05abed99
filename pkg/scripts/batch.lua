-- batch.lua: decide_one, which decides one descriptor, and decide_call, the
-- entry of every call: one descriptor (the single layout: KEYS and ARGV are
-- the descriptor's), or, when ARGV[2] is "b" or "t", a batch of
-- descriptors, each decided by decide_one on its own keys and slots, in
-- order, exactly as if each were its own call (see CONTRACT.md,
-- "Batches"), or decided together ("t": "Batches decided together"). Part
-- of the decide script (see decide.lua): the script runs
-- decide_call(KEYS, ARGV); the function library registers it.

-- cost_n and cost_mode are the N and the mode read from the slots of
-- rules_a0 (rule.lua), which a repeat item's descriptor decides again.
local cost_n, cost_mode

-- decide_one decides the descriptor whose KEYS are KEYS[k0 + 1 .. k0 + nk]
-- and whose slots are ARGV[a0 + 1 .. a0 + na] (N, the mode, then its
-- rules'; ARGV[1] is the call's now), read in place. peek decides it with
-- N = 0. It returns the descriptor's reply, or an error reply.
local function decide_one(KEYS, ARGV, k0, a0, nk, na, peek)
  if a0 ~= rules_a0 then
    cost_n = tonumber(ARGV[a0 + 1])
    if cost_n == nil then
      return redis.error_reply('sluice decide: bad ARGV (now, cost)')
    end
    cost_mode = ARGV[a0 + 2]
  end
  N = cost_n
  if peek then N = 0 end
  refund = cost_mode == '1'
  charge = cost_mode == '2' and N ~= 0 -- limit.Cost.Charge (never with a refund)
  local err = read_rules(KEYS, ARGV, k0, a0, nk, na)
  if err then return err end
  local ck = KEYS[k0 + 1]
  load_states(ck)
  return decide_rules(ck)
end

-- put_error appends to out, after its n-th slot, a failed descriptor's
-- reply: -(2^53 + 2) (no decided descriptor's reply starts with it), the
-- length of the error message msg, then its bytes. It returns out's new
-- length.
local function put_error(out, n, msg)
  local byte = string.byte
  out[n + 1], out[n + 2] = -9007199254740994, #msg
  n = n + 2
  for j = 1, #msg do out[n + j] = byte(msg, j) end
  return n + #msg
end

-- one_rule returns the two integers a descriptor of one rule replies
-- instead of r's five (CONTRACT.md, "Reply"): its remaining when it was
-- admitted, else -1 minus its remaining (exact: a remaining is below
-- 2^53); then its reset.
local function one_rule(r)
  if r[1] == 1 then return r[4], r[5] end
  return -1 - r[4], r[5]
end

-- put_reply appends to out, after its n-th slot, one descriptor's reply r
-- (an error reply as put_error writes it; a descriptor of one rule's as
-- one_rule gives it). It returns out's new length.
local function put_reply(out, n, r)
  if r.err then return put_error(out, n, r.err) end
  local m = #r
  if m == 5 then
    out[n + 1], out[n + 2] = one_rule(r)
    return n + 2
  end
  for j = 1, m do out[n + j] = r[j] end
  return n + m
end

-- guarded decides one descriptor as decide_one does, under pcall: a
-- command failing inside it (a key of the wrong type, a command the Redis
-- user may not run) fails that descriptor alone, { err = message }.
local function guarded(KEYS, ARGV, k0, a0, nk, na, peek)
  local ok, r = pcall(decide_one, KEYS, ARGV, k0, a0, nk, na, peek)
  if ok then return r end
  return { err = type(r) == 'table' and r.err or tostring(r) }
end

-- flush sends what the first pass of a batch decided together kept for
-- key (kept: that pass's defer).
local function flush(kept, key)
  local st = kept.logs[key]
  if st then
    sl_flush(st)
    return
  end
  local v = kept.v[key]
  if v[1] then
    call('SET', key, v[1], 'PX', v[2])
  else
    call('DEL', key)
  end
end

-- batch_items holds a batch's items (decide_call): one table for every
-- call, its slots past the call's items left from earlier calls.
local batch_items = {}

-- decide_call decides one call: it reads the clock once, whatever the
-- number of descriptors, then decides the call's descriptor or each of a
-- batch's.
local function decide_call(KEYS, ARGV)
  if not call then
    tonumber, fmod, floor, ceil, format, call, pcall_redis =
      _G.tonumber, math.fmod, math.floor, math.ceil, string.format, redis.call, redis.pcall
    -- Effects replication, so that TIME may come before writes (Redis 5 and
    -- 6, where only a script runs, which binds on every call; Redis 7 always
    -- replicates effects, and functions have no choice).
    if redis.replicate_commands then
      redis.replicate_commands()
    end
  end
  testmode = ARGV[1] ~= ''
  defer, rules_a0 = nil, nil
  if testmode then
    now = tonumber(ARGV[1])
  else
    local t = call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  if now == nil then
    return redis.error_reply('sluice decide: bad ARGV (now, cost)')
  end

  local kind = ARGV[2]
  if kind ~= 'b' and kind ~= 't' then
    local r = decide_one(KEYS, ARGV, 0, 1, #KEYS, #ARGV - 1)
    if r.err or #r ~= 5 then return r end
    return { one_rule(r) }
  end

  -- A batch: ARGV[1] now, ARGV[2] "b" (or "t"), then per descriptor an
  -- item: nk (its number of KEYS), na (its number of slots after na: N,
  -- the mode, the rules' slots), and those slots; or "=", one slot: the
  -- previous descriptor's nk, na and slots again. Its shape is checked
  -- whole before any descriptor is decided, so a malformed batch writes
  -- nothing. items holds, per descriptor, the index before its KEYS, the
  -- index before its slots (a0), nk and na.
  local nargv, nkeys = #ARGV, #KEYS
  local items, ni = batch_items, 0
  do
    local a, k, nk, na, a0 = 2, 0, nil, nil, nil
    while a < nargv do
      local step
      if ARGV[a + 1] == '=' then
        step = 1 -- nk stays the previous descriptor's (none: refused below)
      else
        if ARGV[a + 1] == '1' and ARGV[a + 2] == '7' then
          nk, na = 1, 7 -- one rule (the commonest), without tonumber
        else
          nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
        end
        if na == nil or na < 2 then nk = nil else step, a0 = 2 + na, a + 2 end
      end
      if nk == nil or nk < 1 or a + step > nargv or k + nk > nkeys then
        return redis.error_reply('sluice decide: bad batch ARGV at slot ' .. (a + 1))
      end
      items[ni + 1], items[ni + 2], items[ni + 3], items[ni + 4] = k, a0, nk, na
      ni = ni + 4
      a, k = a + step, k + nk
    end
    if k ~= nkeys then
      return redis.error_reply('sluice decide: batch names ' .. k .. ' KEYS, got ' .. nkeys)
    end
  end

  local out, n = {}, 0
  if kind == 'b' then
    -- Each descriptor decided in turn; one that fails replies failed and
    -- the others are decided all the same.
    for j = 1, ni, 4 do
      n = put_reply(out, n, guarded(KEYS, ARGV, items[j], items[j + 1], items[j + 2], items[j + 3]))
    end
    return out
  end

  -- Together: a first pass decides every descriptor in order, writing
  -- nothing -- what each would write is kept (defer), and a later
  -- descriptor on the same keys reads it. If none is denied, what was kept
  -- is sent, each key once, its final value. If one is, nothing was
  -- written, and a second pass decides in order: a refund (mode 1) and a
  -- denied charged cost (mode 2) as before, an admitted cost as a peek
  -- (N = 0); a denied descriptor keeps its first reply. A descriptor that
  -- fails replies failed, as in a batch, and is not decided again.
  defer = { v = {}, logs = {}, order = {}, who = {}, h = 0 }
  local replies, denied = {}, false
  for j = 1, ni, 4 do
    local h = (j + 3) / 4
    defer.h = h
    local r = guarded(KEYS, ARGV, items[j], items[j + 1], items[j + 2], items[j + 3])
    replies[h] = r
    if not r.err and r[1] == 0 then denied = true end
  end
  local kept = defer
  defer = nil
  if not denied then
    -- A key whose writes fail fails every descriptor that wrote it.
    for _, key in ipairs(kept.order) do
      local ok, e = pcall(flush, kept, key)
      if not ok then
        for _, h in ipairs(kept.who[key]) do
          replies[h] = { err = type(e) == 'table' and e.err or tostring(e) }
        end
      end
    end
  else
    for j = 1, ni, 4 do
      local h = (j + 3) / 4
      local r = replies[h]
      if not r.err then
        local mode = ARGV[items[j + 1] + 2]
        local no = r[1] == 0
        if mode == '1' or (mode == '2' and no) then
          replies[h] = guarded(KEYS, ARGV, items[j], items[j + 1], items[j + 2], items[j + 3])
        elseif not no then
          replies[h] = guarded(KEYS, ARGV, items[j], items[j + 1], items[j + 2], items[j + 3], true)
        end
      end
    end
  end
  for h = 1, #replies do
    n = put_reply(out, n, replies[h])
  end
  return out
end
