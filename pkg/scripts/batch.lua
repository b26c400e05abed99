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
    local t = take(KEYS, ARGV)
    if t then return t end
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

-- put_back puts back a cost of c (its string cs) that the batch loop
-- took on key, whose INCRBY replied v: DEL when that made the key (v ==
-- c), else DECRBY, whose reply is the count exactly. It returns the count
-- after (0 once deleted) and, when the command failed, its error (then
-- the descriptor ends there, as a raised error would end it under
-- decide_item's pcall).
local function put_back(key, v, c, cs)
  if v == c then
    local r = pcall_redis('DEL', key)
    if type(r) == 'table' then return 0, r end
    return 0, nil
  end
  local r = pcall_redis('DECRBY', key, cs)
  if type(r) == 'table' then return nil, r end
  return r, nil
end

-- decide_batch decides each descriptor of a batch (decided one by one; its
-- shape already checked), in order, and returns the batch's reply: each
-- descriptor's reply, one after the other, written straight into one
-- table. A descriptor whose call fails (an error reply, or a command
-- failing inside it, such as a key of the wrong type) replies as
-- put_error writes it: the others are decided all the same. The commonest
-- descriptors are decided here, each command through redis.pcall (a
-- failure ends the descriptor where the command would have raised, as
-- under decide_item's pcall): one epoch-aligned fixed window taking a cost,
-- as windows' first lines decide it, with what its slots give (numbers,
-- the window, the key's tail) kept from the previous such descriptor when
-- its slots are the same strings; and two or three of distinct ids taking
-- a cost every limit can hold, as win_take decides them. Neither is looked
-- at again for an item "=" (the previous descriptor's slots). Any other
-- goes through decide_item, under pcall.
local function decide_batch(KEYS, ARGV, nargv)
  local out, n = {}, 0
  -- The slots the values below come from (ns0, ls0, ps0: N, L, P; id0:
  -- the rule id), and those values: good (such a descriptor is decided
  -- here), the cost, the limit, the window's end (us, and in s as EXPIREAT
  -- takes it), the reset, the key's tail.
  local ns0, ls0, ps0, id0
  local good, c, L, wend, wends, w, tail
  -- Two or three windows (win_take's descriptor): the number of rules (mr;
  -- 0: the item is not such a one), the cost's slot and number, then per
  -- rule its limit, its window's end (us, and in s as EXPIREAT takes it),
  -- its reset and its key's tail.
  local mr, ms, mc = 0, nil, nil
  local L1, e1, x1, w1, t1, L2, e2, x2, w2, t2, L3, e3, x3, w3, t3
  -- The descriptor's slots: the index before their nk (d), whether it is
  -- decided here (fast), its nk and na; an item "=" keeps the previous.
  local d, fast, nk, na
  local a, k = 2, 0 -- ARGV index before the item; KEYS before its keys
  while a < nargv do
    local step = 1
    if ARGV[a + 1] ~= '=' then
      d, fast, mr = a, false, 0
      local nks, nas = ARGV[a + 1], ARGV[a + 2]
      if WINDOWS and nks == '1' and nas == '7' and ARGV[a + 4] == '0' and ARGV[a + 5] == '1' then
        nk, na = 1, 7
        local ns, ls, ps, id = ARGV[a + 3], ARGV[a + 6], ARGV[a + 8], ARGV[a + 9]
        if ns ~= ns0 or ls ~= ls0 or ps ~= ps0 or id ~= id0 then
          ns0, ls0, ps0, id0 = ns, ls, ps, id
          -- win_rule (lean.lua) keeps what a rule's slots give per
          -- position, here chosen by the period's number of digits (a
          -- second, a minute, an hour... differ): a batch whose
          -- descriptors alternate between a few limits finds each one
          -- kept, and a function library from one call to the next. A
          -- clash only costs computing them again.
          local l, e, t, x = win_rule(4 + #ps % 13, ls, ps, id)
          c = tonumber(ns)
          good = l and c and c > 0 and c <= l
          if good then
            L, wend, tail, wends = l, e, t, x
            w = wend - now
            if w > MAXWAIT then w = MAXWAIT end
          end
        end
        fast = good
      elseif WINDOWS and nks == '1' and (nas == '12' or nas == '17') and ARGV[a + 4] == '0' and
          ARGV[a + 5] == '1' and ARGV[a + 10] == '1' then
        -- win_take's descriptor, checked as win_take checks it (its slots
        -- from ARGV[a + 3]: N, mode, then five per rule); any other falls
        -- to decide_item, which decides it as before.
        nk, na = 1, nas == '12' and 12 or 17
        local i1, i2 = ARGV[a + 9], ARGV[a + 14]
        ms = ARGV[a + 3]
        mc = tonumber(ms)
        if i1 ~= i2 and mc and mc > 0 then
          L1, e1, t1, x1 = win_rule(1, ARGV[a + 6], ARGV[a + 8], i1)
          if L1 and mc <= L1 then
            L2, e2, t2, x2 = win_rule(2, ARGV[a + 11], ARGV[a + 13], i2)
            if L2 and mc <= L2 then
              if na == 12 then
                mr = 2
              else
                local i3 = ARGV[a + 19]
                if ARGV[a + 15] == '1' and i3 ~= i1 and i3 ~= i2 then
                  L3, e3, t3, x3 = win_rule(3, ARGV[a + 16], ARGV[a + 18], i3)
                  if L3 and mc <= L3 then
                    mr = 3
                    w3 = e3 - now
                    if w3 > MAXWAIT then w3 = MAXWAIT end
                  end
                end
              end
              w1, w2 = e1 - now, e2 - now
              if w1 > MAXWAIT then w1 = MAXWAIT end
              if w2 > MAXWAIT then w2 = MAXWAIT end
            end
          end
        end
      else
        nk, na = tonumber(nks), tonumber(nas)
      end
      step = 2 + na
    end
    if fast then
      local key = KEYS[k + 1] .. tail
      local v = pcall_redis('INCRBY', key, ns0)
      if type(v) == 'table' then
        n = put_error(out, n, v.err)
      elseif v <= L then
        if v ~= c then
          out[n + 1], out[n + 2] = L - v, w
          n = n + 2
        else
          local r = win_expire(key, wend, wends, pcall_redis)
          if type(r) == 'table' then
            n = put_error(out, n, r.err)
          else
            out[n + 1], out[n + 2] = L - v, w
            n = n + 2
          end
        end
      else
        -- Put it back, as windows does (DECRBY's reply is exact).
        local bad
        v, bad = put_back(key, v, c, ns0)
        if bad then
          n = put_error(out, n, bad.err)
        else
          out[n + 1], out[n + 2] = v >= L and -1 or -1 - (L - v), w
          n = n + 2
        end
      end
    elseif mr > 0 then
      -- As win_take: every count taken (INCRBY, in rule order); admitted,
      -- each key the call made gets its expiry; denied, each is put back
      -- (DEL of a key the call made, else DECRBY, whose reply is exact).
      -- A command that fails (bad: its error) ends the descriptor there,
      -- as it would have raised in win_take: what ran before it stays.
      local base = KEYS[k + 1]
      local k1, k2, k3 = base .. t1, base .. t2, nil
      local v1, v2, v3 = pcall_redis('INCRBY', k1, ms), nil, nil
      local bad
      if type(v1) == 'table' then
        bad = v1
      else
        v2 = pcall_redis('INCRBY', k2, ms)
        if type(v2) == 'table' then
          bad = v2
        elseif mr == 3 then
          k3 = base .. t3
          v3 = pcall_redis('INCRBY', k3, ms)
          if type(v3) == 'table' then bad = v3 end
        end
      end
      if bad then
        n = put_error(out, n, bad.err)
      elseif v1 <= L1 and v2 <= L2 and (mr == 2 or v3 <= L3) then
        local r
        if v1 == mc then
          r = win_expire(k1, e1, x1, pcall_redis)
          if type(r) == 'table' then bad = r end
        end
        if v2 == mc and not bad then
          r = win_expire(k2, e2, x2, pcall_redis)
          if type(r) == 'table' then bad = r end
        end
        if mr == 3 and v3 == mc and not bad then
          r = win_expire(k3, e3, x3, pcall_redis)
          if type(r) == 'table' then bad = r end
        end
        if bad then
          n = put_error(out, n, bad.err)
        elseif mr == 2 then
          local r1, r2 = L1 - v1, L2 - v2
          -- Decision.Bind: the least remaining, then the latest reset.
          local b = 0
          if r2 < r1 or (r2 == r1 and w2 > w1) then b = 1 end
          out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8] =
            1, b, 1, r1, w1, 1, r2, w2
          n = n + 8
        else
          local r1, r2, r3 = L1 - v1, L2 - v2, L3 - v3
          local b, rb, wb = 0, r1, w1
          if r2 < rb or (r2 == rb and w2 > wb) then b, rb, wb = 1, r2, w2 end
          if r3 < rb or (r3 == rb and w3 > wb) then b = 2 end
          out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8],
            out[n + 9], out[n + 10], out[n + 11] = 1, b, 1, r1, w1, 1, r2, w2, 1, r3, w3
          n = n + 11
        end
      else
        -- Denied: every count put back; the rules that admitted report a
        -- peek.
        local a1, a2, a3 = v1 <= L1, v2 <= L2, mr == 3 and v3 <= L3
        v1, bad = put_back(k1, v1, mc, ms)
        if not bad then v2, bad = put_back(k2, v2, mc, ms) end
        if not bad and mr == 3 then v3, bad = put_back(k3, v3, mc, ms) end
        if bad then
          n = put_error(out, n, bad.err)
        elseif mr == 2 then
          local b = 0
          if a1 or (not a2 and w2 > w1) then b = 1 end
          out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8] =
            0, b, a1 and 1 or 0, v1 >= L1 and 0 or L1 - v1, w1, a2 and 1 or 0, v2 >= L2 and 0 or L2 - v2, w2
          n = n + 8
        else
          -- Decision.Bind on a denial: the denying rule of the latest
          -- reset.
          local b, wb = -1, 0
          if not a1 then b, wb = 0, w1 end
          if not a2 and (b < 0 or w2 > wb) then b, wb = 1, w2 end
          if not a3 and (b < 0 or w3 > wb) then b = 2 end
          out[n + 1], out[n + 2], out[n + 3], out[n + 4], out[n + 5], out[n + 6], out[n + 7], out[n + 8],
            out[n + 9], out[n + 10], out[n + 11] = 0, b, a1 and 1 or 0, v1 >= L1 and 0 or L1 - v1, w1,
            a2 and 1 or 0, v2 >= L2 and 0 or L2 - v2, w2, a3 and 1 or 0, v3 >= L3 and 0 or L3 - v3, w3
          n = n + 11
        end
      end
    else
      local ok, r = pcall(decide_item, KEYS, ARGV, k, d + 1, nk, na)
      if ok then
        n = put_reply(out, n, r)
      else
        n = put_error(out, n, type(r) == 'table' and r.err or tostring(r))
      end
    end
    a, k = a + step, k + nk
  end
  return out
