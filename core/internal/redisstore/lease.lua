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
--   | 2 | the key's holds (see HoldsKey): a hash, lease id -> "held until", |
--   |   | the tokens a replica may still spend and the microsecond (Redis's |
--   |   | clock) its lease ends; and sums kept as each hold changes, so     |
--   |   | that no call reads every hold: '~a' the tokens of every hold      |
--   |   | (live, or ended and not given back yet), '~l' those of live       |
--   |   | holds, '~u' the latest end of any hold, '~n' the holds, '~d' when |
--   |   | the earliest end (or grace) in KEYS[3] may be due, '~x' when the  |
--   |   | two keys expire                                                   |
--   | 3 | the holds' ends (see EndsKey): a sorted set, 'l:'..id scored by   |
--   |   | the microsecond a live hold ends, 'g:'..id by the one an ended    |
--   |   | hold's grace ends                                                 |
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
-- Reply, take: nine integers. The first five are bucket.lua's for the
-- request of cost events (flags, remaining, delay_us, reset_us, next_us;
-- cost 0: an admission taking nothing), after the lease; then
--   | 6 | granted | events taken for the lease (0: none)                  |
--   | 7 | life_us | how long the lease lives (0: not at all)              |
--   | 8 | refunded| events given back first (a negative hand)             |
--   | 9 | now     | the microsecond (Redis's clock) the call ran: the     |
--   |   |         | lease ends life_us after it                           |
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
-- (the floor). The script keeps a floor never below that one and read
-- from the sums alone, the tokens of every live hold as if all ended at
-- the latest end:
--
--   debt >= live held, in ticks, + ticks_per_us * (latest end - now)
--
-- while any hold lives. With it, tokens in hand plus the bucket's own
-- tokens never exceed Burst, and every window of t admits at most
-- Burst + rate * t, exactly as without leases. The floor's second term is
-- the hold-back: at
-- most rate * life_us beyond the tokens held, which the bucket cannot
-- refill while a lease lives. Grants are capped so that the tokens held
-- (in live holds, and in ended ones not given back yet) and the hold-back
-- stay within bound, and each replica's hold within its share of the
-- bound beside the hold-back (that part over the replicas with a hold or
-- an ended one not given back yet); a grant is at most half the tokens the
-- bucket has left, so leases shrink to nothing near exhaustion and the last
-- tokens are decided by bucket.lua, exactly.
--
-- A give back refunds the unspent events, once (the hold is deleted), but
-- never below the floor of the holds that remain. A hold whose lease ended
-- leaves the floor, and stays 10 s more for its replica's give back (the
-- replica spends nothing of a lease past its end); then it goes, and its
-- tokens stay spent (a replica killed with tokens in hand loses them; the
-- bucket refills them at its rate). Writes keep bucket.lua's expiry; the
-- holds and their ends expire when the last hold's grace ends.

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

-- The holds. A hold that ended leaves the floor and stays grace_us more,
-- outside it, so that its replica can still give back what it did not
-- spend, once; then it goes. A call reads its own hold and the sums, and
-- moves the holds whose end or grace came (found by their scores) only
-- once the earliest of them is due: its cost does not grow with the
-- replicas, and a renewal is one HSET and one ZADD beside the bucket's.
local grace_us = 10000000
local ekey = KEYS[3]
local function int(x) return string.format('%d', x) end
local agg = redis.pcall('HMGET', hkey, id, '~a', '~l', '~u', '~n', '~d', '~x')
if agg.err then
  -- A value of another type where the holds belong (another program
  -- writes under the prefix): no hold of ours can be in it, so both go,
  -- as foreign.lua replaces a bucket's, and the key is leased again.
  call('DEL', hkey, ekey)
  agg = {}
end
local all, live, last = tonumber(agg[2]) or 0, tonumber(agg[3]) or 0, tonumber(agg[4]) or 0
local holders, next_due, expiry = tonumber(agg[5]) or 0, tonumber(agg[6]) or 0, tonumber(agg[7]) or 0
local dirty = false -- the sums changed: keep_holds writes them
local hw = {} -- hash fields keep_holds writes with the sums
local function parse(v)
  local held, untl = string.match(v or '', '^(%d+) (%d+)$')
  return (held or 0) + 0, (untl or 0) + 0
