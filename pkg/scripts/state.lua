-- state.lua ~ pkg/limit/state.go: each rule's state, loaded once per rule
-- id -- the counter records of KEYS[1] (one GET), and the sliding logs'
-- sorted sets, trimmed of expired members. Part of the decide script (see
-- decide.lua; the record format is in CONTRACT.md).

-- States are loaded once per rule id and shared by rules with the same
-- id, as pkg/limit shares one State between them. Counter states come from
-- the records of KEYS[1], read with one GET through redis.pcall, so that a
-- key of another type reads as empty instead of failing the call (anything
-- but a counter string reads as empty). others keeps the records of ids
-- this call does not name. A state's e (us, a whole ms) is
-- limit.State.Expires: the record counts until then, and reads as empty
-- from then on. Every state also holds own, the first rule of its id
-- (the one that stores it), and x, the latest expiry its rules compute
-- when they apply (decision.lua; false until then), so that a call builds
-- no table per rule id beside the state itself.
-- log_entry and sl_load read a sliding log's sorted set; sliding_log.lua's
-- define_sl sets them, run by read_rules for a call naming a sliding log,
-- the only calls that load one (a script run with EVALSHA creates them
-- only then).
local log_entry, sl_load

-- The descriptor's states, set by load_states: each rule's state is its
-- st (false for a rule of no state: an unknown unit), shared by the rules
-- of one id; how many ids keep a counter record, whether KEYS[1] held a
-- counter string, the kept records of other ids ({ rec, at (us), id };
-- false when there are none, the usual case, so that no table is built for
-- them), and whether more than MAXOTHERS of those were dropped.
local ncounters, found, others, trimmed

-- stpool[i], the counter state of the i-th rule when it owns one, is kept
-- from descriptor to descriptor and call to call (every field set anew).
local stpool = {}

-- state_of returns the state of rule id, or nil when the descriptor names
-- no rule of that id: for read_records, which reads a value fw_records
-- could not (a new window, records of other ids or algorithms). byid maps
-- ids to states for a descriptor of many rules (built on first use).
local byid
local function state_of(id)
  if nrules <= 8 then
    for i = 1, nrules do
      local r = rules[i]
      if r.id == id then return r.st or nil end
    end
    return nil
  end
  if not byid then
    byid = {}
    for i = nrules, 1, -1 do
      local r = rules[i]
      if r.st then byid[r.id] = r.st end
    end
  end
  return byid[id]
end

