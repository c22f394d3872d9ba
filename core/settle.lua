-- sluice: settle a reservation (see settle.go): charge a key's buckets
-- the difference between a reservation's final cost and the cost it
-- reserved, once. The model of the arithmetic is settleBucket in gcra.go;
-- the stored value is bucket.lua's (see its layout table).
--
-- KEYS
--   | 1 | the bucket's key (see redisKey)                                  |
--   | 2 | the reservation's marker, in the bucket's slot (see markerKey)   |
--
-- ARGV
--   | 1         | delta        | final cost less reserved cost, in events:  |
--   |           |              | negative refunds, positive charges         |
--   | 2         | marker_ms    | how long the marker is kept                |
--   | 3         | nlimits      | the number of limits, 1 to 8               |
--   | then, per | ticks_per_us,| as in bucket.lua                           |
--   | limit     | ticks_per_ev,|                                            |
--   |           | burst        |                                            |
--
-- Reply: 1 if the delta was applied, 0 if the marker was there already
-- (the reservation was settled before: nothing changes).
--
-- Each limit's debt (ticks held, 0 when full) moves by delta events: a
-- refund never fills a bucket beyond full, and a charge takes it at most
-- one Burst beyond empty (2 * capacity), or leaves a debt already beyond
-- that (a waiting reservation's) as it is. A missing
-- bucket (or a value of another shape) is full: a refund leaves it so and
-- writes nothing. A penalty lock is kept. The expiry is bucket.lua's: when
-- every bucket is full again and any lock has ended.

local call = redis.call
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

local delta, nlimits = ARGV[1] + 0, ARGV[3] + 0
-- Read first: a failing GET (WRONGTYPE) must not leave a marker behind.
local stored = call('GET', KEYS[1])
if not call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then
  return 0
end
if delta == 0 then return 1 end

local fields = {}
if stored then
  for field in string.gmatch(stored, '%-?%d+') do
    fields[#fields + 1] = field + 0
  end
end
if #fields ~= 1 + 2 * nlimits then
  if delta < 0 then return 1 end -- full already
  fields = { 0 }
  for i = 1, nlimits do
    fields[2 * i], fields[2 * i + 1] = now, 0
  end
end

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

local lock_until = fields[1]
local ttl = lock_until - now
local parts = { string.format('%d', lock_until) }
for i = 1, nlimits do
  local r, p, b = ARGV[1 + 3 * i] + 0, ARGV[2 + 3 * i] + 0, ARGV[3 + 3 * i] + 0
  local debt = (fields[2 * i] - now) * r + fields[2 * i + 1]
  if debt < 0 then debt = 0 end
  local after = debt + delta * p
  if after < 0 then after = 0 end
  -- A charge stops at one Burst beyond empty, or where the debt was
  -- already (a reservation of Wait's may have taken it further).
  if delta > 0 and after > 2 * b * p then
    after = 2 * b * p
    if debt > after then after = debt end
  end
  debt = after
  local whole = floordiv(debt, r)
  parts[#parts + 1] = string.format('%d %d', now + whole, debt - whole * r)
  local limit_ttl = floordiv(debt + r - 1, r)
  if limit_ttl > ttl then ttl = limit_ttl end
end
if ttl < 1 then ttl = 1 end
call('SET', KEYS[1], table.concat(parts, ' '), 'PX', floordiv(ttl + 999, 1000))
return 1
