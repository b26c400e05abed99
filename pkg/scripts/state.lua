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

-- The descriptor's states, set by load_states: states by rule id, how
-- many ids keep a counter record, whether KEYS[1] held a counter string,
-- the kept records of other ids ({ rec, at (us), id }; false when there
-- are none, the usual case, so that no table is built for them), and
-- whether more than MAXOTHERS of those were dropped.
local states, ncounters, found, others, trimmed

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
  local pos, len = 1, #v
  while pos <= len do
    local id, e, x, y, z, nxt = string.match(v,
      '^([^%s|]+) (%d+) ([0-9.e+-]+) ([0-9.e+-]+) ?([0-9.e+-]*)()', pos)
    if id and (nxt > len or string.byte(v, nxt) == 124) then -- '|'
      local st = states[id]
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

-- load_states loads the state of each rule id of the descriptor: the
-- counter records of its counter key ck (one GET) and the sliding logs'
-- sorted sets.
local function load_states(ck)
  states, ncounters = {}, 0
  for i = 1, nrules do
    local r = rules[i]
    if r.alg ~= 0 and states[r.id] == nil then
      local st
      if r.alg == 2 then
        -- The sorted set is the state, its expired entries dropped
        -- (sliding_log.lua).
        st = sl_load(r.key, r.P)
      else
        st = { w = 0, c = 0, p = 0, l = 0, t = 0, e = 0, own = false, x = false }
        ncounters = ncounters + 1
      end
      st.own, st.x = r, false
      states[r.id] = st
    end
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
      read_records(v)
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
