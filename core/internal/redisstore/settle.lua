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
-- that (a waiting reservation's) as it is. A missing
-- bucket (or a value of another shape) is full: a refund leaves it so and
-- writes nothing. A penalty lock is kept. The expiry is bucket.lua's: when
-- every bucket is full again and any lock has ended.

local call = redis.call
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

--#include arith.lua

-- limits_at parses a set of limits whose nlimits is ARGV[at].
local function limits_at(at)
  local n = ARGV[at] + 0
  local l = { n = n }
  for i = 1, n do
    l[i] = { ARGV[at + 3 * i - 2] + 0, ARGV[at + 3 * i - 1] + 0, ARGV[at + 3 * i] + 0 }
  end
  return l
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
      fields[2 * i], fields[2 * i + 1] = now, 0
    end
  end

  local lock_until = fields[1]
  local ttl = lock_until - now
  local parts = { string.format('%d', lock_until) }
  for i = 1, nlimits do
    local r, p, b = limits[i][1], limits[i][2], limits[i][3]
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
  call('SET', bkey, table.concat(parts, ' '), 'PX', floordiv(ttl + 999, 1000))
  return 1
end

if #KEYS == 2 then
  return settle(KEYS[1], KEYS[2], ARGV[1] + 0, ARGV[2], limits_at(3))
end

-- The batch form: each group's limits parsed once, each settlement under
-- pcall, so that one failing settlement fails only itself.
local ngroups = ARGV[1] + 0
local groups, at = {}, 2
for g = 1, ngroups do
  groups[g] = limits_at(at)
  at = at + 1 + 3 * groups[g].n
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
