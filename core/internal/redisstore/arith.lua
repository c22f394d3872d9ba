-- Shared by the scripts that keep buckets (see luainclude.go): floordiv
-- divides integers held in doubles exactly (math.floor of the quotient can
-- be one off near 2^53), ceildiv rounds up.
local floor = math.floor
local function floordiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end
local function ceildiv(a, b)
  return floordiv(a + b - 1, b)
end
