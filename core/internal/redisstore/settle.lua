-- sluice: settle reservations (see settle.go): charge a key's buckets the
-- difference between a reservation's final cost and the cost it reserved,
-- once. The model of the arithmetic is settleBucket in gcra.go; the stored
-- value is bucket.lua's (see its layout table). In Go, settle.go builds the
-- arguments (settleCall.loneArgs the lone form, settleArgs the batch form)
-- and decodes the reply (deliverSettled).
--
-- KEYS, lone form (#KEYS == 2): one settlement.
--   | 1 | the bucket's key (see redisKey)                                  |
--   | 2 | the reservation's marker, in the bucket's slot (see markerKey)   |
-- KEYS, batch form (#KEYS > 2): one pair as above per settlement, applied
-- in order (a bucket may appear in several pairs).
--
-- ARGV, lone form
--   | 1         | delta        | final cost less reserved cost, in events:  |
--   |           |              | negative refunds, positive charges         |
--   | 2         | marker_ms    | how long the marker is kept                |
--   | 3         | nlimits      | the number of limits, 1 to 8               |
--   | then, per | ticks_per_us,| as in bucket.lua                           |
--   | limit     | ticks_per_ev,|                                            |
--   |           | burst        |                                            |
--   A stepped limit takes the place of a limit's three numbers with its
--   numbers in bucket.lua's batch form (interval: 0, refill, burst,
--   every_us; calendar: -1, refill, burst, first, start_0 .. start_4, its
--   windows around the client's clock now) and one more:
--   |           | elapsed_us   | how long ago the reservation was made (the |
--   |           |              | limiter's clock): it was made in the window|
--   |           |              | holding TIME - elapsed_us                  |
--
-- ARGV, batch form
--   | 1         | ngroups      | the number of groups (sets of limits)      |
--   | then, per | nlimits,     | as in the lone form, from its nlimits on   |
--   | group     | limits       |                                            |
--   | then, per | delta        | as in the lone form                        |
--   | settle-   | marker_ms    | as in the lone form                        |
--   | ment      | group        | its group, 1-based                         |
--
-- Reply, lone form: 1 if the delta was applied, 0 if the marker was there
-- already (the reservation was settled before: nothing changes).
-- Reply, batch form: one integer per settlement, in order: 1 and 0 as in
-- the lone form, -1 if the settlement raised an error of its own
-- (WRONGTYPE: the bucket's name holds another program's value; ERR): it
-- changed nothing and the others are applied. An error of the server's
-- state (READONLY, OOM, ...) fails the call, as does a failure of every
-- settlement (with the first one's error), as a lone call fails. A call
-- that fails part way keeps the settlements it applied before: each
-- caller's retry then finds its marker.
--
-- Each limit's debt (ticks held, 0 when full) moves by delta events: a
-- refund never fills a bucket beyond full, and a charge takes it at most
-- one Burst beyond empty (2 * capacity), or leaves a debt already beyond
-- that (a waiting reservation's) as it is. A stepped limit's debt moves
-- in the reservation's window, brought to it from the window it was
-- stored in; if it was stored in a later one, that limit is left as it is
-- (core/settle_stepped.go says why). A missing
-- bucket (or a value of another shape) is full: a refund leaves it so and
-- writes nothing. A penalty lock is kept. The expiry is bucket.lua's: when
-- every bucket is full again and any lock has ended.

local call = redis.call
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

--#include arith.lua

local format, max = string.format, math.max
-- Made by the first stepped limit (see steps): limits.lua's parse_limit,
-- and waits.lua's until_us as until_step.
local parse_limit, judge, store, until_step
local function steps()
  if parse_limit then return end
  --#include waits.lua
  --#include limits.lua
  until_step = until_us
end

-- limits_at parses a set of limits whose nlimits is ARGV[at], and returns
-- it and the index of the argument after it. A stepped limit's step
-- (see limits.lua's parse_limit) holds res, the index of the window that
-- held the reservation's instant (nil: before the windows passed).
local function limits_at(at)
  local n = ARGV[at] + 0
  local l = { n = n }
  at = at + 1
  for i = 1, n do
    if ARGV[at] == '0' or ARGV[at] == '-1' then
      steps()
      local r, p, b, step, after, bad = parse_limit(ARGV, at, now)
      if bad then error(bad) end
      local made = now - ARGV[after]
      if step.every then
        step.res = floordiv(made, step.every)
      else
        for j = 0, 3 do
          if step.starts[j + 1] <= made and made < step.starts[j + 2] then step.res = step.idx - step.base + j end
        end
      end
      l[i] = { r, p, b, step = step }
      at = after + 1
    else
      l[i] = { ARGV[at] + 0, ARGV[at + 1] + 0, ARGV[at + 2] + 0 }
      at = at + 3
    end
  end
  return l, at
end

-- settle_step returns a stepped limit's debt and window (the stored
-- ones) moved by delta in the reservation's window, and the time to live
-- it asks for: as settleStep in core/settle_stepped.go.
local function settle_step(debt, idx, delta, b, step)
  local res = step.res
  if res and idx <= res then
    if res > idx then debt = debt - (res - idx) * step.refill end
    if debt < 0 then debt = 0 end
    local after = debt + delta
    if after < 0 then after = 0 end
    if delta > 0 and after > 2 * b then
      after = 2 * b
      if debt > after then after = debt end
    end
    debt, idx = after, res
  end
  local now_debt = debt
  if step.idx > idx then now_debt = debt - (step.idx - idx) * step.refill end
  return debt, idx, until_step(now_debt, 1, step)
end

-- settle applies delta to the bucket at bkey under limits once, marked by
-- mkey, and returns 1, or 0 if mkey was there already.
local function settle(bkey, mkey, delta, marker_ms, limits)
  -- Read first: a failing GET (WRONGTYPE) must not leave a marker behind.
  local stored = call('GET', bkey)
  if not call('SET', mkey, '1', 'NX', 'PX', marker_ms) then
    return 0
  end
  if delta == 0 then return 1 end

  local nlimits = limits.n
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
      local step = limits[i].step
      if step then
        fields[2 * i], fields[2 * i + 1] = 0, step.res or step.idx
      else
        fields[2 * i], fields[2 * i + 1] = now, 0
      end
    end
  end

  local lock_until = fields[1]
  local ttl = lock_until - now
  local parts = { format('%d', lock_until) }
  for i = 1, nlimits do
    local r, p, b = limits[i][1], limits[i][2], limits[i][3]
    if limits[i].step then
      local debt, idx, limit_ttl = settle_step(fields[2 * i], fields[2 * i + 1], delta, b, limits[i].step)
      parts[#parts + 1] = format('%d %d', debt, idx)
      if limit_ttl > ttl then ttl = limit_ttl end
    else
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
      parts[#parts + 1] = format('%d %d', now + whole, debt - whole * r)
      local limit_ttl = floordiv(debt + r - 1, r)
      if limit_ttl > ttl then ttl = limit_ttl end
    end
  end
  if ttl < 1 then ttl = 1 end
  call('SET', bkey, table.concat(parts, ' '), 'PX', floordiv(ttl + 999, 1000))
  return 1
end

if #KEYS == 2 then
  return settle(KEYS[1], KEYS[2], ARGV[1] + 0, ARGV[2], (limits_at(3)))
end

-- The batch form: each group's limits parsed once, each settlement under
-- pcall, so that one failing settlement fails only itself.
local ngroups = ARGV[1] + 0
local groups, at = {}, 2
for g = 1, ngroups do
  groups[g], at = limits_at(at)
end
local n = #KEYS / 2
local reply, nfailed, first_error = {}, 0, nil
for k = 1, n do
  local a = at + 3 * (k - 1)
  local ok, res = pcall(settle, KEYS[2 * k - 1], KEYS[2 * k], ARGV[a] + 0, ARGV[a + 1], groups[ARGV[a + 2] + 0])
  if ok then
    reply[k] = res
  else
    -- Redis 7.0 hands pcall a redis.call error as a string, later
    -- versions as {err = ...}; raised again as a table it keeps its code.
    if type(res) == 'string' and string.match(res, '^%u+ ') then res = { err = res } end
    local code = type(res) == 'table' and type(res.err) == 'string' and string.match(res.err, '^%u+')
    if code and code ~= 'WRONGTYPE' and code ~= 'ERR' then
      error(res, 0) -- the server's state, not the key's value
    end
    reply[k] = -1
    nfailed = nfailed + 1
    first_error = first_error or res
  end
end
if nfailed == n then
  error(first_error, 0)
end
return reply
