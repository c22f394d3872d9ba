-- Shared by bucket.lua's form for several limits and path.lua (see
-- luainclude.go), after arith.lua and with now, Redis's clock in
-- microseconds. until_us is how long until a limit's debt has fallen by x
-- ticks (a stepped limit's: events, at the start of a window), 0 if x <= 0.
local function until_us(x, ticks_per_us, step)
  if x <= 0 then return 0 end
  if not step then return ceildiv(x, ticks_per_us) end
  local n = ceildiv(x, step.refill)
  if step.every then return (step.idx + n) * step.every - now end
  local start = step.starts[step.base + n + 1]
  if not start then error('ERR sluice: a calendar wait beyond the windows passed') end
  return start - now
end
-- unit_wait is how long, with debt ticks of debt, a unit request waits.
local function unit_wait(debt, ticks_per_us, ticks_per_event, burst, step)
  return until_us(debt + ticks_per_event - burst * ticks_per_event, ticks_per_us, step)
end
