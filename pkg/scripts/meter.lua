-- meter.lua ~ pkg/limit/meter.go: token bucket, leaky bucket and GCRA, one
-- meter (token bucket: tokens = capacity - level; refill = drain, so the
-- token bucket's refill for Redis is computed by drain below, and for the
-- memory backend by drain in pkg/limit/meter.go). Part of the decide script
-- (see decide.lua).

local drain, whole_at, charge_level, mt_check, mt_apply, mt_expiry, mt_fields_expiry
-- define_mt defines the meter's functions, when a rule first needs them
-- (read_rules): once per node for a function library, once per call for
-- EVALSHA, and only in the calls that use them.
local function define_mt()
  function drain(r, level, at, t) -- Rule.drain: the leak, i.e. the refill
    local elapsed = t - at
    if elapsed < 0 then elapsed = 0 end
    if r.L == 0 then
      if elapsed >= r.P then return 0 end
      return level
    end
    local lv = level - (elapsed * r.L) / r.P
    if lv < 0 then return 0 end
    return lv
  end

  function whole_at(r, level, at) -- meterWholeAt
    if not (level > 0) then return at end
    if r.L == 0 then return at + r.P end
    local w = ceilmicros((level * r.P) / r.L)
    if w >= MAXWAIT - at then return MAXWAIT end -- the latest instant (2^53)
    -- settle(at + w, at, function(x) return drain(r, level, at, x) <= 0 end),
    -- written out: every admitted cost computes it, and a closure per call
    -- costs more than the loops.
    local t = at + w
    if t <= at then t = at + 1 end
    for _ = 1, 4 do
      if drain(r, level, at, t) <= 0 then break end
      t = t + 1
    end
    for _ = 1, 4 do
      if t - 1 <= at or not (drain(r, level, at, t - 1) <= 0) then break end
      t = t - 1
    end
    return t
  end

  -- charge_level (Rule.chargeLevel): the level after a charged cost n that
  -- does not fit on level lv, at most one period's drain (L) above the
  -- capacity, never below lv.
  function charge_level(r, lv, n)
    local top = r.C + r.L
    if MAXCHARGE < top then top = MAXCHARGE end
    if top < lv then top = lv end
    lv = lv + n
    if top < lv then lv = top end
    return lv
  end

  function mt_check(r, st, n, ref)
    local c = r.C
    local lv = drain(r, st.l, st.t, now)
    local ok, charged = false, false
    if ref then
      ok = true
      lv = lv - n
      if not (lv > 0) then lv = 0 end -- math.max(0, lv), inlined
    elseif lv + n <= c then
      ok = true
      lv = lv + n
    elseif charge then
      charged = true
      lv = charge_level(r, lv, n)
    end
    local rem = floorcount(c - lv)
    local reset
    if (ok or charged) and n > 0 then
      -- After Apply the state is (lv, now): keep its whole_at for mt_expiry.
      r.wl, r.wat = lv, whole_at(r, lv, now)
      reset = resetof(r.wat - now)
    elseif ok or n > c then
      reset = resetof(whole_at(r, st.l, st.t) - now)
    elseif r.L == 0 then
      reset = resetof(st.t + r.P - now)
    else
      local w = ceilmicros(((lv + n - c) * r.P) / r.L)
      if w >= MAXWAIT - now then
        reset = resetof(MAXWAIT - now)
      else
        local t = settle(now + w, now, function(x) return drain(r, st.l, st.t, x) + n <= c end)
        reset = resetof(t - now)
      end
    end
    return ok, rem, reset
  end

  function mt_apply(r, st, n, ref)
    local lv = drain(r, st.l, st.t, now)
    if ref then
      lv = lv - n
      if not (lv > 0) then lv = 0 end
    elseif lv + n <= r.C then
      lv = lv + n
    else
      lv = charge_level(r, lv, n)
    end
    st.l, st.t = lv, now
  end

  -- mt_fields_expiry is the instant from which the state's fields are empty
  -- (limit.Rule.fieldsExpiry): a read extends e to it (a lowered rate).
  function mt_fields_expiry(r, st)
    local at = whole_at(r, st.l, st.t)
    if at <= now then return 0 end
    return at
  end

  function mt_expiry(r, st)
    local at
    if st.t == now and st.l == r.wl then
      at = r.wat
    else
      at = whole_at(r, st.l, st.t)
    end
    if at <= now then return 0 end
    return at
  end
end
