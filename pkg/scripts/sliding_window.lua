-- sliding_window.lua ~ pkg/limit/sliding_window.go: the sliding window
-- (two fixed windows, the previous one weighted). Part of the decide script
-- (see decide.lua).

local sw_roll, sw_est, sw_whole, sw_check, sw_apply, sw_expiry
-- define_sw defines the sliding window's functions, when a rule first needs them
-- (read_rules): once per node for a function library, once per call for
-- EVALSHA, and only in the calls that use them.
local function define_sw()
  function sw_roll(r, st, t)
    local start = t - floormod(t, r.P)
    if st.w == start then return start, st.p, st.c end
    if st.w == start - r.P then return start, st.c, 0 end
    return start, 0, 0
  end

  function sw_est(prev, cur, e, p)
    return (prev * (p - e)) / p + cur
  end

  function sw_whole(start, p, prev, cur)
    if cur > 0 then return start + 2 * p end
    if prev > 0 then return start + p end
    return now
  end

  function sw_check(r, st, n, ref)
    local p, l = r.P, r.L
    local start, prev, cur = sw_roll(r, st, now)
    local e = now - start
    local ok, charged = false, false
    if ref then
      ok = true
      cur = subcost(cur, n)
    elseif sw_est(prev, cur, e, p) + n <= l then
      ok = true
      cur = cur + n
      if MAXCHARGE < cur then cur = MAXCHARGE end -- math.min, inlined
    elseif charge then
      charged = true
      cur = cur + n
      if MAXCHARGE < cur then cur = MAXCHARGE end
    end
    local rem = floorcount(l - sw_est(prev, cur, e, p))
    if ok or charged or n > l then
      return ok, rem, resetof(sw_whole(start, p, prev, cur) - now)
    end
    local t
    if fits(cur, n, l) then
      t = start + p - floor(((l - cur - n) * p) / prev)
    else
      t = start + 2 * p - floor(((l - n) * p) / cur)
    end
    t = settle(t, now, function(x)
      local s2, pv, cu = sw_roll(r, st, x)
      return sw_est(pv, cu, x - s2, p) + n <= l
    end)
    return ok, rem, resetof(t - now)
  end

  function sw_apply(r, st, n, ref)
    local start, prev, cur = sw_roll(r, st, now)
    if ref then
      cur = subcost(cur, n)
    else
      cur = cur + n
      if MAXCHARGE < cur then cur = MAXCHARGE end
    end
    st.w, st.p, st.c = start, prev, cur
  end

  function sw_expiry(r, st)
    if st.c > 0 then return st.w + 2 * r.P end
    if st.p > 0 then return st.w + r.P end
    return 0
  end
end
