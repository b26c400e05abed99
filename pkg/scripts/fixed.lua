-- fixed.lua ~ pkg/limit/fixed.go: the fixed window. Part of the decide
-- script (see decide.lua).

local fw_count, fw_check, fw_apply, fw_expiry
-- define_fw defines the fixed window's functions, when a rule first needs them
-- (read_rules): once per node for a function library, once per call for
-- EVALSHA, and only in the calls that use them.
local function define_fw()
  function fw_count(r, st)
    if st.w == r.start then return st.c end
    return 0
  end

  function fw_check(r, st, n, ref)
    local count = fw_count(r, st)
    local ok = false
    if ref then
      ok = true
      count = subcost(count, n)
    elseif fits(count, n, r.L) then
      ok = true
      count = count + n
    elseif charge then
      count = count + n
      if MAXCHARGE < count then count = MAXCHARGE end -- math.min, inlined
    end
    return ok, subcost(r.L, count), resetof(r.wend - now)
  end

  function fw_apply(r, st, n, ref)
    local count = fw_count(r, st)
    if ref then
      count = subcost(count, n)
    else
      count = count + n
      if MAXCHARGE < count then count = MAXCHARGE end
    end
    st.w, st.c = r.start, count
  end

  function fw_expiry(r, st)
    if st.c > 0 then return r.wend end -- st.w == r.start after apply
    return 0
  end
end
