-- sluice: token leases of a hot key (see hotlease.go). A replica takes
-- tokens out of a key's buckets in one atomic call, spends them locally,
-- and gives back what it did not spend. The stored bucket is bucket.lua's
-- (see its layout table), read and written with the same arithmetic, so
-- that decisions Redis makes exactly (bucket.lua) and leases share one
-- bucket. In Go, hotlease.go builds the arguments (leaseCall.args) and
-- decodes the reply (parseLease).
--
-- KEYS
--   | 1 | the bucket's key (see redisKey)                                   |
--   | 2 | the key's holds (see holdsKey): a hash, lease id -> "held until", |
--   |   | the tokens a replica may still spend and the microsecond (Redis's |
--   |   | clock) its lease ends                                             |
--
-- ARGV
--   | 1         | op           | 1 takes (and decides a request), 2 gives    |
--   |           |              | back                                        |
--   | 2         | id           | the replica's lease id for this key         |
--   | 3         | cost         | take: events of a request decided exactly   |
--   |           |              | first, as bucket.lua would; 0: none         |
--   | 4         | want         | take: events of tokens asked for the lease  |
--   | 5         | hand         | take: events still in hand from this lease, |
--   |           |              | carried into the new one; negative: -hand   |
--   |           |              | events of a lease that ended on the         |
--   |           |              | replica's clock, given back first, nothing  |
--   |           |              | carried; give back: the events not spent    |
--   | 6         | life_us      | how long the lease lives                    |
--   | 7         | bound        | events: the most tokens all replicas' holds |
--   |           |              | and their hold-back (see below) may keep    |
--   |           |              | from the bucket's users at once             |
--   | 8         | penalty_us   | how long a denial locks the key             |
--   | 9         | nlimits      | 1 to 8, continuous limits only             |
--   | then, per | ticks_per_us,| as in bucket.lua                            |
--   | limit     | ticks_per_ev,|                                             |
--   |           | burst        |                                             |
--
-- Reply, take: eight integers. The first five are bucket.lua's for the
-- request of cost events (flags, remaining, delay_us, reset_us, next_us;
-- cost 0: an admission taking nothing), after the lease; then
--   | 6 | granted | events taken for the lease (0: none)                  |
--   | 7 | life_us | how long the lease lives (0: not at all)              |
--   | 8 | refunded| events given back first (a negative hand)             |
-- Reply, give back: one integer, the events given back (0: the hold was
-- given back before, or ended more than its grace ago: nothing changes).
--
-- The guarantee. Tokens leave the bucket before a replica spends them. A
-- bucket refills with time whatever replicas hold, so a token bucket with
-- tokens in hand could be full while they are spent, and admit more than
-- Burst at once. So the bucket's debt is kept, while a hold lives, at no
-- less than what the holds still have in hand until they end:
--
--   debt >= max over holds j of ( sum of held_i over holds i with
--           until_i >= until_j, in ticks ) + ticks_per_us * (until_j - now)
--
-- (the floor). With it, tokens in hand plus the bucket's own tokens never
-- exceed Burst, and every window of t admits at most Burst + rate * t,
-- exactly as without leases. The floor's second term is the hold-back: at
-- most rate * life_us beyond the tokens held, which the bucket cannot
-- refill while a lease lives. Grants are capped so that the tokens held
-- (in live holds, and in ended ones not given back yet) and the hold-back
-- stay within bound; a grant is at most half the tokens the
-- bucket has left, so leases shrink to nothing near exhaustion and the last
-- tokens are decided by bucket.lua, exactly.
--
-- A give back refunds the unspent events, once (the hold is deleted), but
-- never below the floor of the holds that remain. A hold whose lease ended
-- leaves the floor, and stays 10 s more for its replica's give back (the
-- replica spends nothing of a lease past its end); then it goes, and its
-- tokens stay spent (a replica killed with tokens in hand loses them; the
-- bucket refills them at its rate). Writes keep
-- bucket.lua's expiry; the holds expire when the last lease ends.

