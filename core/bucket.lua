-- sluice: exact token buckets (GCRA), one or more per key, decided atomically.
--
-- KEYS[k]  one bucket per key; several keys decide in order in one call.
-- ARGV     the number of groups g, then each group: cost, max_wait_us,
--          penalty_us, nlimits, then r, p, b for each limit (one
--          microsecond is r ticks, one event p ticks, capacity b events).
--          With g > 1, one group number (1-based) per key follows; with
--          g = 1 every key is in the one group. Concurrent requests mostly
--          share one limit and cost, so a batch's numbers are parsed once.
-- Stored   "lock tat1 frac1 tat2 frac2 ...": integers, microseconds and ticks.
-- Reply    per key, five integers: flags (1 if allowed, +2 if locked, +4 times
--          the index of the deciding limit), remaining, delay_us (the wait of
--          an admitted reservation, or the retry of a denial), reset_us,
--          next_us (until a unit request could be admitted after this
--          decision). Every integer in a reply costs Redis about as much to
--          send as a redis.call costs to set up, so none is wasted.
--
-- Numbers are doubles here; every value stays an integer below 2^53 (the
-- limits are validated for it), and idiv corrects the rounding of a/b.
-- Redis runs this once per batch and its body once per key, so the per-key
-- path avoids what costs most in Redis's Lua: parsing numbers from strings
-- (tonumber is strtod), global lookups, function calls and tables.

local call, tonumber, floor, max = redis.call, tonumber, math.floor, math.max
local match, format = string.match, string.format