-- fw_prefix makes "<id> <e> <w> ", the start of the record of r's current
-- window (a fixed window's), kept in r as pfx (and e in us as pem) for
-- the window it was made for (pw, pe: callers test them to skip the call).
local function fw_prefix(r)
  r.pw, r.pe, r.pem = r.start, r.wend, ceil(r.wend / 1000) * 1000
  r.pfx = format('%s %d %d ', r.id, r.pem / 1000, r.start)
  return r.pfx
end

-- fw_undo zeroes the states fw_records set before rule i; returns false.
local function fw_undo(i)
  for j = 1, i - 1 do
    local r = rules[j]
    if r.sh == j and r.alg == 1 then
      local st = r.st
      st.w, st.c, st.e = 0, 0, 0
    end
  end
  return false
end

-- fw_records reads v when it holds exactly one record per counter state,
-- in rule order, each a fixed window's of its current window (fw_prefix,
-- then digits), as fixed windows store it: compared, not parsed, it reads
-- as read_records would. Else it returns false, the states left as
-- load_states set them, and read_records reads v.
local function fw_records(v)
  local pos = 1
  for i = 1, nrules do
    local r = rules[i]
    local alg = r.alg
    if r.sh == i and alg ~= 0 and alg ~= 2 then
      if alg ~= 1 then return fw_undo(i) end
      if pos > 1 then
        if string.byte(v, pos) ~= 124 then return fw_undo(i) end -- '|'
        pos = pos + 1
      end
      local pfx = r.pfx
      if r.pw ~= r.start or r.pe ~= r.wend then pfx = fw_prefix(r) end
      if string.find(v, pfx, pos, true) ~= pos then return fw_undo(i) end
      local c, nxt = string.match(v, '^(%d+)()', pos + #pfx)
      if not c then return fw_undo(i) end
      local st = r.st
      st.w, st.c, st.e = r.start, tonumber(c), r.pem
      pos = nxt
    end
  end
  if pos == 1 or pos ~= #v + 1 then return fw_undo(nrules + 1) end
  return true
end

-- read_records loads the records of the counter value v (KEYS[1]), each
-- into its rule's state, or keeps it in others when this call names no
-- rule of its id. Records are the runs of v between '|'s (empty runs are
-- skipped); fields are decimals (a meter's level may have '.', 'e' and
-- signs): a record holding anything else, such as "nan" or "inf" that
-- tonumber would take, does not match and reads as empty.
--
-- Each record is matched in place, with one string.match from its first
-- byte, instead of being cut out of v first: the id class [^%s|] is %S
-- less the separator, so the match cannot run into the next record, and a
-- match counts only when it ends at a '|' or at the end of v, as an
-- anchored match of the cut-out record would ($). Every field's class
-- excludes the space that follows it, so a match is the one decomposition
-- of the record, and a record that does not match is skipped up to the
-- next '|'. [0-9.e+-] is [-+.%de] (the same bytes), spelled so that Lua's
-- matcher tests a digit first, with a range.
local function read_records(v)
  byid = nil
  local pos, len = 1, #v
  while pos <= len do
    local id, e, x, y, z, nxt = string.match(v,
      '^([^%s|]+) (%d+) ([0-9.e+-]+) ([0-9.e+-]+) ?([0-9.e+-]*)()', pos)
    if id and (nxt > len or string.byte(v, nxt) == 124) then -- '|'
      local st = state_of(id)
      local at = tonumber(e) * 1000
      if at > now then -- else expired: the zero state
        if st then
          st.e = at
          local alg = st.own.alg
          if alg == 4 then
            st.l, st.t = tonumber(x) or 0, tonumber(y) or 0
          else
            st.w, st.c = tonumber(x) or 0, tonumber(y) or 0
            -- Only a sliding window reads p (a fixed window's is never used).
            if alg == 3 then st.p = tonumber(z) or 0 end
          end
        else
          if not others then others = {} end
          others[#others + 1] = { string.sub(v, pos, nxt - 1), at, id }
        end
      end
      pos = nxt + 1
    else
      local bar = string.find(v, '|', pos, true)
      if not bar then return end
      pos = bar + 1
    end
  end
end

-- load_states loads the state of each rule id of the descriptor, into
-- each rule's st: the counter records of its counter key ck (one GET) and
-- the sliding logs' sorted sets.
local function load_states(ck)
  ncounters = 0
  for i = 1, nrules do
    local r = rules[i]
    local st = false
    if r.alg ~= 0 then
      if r.sh ~= i then
        st = rules[r.sh].st -- a rule of the same id came first
      else
        if r.alg == 2 then
          -- The sorted set is the state, its expired entries dropped
          -- (sliding_log.lua).
          st = sl_load(r.key, r.P)
        else
          st = stpool[i]
          if not st then
            st = { w = 0, c = 0, p = 0, l = 0, t = 0, e = 0, own = false, x = false }
            stpool[i] = st
          else
            st.w, st.c, st.p, st.l, st.t, st.e = 0, 0, 0, 0, 0, 0
          end
          ncounters = ncounters + 1
        end
        st.own, st.x = r, false
      end
    end
    r.st = st
  end
  found, others, trimmed = false, false, false

  if ncounters > 0 then
    -- GET, not MGET (whose reply is a table): redis.pcall returns a key of
    -- another type's WRONGTYPE error as a table, which reads as empty. In
    -- the first pass of a batch decided together, a value kept for the key
    -- is read instead.
    local v
    local kept = defer and defer.v[ck]
    if kept then v = kept[1] else v = pcall_redis('GET', ck) end
    if type(v) == 'string' then
      found = true
      if not fw_records(v) then read_records(v) end
    end
  end

  -- Beyond MAXOTHERS records of other ids, keep those that expire first
  -- (ties: the smaller id) and rewrite the key without the rest, whatever
  -- the decision (backend.MaxOtherStates).
  if others and #others > MAXOTHERS then
    table.sort(others, function(a, b)
      if a[2] ~= b[2] then return a[2] < b[2] end
      return a[3] < b[3]
    end)
    for j = #others, MAXOTHERS + 1, -1 do others[j] = nil end
    trimmed = true
  end
end