end
local own_held, own_until = 0, 0
if agg[1] then own_held, own_until = parse(agg[1]) end
-- The scan runs when the earliest score may be due, and whenever this
-- replica's own hold has ended, so that its hold is where its end puts it
-- (live, in its grace, or gone) before the call changes it.
if next_due <= now or (agg[1] and own_until <= now) then
  local due = redis.pcall('ZRANGEBYSCORE', ekey, '-inf', now)
  if due.err then
    call('DEL', hkey, ekey)
    due, all, live, holders, agg = {}, 0, 0, 0, {}
  end
  if #due > 0 then
    local ids = {}
    for j = 1, #due do ids[j] = string.sub(due[j], 3) end
    local vals = call('HMGET', hkey, unpack(ids))
    local moved, gone = {}, {}
    for j = 1, #due do
      local held, untl = parse(vals[j])
      if not vals[j] then
        -- No such hold (the holds were lost): the end goes alone.
      elseif string.sub(due[j], 1, 1) == 'l' then
        -- A live hold ended: out of the floor, into its grace.
        live = live - held
        moved[#moved + 1] = int(untl + grace_us)
        moved[#moved + 1] = 'g:' .. ids[j]
      else
        -- An ended hold's grace is over: it goes, its tokens stay spent.
        all, holders = all - held, holders - 1
        gone[#gone + 1] = ids[j]
      end
    end
    call('ZREM', ekey, unpack(due))
    if #moved > 0 then call('ZADD', ekey, unpack(moved)) end
    if #gone > 0 then call('HDEL', hkey, unpack(gone)) end
  end
  local first = call('ZRANGE', ekey, 0, 0, 'WITHSCORES')
  if not first[2] and holders > 0 then
    -- The ends were lost (evicted, or deleted alone) while holds remain:
    -- the ends and the sums are rebuilt from the holds, once.
    local flat = call('HGETALL', hkey)
    local adds, gone = {}, {}
    all, live, holders = 0, 0, 0
    for j = 1, #flat, 2 do
      local f = flat[j]
      if string.sub(f, 1, 1) ~= '~' then
        local held, untl = parse(flat[j + 1])
        if untl > now then
          all, live, holders = all + held, live + held, holders + 1
          adds[#adds + 1], adds[#adds + 2] = int(untl), 'l:' .. f
        elseif untl + grace_us > now then
          all, holders = all + held, holders + 1
          adds[#adds + 1], adds[#adds + 2] = int(untl + grace_us), 'g:' .. f
        else
          gone[#gone + 1] = f
        end
      end
    end
    if #adds > 0 then call('ZADD', ekey, unpack(adds)) end
    if #gone > 0 then call('HDEL', hkey, unpack(gone)) end
    first = call('ZRANGE', ekey, 0, 0, 'WITHSCORES')
    expiry = 0 -- the new set has no expiry yet: keep_holds sets both
  end
  next_due = tonumber(first[2]) or (now + grace_us)
  dirty = true
end
if live < 0 then live = 0 end
if all < live then all = live end
local own, own_ended = nil, nil
if agg[1] then
  if own_until > now then
    own = own_held
  elseif own_until + grace_us > now then
    own_ended = own_held
  end -- else the scan took it out
end

-- floor_of returns limit i's floor (see above) with live tokens held until
-- at most last: the latest end stands for every hold's, so the floor is
-- never lower than the exact one of each hold, and none with no hold.
local function floor_of(i, held_live)
  if held_live <= 0 or last <= now then return 0 end
  return held_live * p[i] + r[i] * (last - now)
end

-- drop_own takes this replica's hold, live or ended, out of the sums and
-- the ends; keep (a hold that replaces it) leaves its field to be written.
local function drop_own(keep)
  if own then
    live, all = live - own, all - own
    if not keep then call('ZREM', ekey, 'l:' .. id) end
  elseif own_ended then
    all = all - own_ended
    call('ZREM', ekey, 'g:' .. id)
  end
  if (own or own_ended) and not keep then
    call('HDEL', hkey, id)
    holders = holders - 1
  end
  own, own_ended, dirty = nil, nil, true
end

-- keep_holds writes the sums (or deletes both keys when no hold is left)
-- and keeps their expiry past the last hold's grace, renewed at most
-- once a second.
local function keep_holds()
  if holders <= 0 then
    call('DEL', hkey, ekey)
    return
  end
  if live < 0 then live = 0 end
  for _, v in ipairs({ '~a', int(all), '~l', int(live), '~u', int(last), '~n', int(holders), '~d', int(next_due) }) do
    hw[#hw + 1] = v
  end
  if last + grace_us > expiry then
    expiry = last + grace_us + 1000000
    hw[#hw + 1] = '~x'
    hw[#hw + 1] = int(expiry)
    call('HSET', hkey, unpack(hw))
    local ms = ceildiv(expiry - now, 1000)
    call('PEXPIRE', hkey, ms)
    call('PEXPIRE', ekey, ms)
  else
    call('HSET', hkey, unpack(hw))
  end
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

-- give_back refunds up to u unspent events of this replica's hold, live
-- or ended within its grace, once (the hold goes), never below the floor
-- of the other holds; it returns the events refunded.
local function give_back(u)
  local held = own or own_ended
  if not held then return 0 end
  drop_own(false)
  if u > held then u = held end
  if u < 0 then u = 0 end
  if exists and u > 0 then
    local changed = false
    for i = 1, n do
      local after = debt[i] - u * p[i]
      local f = floor_of(i, live)
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
  keep_holds()
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
  if dirty then keep_holds() end
  return { flags + 4 * index, remaining, retry, ceildiv(debt[i], r[i]), nx, 0, 0, refunded, now }
end
for i = 1, n do debt[i] = debt[i] + cost * p[i] end

-- Then the lease: at most want, half of what is left, what the bound
-- leaves beside the other holds, the tokens carried and the hold-back,
-- and this replica's fair share of the bound beside the hold-back: the
-- part of it each replica holding (or owing a give back) may have, so
-- that the first replica to take cannot keep the others out for long.
local g = want
local mine = own or own_ended
local held_others = all - (mine or 0)
local sharers = holders
if not mine then sharers = sharers + 1 end
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
  local share = floordiv(bound - holdback, sharers) - hand
  if share < g then g = share end
end
if g < 0 then g = 0 end
if g + hand > 0 then
  for i = 1, n do debt[i] = debt[i] + g * p[i] end
  if not mine then holders = holders + 1 end
  drop_own(true) -- the hold it replaces, live or ended, leaves the sums
  local h, untl = g + hand, now + life
  hw[1], hw[2] = id, int(h) .. ' ' .. int(untl)
  call('ZADD', ekey, int(untl), 'l:' .. id)
  live, all = live + h, all + h
  if untl > last then last = untl end
  if untl < next_due then next_due = untl end
  keep_holds()
  for i = 1, n do
    local f = floor_of(i, live)
    if f > debt[i] then debt[i] = f end
  end
elseif own then
  drop_own(false)
  keep_holds()
elseif dirty then
  keep_holds()
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
return { 1 + 4 * index, remaining, 0, reset, unit_next(), g, granted_life, refunded, now }