local call = redis.call
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

--#include arith.lua

local bkey, hkey = KEYS[1], KEYS[2]
local op, id = ARGV[1] + 0, ARGV[2]
local cost, want, hand = ARGV[3] + 0, ARGV[4] + 0, ARGV[5] + 0
local life, bound, penalty = ARGV[6] + 0, ARGV[7] + 0, ARGV[8] + 0
local n = ARGV[9] + 0
local r, p, b = {}, {}, {}
for i = 1, n do
  r[i], p[i], b[i] = ARGV[7 + 3 * i] + 0, ARGV[8 + 3 * i] + 0, ARGV[9 + 3 * i] + 0
end

-- The bucket: a value of another shape is a full bucket.
local stored = call('GET', bkey)
local exists, lock_until = false, 0
local debt = {}
for i = 1, n do debt[i] = 0 end
if stored then
  local fields = {}
  for field in string.gmatch(stored, '%-?%d+') do
    fields[#fields + 1] = field + 0
  end
  if #fields == 1 + 2 * n then
    exists = true
    lock_until = fields[1]
    for i = 1, n do
      local d = (fields[2 * i] - now) * r[i] + fields[2 * i + 1]
      if d > 0 then debt[i] = d end
    end
  end
end

-- The holds of other replicas that have not ended. A hold that ended is
-- kept for grace_us more, outside the floor, so that its replica can still
-- give back what it did not spend, once; then it goes.
local grace_us = 10000000
local holds, own, own_ended, ended = {}, nil, nil, 0
local flat = redis.pcall('HGETALL', hkey)
if flat.err then
  -- A value of another type where the holds belong (another program
  -- writes under the prefix): no hold of ours can be in it, so it goes,
  -- as foreign.lua replaces a bucket's, and the key is leased again.
  call('DEL', hkey)
  flat = {}
end
for j = 1, #flat, 2 do
  local held, untl = string.match(flat[j + 1], '^(%d+) (%d+)$')
  held, untl = (held or 0) + 0, (untl or 0) + 0
  if untl + grace_us <= now then
    call('HDEL', hkey, flat[j])
  elseif flat[j] == id then
    if untl > now then own = held else own_ended = held end
  elseif untl > now then
    holds[#holds + 1] = { held, untl }
  else
    ended = ended + held -- not yet given back: still kept from users
  end
end

-- floor_of returns limit i's floor (see above) for holds.
local function floor_of(i, hs)
  table.sort(hs, function(x, y) return x[2] > y[2] end)
  local sum, f = 0, 0
  for j = 1, #hs do
    sum = sum + hs[j][1] * p[i]
    local need = sum + r[i] * (hs[j][2] - now)
    if need > f then f = need end
  end
  return f
end

-- write stores the bucket with debt, keeping lock_until, under bucket.lua's
-- expiry.
local function write()
  local ttl = lock_until - now
  local parts = { string.format('%d', lock_until) }
  for i = 1, n do
    local whole = floordiv(debt[i], r[i])
    parts[#parts + 1] = string.format('%d %d', now + whole, debt[i] - whole * r[i])
    local lt = ceildiv(debt[i], r[i])
    if lt > ttl then ttl = lt end
  end
  if ttl < 1 then ttl = 1 end
  call('SET', bkey, table.concat(parts, ' '), 'PX', ceildiv(ttl, 1000))
end

-- keep_holds sets the holds' expiry to when the last one's grace ends.
local function keep_holds(hs)
  local last = 0
  for j = 1, #hs do
    if hs[j][2] > last then last = hs[j][2] end
  end
  if last > now then call('PEXPIRE', hkey, ceildiv(last + grace_us - now, 1000)) end
end

-- give_back refunds up to u unspent events of this replica's hold, live
-- or ended within its grace, once (the hold goes), never below the floor
-- of the other holds; it returns the events refunded.
local function give_back(u)
  local held = own or own_ended
  if not held then return 0 end
  call('HDEL', hkey, id)
  own, own_ended = nil, nil
  if u > held then u = held end
  if u < 0 then u = 0 end
  if exists and u > 0 then
    local changed = false
    for i = 1, n do
      local after = debt[i] - u * p[i]
      local f = floor_of(i, holds)
      if after < f then after = f end
      if after < debt[i] then
        debt[i] = after
        changed = true
      end
    end
    if changed then write() end
  end
  return u
end

if op == 2 then
  local u = give_back(hand)
  keep_holds(holds)
  return { u }
end

-- A take with a negative hand first gives back -hand events of a lease
-- that ended on the replica's clock: nothing is carried.
local refunded = 0
if hand < 0 then
  refunded = give_back(-hand)
  hand = 0
end

-- Take: first the request, decided as bucket.lua decides it.
local locked = exists and now < lock_until
local denied, retry, index = false, 0, 0
for i = 1, n do
  local excess = debt[i] + cost * p[i] - b[i] * p[i]
  if excess > 0 then
    denied = true
    local w = ceildiv(excess, r[i])
    if w > retry then retry, index = w, i - 1 end
  end
end
-- unit_next is how long until a unit request could pass, over every limit.
local function unit_next()
  local nx = 0
  for i = 1, n do
    local x = debt[i] + p[i] - b[i] * p[i]
    if x > 0 then
      local w = ceildiv(x, r[i])
      if w > nx then nx = w end
    end
  end
  return nx
end
if locked or denied then
  -- Nothing is taken; the replica's hold, if any, stands as it was.
  local flags = 0
  local nx = unit_next()
  local i = index + 1
  local remaining = floordiv(math.max(0, b[i] * p[i] - debt[i]), p[i])
  if locked then
    flags, remaining = 2, 0
    if lock_until - now > retry then retry = lock_until - now end
    if lock_until - now > nx then nx = lock_until - now end
  elseif penalty > 0 then
    flags, remaining = 2, 0
    lock_until = now + penalty
    if penalty > retry then retry = penalty end
    if penalty > nx then nx = penalty end
    write()
  end
  return { flags + 4 * index, remaining, retry, ceildiv(debt[i], r[i]), nx, 0, 0, refunded }
end
for i = 1, n do debt[i] = debt[i] + cost * p[i] end

-- Then the lease: at most want, half of what is left, and what the bound
-- leaves beside the other holds, the tokens carried and the hold-back.
local g = want
local held_others = ended
for j = 1, #holds do held_others = held_others + holds[j][1] end
if hand < 0 then hand = 0 end
if not own then hand = 0 end -- the lease ended here: nothing is carried
if own and hand > own then hand = own end
for i = 1, n do
  local left = floordiv(b[i] * p[i] - debt[i], p[i])
  local half = floordiv(left, 2)
  if half < g then g = half end
  local holdback = ceildiv(r[i] * life, p[i])
  local room = bound - held_others - hand - holdback
  if room < g then g = room end
end
if g < 0 then g = 0 end
if g + hand > 0 then
  for i = 1, n do debt[i] = debt[i] + g * p[i] end
  holds[#holds + 1] = { g + hand, now + life }
  call('HSET', hkey, id, string.format('%d %d', g + hand, now + life))
  keep_holds(holds)
  for i = 1, n do
    local f = floor_of(i, holds)
    if f > debt[i] then debt[i] = f end
  end
elseif own then
  call('HDEL', hkey, id)
  keep_holds(holds)
end
if cost > 0 or g + hand > 0 then write() end

local remaining, reset = -1, 0
index = 0
for i = 1, n do
  local left = floordiv(math.max(0, b[i] * p[i] - debt[i]), p[i])
  if remaining < 0 or left < remaining then
    remaining, index, reset = left, i - 1, ceildiv(debt[i], r[i])
  end
end
local granted_life = 0
if g + hand > 0 then granted_life = life end
return { 1 + 4 * index, remaining, 0, reset, unit_next(), g, granted_life, refunded }