end

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

  local kind = ARGV[2]
  if kind ~= 'b' and kind ~= 't' then
    local r = decide_one(KEYS, ARGV)
    if r.err or #r ~= 5 then return r end
    return { one_rule(r) }
  end
  -- "t" instead of "b": the batch is decided together (CONTRACT.md, "Batches
  -- decided together"): if any descriptor is denied, none consumes.
  local together = kind == 't'

  -- A batch: ARGV[1] now, ARGV[2] "b", then per descriptor an item: nk (its
  -- number of KEYS), na (its number of slots after na: N, refund, the
  -- rules' slots), and those slots; or "=", one slot: the previous
  -- descriptor's nk, na and slots again. Its shape is checked whole before
  -- any descriptor is decided, so a malformed batch writes nothing.
  local nargv, nkeys = #ARGV, #KEYS
  do
    local a, k, nk = 2, 0, nil
    while a < nargv do
      local step
      if ARGV[a + 1] == '=' then
        step = 1 -- nk stays the previous descriptor's (none: refused below)
      else
        local na
        if ARGV[a + 1] == '1' and ARGV[a + 2] == '7' then
          nk, na = 1, 7 -- one rule (the commonest), without tonumber
        else
          nk, na = tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2])
        end
        if na == nil or na < 2 then nk = nil else step = 2 + na end
      end
      if nk == nil or nk < 1 or a + step > nargv or k + nk > nkeys then
        return redis.error_reply('sluice decide: bad batch ARGV at slot ' .. (a + 1))
      end
      a, k = a + step, k + nk
    end
    if k ~= nkeys then
      return redis.error_reply('sluice decide: batch names ' .. k .. ' KEYS, got ' .. nkeys)
    end
  end

  if not together then
    return decide_batch(KEYS, ARGV, nargv)
  end
  -- Together: every key's value and time to live before anything is
  -- decided, so that a denial can put them all back (script time stands
  -- still, so the restored TTLs are exact); the window keys, which are not
  -- in KEYS, are added by the window path before its first write to each.
  -- Refuse before writing anything when a denial could not be undone.
  if redis.acl_check_cmd and not (redis.acl_check_cmd('RESTORE', KEYS[1], '0', '') and
      redis.acl_check_cmd('DUMP', KEYS[1])) then
    return redis.error_reply('sluice decide: NOPERM: deciding descriptors together needs DUMP and RESTORE, which this Redis user may not run')
  end
  local saved = {}
  for j = 1, nkeys do
    local key = KEYS[j]
    if saved[key] == nil then
      saved[key] = { call('DUMP', key), call('PTTL', key) }
    end
  end
  saving = saved

  -- Decide each descriptor in order; a denial undoes them all and decides
  -- them again: a refund and a denied charged cost as before, an admitted
  -- cost as a peek, a denied one keeps its reply. A descriptor whose call
  -- fails (a command failing inside it, such as a key of the wrong type)
  -- replies as in a batch (put_error) and the others are decided all the
  -- same: decide_guarded keeps the failure from ending the whole call
  -- with the descriptors before it decided and their counts taken.
  local function decide_guarded(keys, argv)
    local ok, r = pcall(decide_one, keys, argv)
    if ok then return r end
    return { err = type(r) == 'table' and r.err or tostring(r) }
  end
  local replies, args, keyss = {}, {}, {}
  local denied = false
  do
    local a, k, d = 2, 0, nil -- d: the index before the descriptor's slots' nk
    while a < nargv do
      local step = 1
      if ARGV[a + 1] ~= '=' then
        d, step = a, 2 + tonumber(ARGV[a + 2])
      end
      local nk, na = tonumber(ARGV[d + 1]), tonumber(ARGV[d + 2])
      local keys, argv = {}, { ARGV[1] }
      for j = 1, nk do keys[j] = KEYS[k + j] end
      for j = 1, na do argv[j + 1] = ARGV[d + 2 + j] end
      local h = #replies + 1
      local r = decide_guarded(keys, argv)
      replies[h], args[h], keyss[h] = r, argv, keys
      denied = denied or (r.err == nil and r[1] == 0)
      a, k = a + step, k + nk
    end
  end
  saving = nil
  if denied then
    for key, v in pairs(saved) do
      if v[1] then
        call('RESTORE', key, v[2] > 0 and v[2] or 0, v[1], 'REPLACE')
      else
        call('DEL', key)
      end
    end
    for h = 1, #replies do
      local r, argv = replies[h], args[h]
      if r.err == nil then
        local no = r[1] == 0
        if argv[3] == '1' or (argv[3] == '2' and no) then
          replies[h] = decide_guarded(keyss[h], argv)
        elseif not no then
          argv[2] = '0'
          replies[h] = decide_guarded(keyss[h], argv)
        end
      end
    end
  end

  -- The reply: a batch's (decide_batch).
  local out, n = {}, 0
  for h = 1, #replies do
    n = put_reply(out, n, replies[h])
  end
  return out
end