local function idiv(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local function ceildiv(a, b)
  return idiv(a + b - 1, b)
end

-- unitwait is how long, with debt d ticks, a unit request waits.
local function unitwait(d, r, p, b)
  return max(0, ceildiv(d + p - b * p, r))
end

local t = call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

-- one decides a key under a single limit: the common case, written with
-- scalars only (no tables) because Lua tables dominate the script's cost.
-- It follows the general path below step for step. cp is cost * p, cap is
-- b * p and mw is max_wait * r, computed once per group.
local function one(key, cp, mw, penalty, r, p, b, cap)
  local raw = call('GET', key)
  local set, lock, tu, tf = false, 0, 0, 0
  if raw then
    local l1, t1, f1 = match(raw, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    if l1 then
      set, lock, tu, tf = true, tonumber(l1), tonumber(t1), tonumber(f1)
    end
  end
  local d = 0
  if set then
    d = (tu - now) * r + tf
    if d < 0 then d = 0 end
  end
  local d2 = d + cp
  local over = d2 - cap
  local wait = 0
  if over > 0 or (set and now < lock) then
    local retry = 0
    local denied = false
    if over > 0 then
      retry = ceildiv(over, r)
      wait = retry
      if over > mw then denied = true end
    end
    local locked = set and now < lock
    if locked or denied then
      local remaining = idiv(max(0, cap - d), p)
      local reset = ceildiv(d, r)
      local nxt = unitwait(d, r, p, b)
      local lk = 0
      if locked then
        lk, remaining = 1, 0
        retry = max(retry, lock - now)
        nxt = max(nxt, lock - now)
      elseif penalty > 0 then
        lk, remaining = 1, 0
        retry = max(retry, penalty)
        nxt = max(nxt, penalty)
        if not set then tu, tf = now, 0 end
        lock = now + penalty
        local ttl = max(lock - now, ceildiv((tu - now) * r + tf, r), 1)
        call('SET', key, format('%d %d %d', lock, tu, tf), 'PX', ceildiv(ttl, 1000))
      end
      return 2 * lk, remaining, retry, reset, nxt
    end
  end
  -- Admitted: d2 ticks of debt from now on. The key lives until the
  -- bucket is full again, that is reset microseconds.
  local q = idiv(d2, r)
  local reset = ceildiv(d2, r)
  local ttl = max(reset, 1)
  call('SET', key, format('0 %d %d', now + q, d2 - q * r), 'PX', ceildiv(ttl, 1000))
  local over1 = d2 + p - cap
  local nxt = 0
  if over1 > 0 then nxt = ceildiv(over1, r) end
  local remaining = 0
  if cap > d2 then remaining = idiv(cap - d2, p) end
  return 1, remaining, wait, reset, nxt
end

-- many decides a key under several limits.
local function many(key, cost, maxwait, penalty, n, r, p, b)
  local raw = call('GET', key)
  local set = false
  local lock = 0
  local tu, tf = {}, {}
  if raw then
    local f = {}
    for w in string.gmatch(raw, '%-?%d+') do
      f[#f + 1] = tonumber(w)
    end
    if #f == 1 + 2 * n then
      set = true
      lock = f[1]
      for i = 1, n do
        tu[i] = f[2 * i]
        tf[i] = f[2 * i + 1]
      end
    end
  end

  local d = {}
  for i = 1, n do
    d[i] = 0
    if set then
      local x = (tu[i] - now) * r[i] + tf[i]
      if x > 0 then d[i] = x end
    end
  end

  local denied = false
  local retry, wait, ridx = 0, 0, 0
  for i = 1, n do
    local over = d[i] + cost * p[i] - b[i] * p[i]
    if over > 0 then
      local w = ceildiv(over, r[i])
      if over > maxwait * r[i] then denied = true end
      if w > retry then retry, ridx = w, i - 1 end
      if w > wait then wait = w end
    end
  end

  local locked = set and now < lock
  local allowed, remaining, reset, idx, lk, nxt = 0, -1, 0, 0, 0, 0
  local write = false
  if locked or denied then
    for i = 1, n do
      local rem = idiv(max(0, b[i] * p[i] - d[i]), p[i])
      if remaining < 0 or rem < remaining then
        remaining = rem
        if not denied then idx = i - 1 end
      end
      reset = max(reset, ceildiv(d[i], r[i]))
      nxt = max(nxt, unitwait(d[i], r[i], p[i], b[i]))
    end
    if denied then idx = ridx end
    if locked then
      lk = 1
      remaining = 0
      retry = max(retry, lock - now)
      nxt = max(nxt, lock - now)
    elseif penalty > 0 then
      lk = 1
      remaining = 0
      retry = max(retry, penalty)
      nxt = max(nxt, penalty)
      if not set then
        for i = 1, n do
          tu[i], tf[i] = now, 0
        end
      end
      lock = now + penalty
      write = true
    end
  else
    allowed = 1
    for i = 1, n do
      local d2 = d[i] + cost * p[i]
      local q = idiv(d2, r[i])
      tu[i], tf[i] = now + q, d2 - q * r[i]
      local rem = idiv(max(0, b[i] * p[i] - d2), p[i])
      if remaining < 0 or rem < remaining then
        remaining, idx = rem, i - 1
      end
      reset = max(reset, ceildiv(d2, r[i]))
      nxt = max(nxt, unitwait(d2, r[i], p[i], b[i]))
    end
    lock = 0
    write = true
    retry = 0
  end

  if write then
    local ttl = lock - now
    local parts = { format('%d', lock) }
    for i = 1, n do
      parts[#parts + 1] = format('%d %d', tu[i], tf[i])
      ttl = max(ttl, ceildiv((tu[i] - now) * r[i] + tf[i], r[i]))
    end
    ttl = max(ttl, 1)
    call('SET', key, table.concat(parts, ' '), 'PX', ceildiv(ttl, 1000))
  end

  local delay = retry
  if allowed == 1 then delay = wait end
  return allowed + 2 * lk + 4 * idx, remaining, delay, reset, nxt
end

local argv, keys = ARGV, KEYS
local out = {}
local ng, n1 = tonumber(argv[1]), tonumber(argv[5])
if ng == 1 and n1 == 1 then
  -- One group of one limit, the usual batch: locals only, parsed once.
  local r, p, b = tonumber(argv[6]), tonumber(argv[7]), tonumber(argv[8])
  local cp, mw, pen, cap = tonumber(argv[2]) * p, tonumber(argv[3]) * r, tonumber(argv[4]), b * p
  local m = 0
  for k = 1, #keys do
    out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] = one(keys[k], cp, mw, pen, r, p, b, cap)
    m = m + 5
  end
  return out
end

-- Several groups, or several limits: parse each group once into tables.
local gcost, gwait, gpen, gn, gr, gp, gb = {}, {}, {}, {}, {}, {}, {}
local a = 2
for g = 1, ng do
  gcost[g], gwait[g], gpen[g] = tonumber(argv[a]), tonumber(argv[a + 1]), tonumber(argv[a + 2])
  local n = tonumber(argv[a + 3])
  gn[g] = n
  a = a + 4
  local r, p, b = {}, {}, {}
  for i = 1, n do
    r[i], p[i], b[i] = tonumber(argv[a]), tonumber(argv[a + 1]), tonumber(argv[a + 2])
    a = a + 3
  end
  gr[g], gp[g], gb[g] = r, p, b
end

local m = 0
for k = 1, #keys do
  local g = 1
  if ng > 1 then g = tonumber(argv[a + k - 1]) end
  if gn[g] == 1 then
    local r, p, b = gr[g][1], gp[g][1], gb[g][1]
    out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] = one(keys[k], gcost[g] * p, gwait[g] * r, gpen[g], r, p, b, b * p)
  else
    out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] = many(keys[k], gcost[g], gwait[g], gpen[g], gn[g], gr[g], gp[g], gb[g])
  end
  m = m + 5
end
return out
