-- arith.lua ~ pkg/limit/arith.go: clamped, floored and ceiled arithmetic
-- shared by every algorithm. Part of the decide script (see decide.lua).

local function floormod(a, b)
  local m = fmod(a, b)
  if m < 0 then m = m + b end
  return m
end

local function floorcount(x) -- floorCount
  if not (x > 0) then return 0 end
  return floor(x)
end

local function ceilmicros(x) -- ceilMicros
  if not (x > 0) then return 0 end
  if x >= MAXWAIT then return MAXWAIT end
  return ceil(x)
end

local function resetof(w) -- resetOf, in us
  if w <= 0 then return 0 end
  if w > MAXWAIT then return MAXWAIT end
  return w
end

local function settle(t, floor, ok) -- settle
  if t <= floor then t = floor + 1 end
  for _ = 1, 4 do
    if ok(t) then break end
    t = t + 1
  end
  for _ = 1, 4 do
    if t - 1 <= floor or not ok(t - 1) then break end
    t = t - 1
  end
  return t
end

local function subcost(a, b)
  if b >= a then return 0 end
  return a - b
end

local function fits(used, n, lim)
  return n <= lim and used <= lim - n
end
