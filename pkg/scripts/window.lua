-- window.lua ~ pkg/limit/window.go: the fixed window holding now
-- (Rule.Window). Part of the decide script (see decide.lua).

-- epoch_window returns the epoch-aligned window of period p holding now:
-- its start and its end, in us.
local function epoch_window(p)
  local start = now - floormod(now, p)
  return start, start + p
end

-- calendar_window returns the calendar-aligned window holding now for the
-- rule whose slots follow ARGV[b] of the descriptor's ARGV (alg 5: w and the segments s0..s3 the Go
-- side computed around its own clock, see CONTRACT.md), or nil and an
-- error message when the slots are malformed or no segment holds Redis's
-- now (a service clock skewed by more than a window). i names the rule in
-- the message.
local function calendar_window(ARGV, b, i)
  local w = tonumber(ARGV[b + 6])
  local s = { tonumber(ARGV[b + 7]), tonumber(ARGV[b + 8]), tonumber(ARGV[b + 9]), tonumber(ARGV[b + 10]) }
  if w == nil or s[1] == nil or s[2] == nil or s[3] == nil or s[4] == nil then
    return nil, 'sluice decide: bad calendar ARGV for rule ' .. i
  end
  for j = 1, 3 do
    if s[j] <= now and now < s[j + 1] then
      if w == 0 then
        return s[j], s[j + 1]
      end
      local start = now - floormod(now - s[j], w)
      local wend = start + w
      if wend > s[j + 1] then wend = s[j + 1] end
      return start, wend
    end
  end
  return nil, format(
    'sluice decide: Redis time %d us is outside the calendar windows [%d, %d) computed by the service for rule %d: service clock skewed by more than a window',
    now, s[1], s[4], i)
end
