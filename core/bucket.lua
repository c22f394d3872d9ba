-- sluice: exact token buckets (GCRA), one or more per key, decided atomically.
--
-- KEYS[k]  one bucket per key; several keys decide in order in one call.
-- ARGV     per key, in order: cost, max_wait_us, penalty_us, nlimits, then
--          r, p, b for each limit (one microsecond is r ticks, one event p
--          ticks, capacity b events).
-- Stored   "lock tat1 frac1 tat2 frac2 ...": integers, microseconds and ticks.
-- Reply    per key: allowed, remaining, retry_us, reset_us, wait_us, index,
--          locked, next_us (until a unit request could be admitted after
--          this decision). Integers only.
--
-- Numbers are doubles here; every value stays an integer below 2^53 (the
-- limits are validated for it), and idiv corrects the rounding of a/b.

local function idiv(a, b)
  local q = math.floor(a / b)
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
  return math.max(0, ceildiv(d + p - b * p, r))
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
local a = 1

-- one decides a key under a single limit: the common case, written with
-- scalars only (no tables) because Lua tables dominate the script's cost.
-- It follows the general loop below step for step.
local function one(key, cost, maxwait, penalty, r, p, b)
  local raw = redis.call('GET', key)
  local set, lock, tu, tf = false, 0, 0, 0
  if raw then
    local l1, t1, f1 = string.match(raw, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    if l1 then
      set, lock, tu, tf = true, tonumber(l1), tonumber(t1), tonumber(f1)
    end
  end
  local d = 0
  if set then
    d = (tu - now) * r + tf
    if d < 0 then d = 0 end
  end
  local cap = b * p
  local d2 = d + cost * p
  local over = d2 - cap
  local retry, wait = 0, 0
  local denied = false
  if over > 0 then
    retry = ceildiv(over, r)
    wait = retry
    if over > maxwait * r then denied = true end
  end
  local locked = set and now < lock
  if locked or denied then
    local remaining = idiv(math.max(0, cap - d), p)
    local reset = ceildiv(d, r)
    local nxt = unitwait(d, r, p, b)
    local lk = 0
    if locked then
      lk, remaining = 1, 0
      retry = math.max(retry, lock - now)
      nxt = math.max(nxt, lock - now)
    elseif penalty > 0 then
      lk, remaining = 1, 0
      retry = math.max(retry, penalty)
      nxt = math.max(nxt, penalty)
      if not set then tu, tf = now, 0 end
      lock = now + penalty
      local ttl = math.max(lock - now, ceildiv((tu - now) * r + tf, r), 1)
      redis.call('SET', key, string.format('%d %d %d', lock, tu, tf), 'PX', ceildiv(ttl, 1000))
    end
    return 0, remaining, retry, reset, 0, lk, nxt
  end
  local q = idiv(d2, r)
  tu, tf = now + q, d2 - q * r
  local reset = ceildiv(d2, r)
  local ttl = math.max(-now, ceildiv((tu - now) * r + tf, r), 1)
  redis.call('SET', key, string.format('0 %d %d', tu, tf), 'PX', ceildiv(ttl, 1000))
  return 1, idiv(math.max(0, cap - d2), p), 0, reset, wait, 0, unitwait(d2, r, p, b)
end

for k = 1, #KEYS do
  local cost = tonumber(ARGV[a])
  local maxwait = tonumber(ARGV[a + 1])
  local penalty = tonumber(ARGV[a + 2])
  local n = tonumber(ARGV[a + 3])
  a = a + 4
  if n == 1 then
    local o1, o2, o3, o4, o5, o6, o7 = one(KEYS[k], cost, maxwait, penalty,
      tonumber(ARGV[a]), tonumber(ARGV[a + 1]), tonumber(ARGV[a + 2]))
    a = a + 3
    local m = #out
    out[m + 1], out[m + 2], out[m + 3], out[m + 4] = o1, o2, o3, o4
    out[m + 5], out[m + 6], out[m + 7], out[m + 8] = o5, 0, o6, o7
  else
  local r, p, b = {}, {}, {}
  for i = 1, n do
    r[i] = tonumber(ARGV[a])
    p[i] = tonumber(ARGV[a + 1])
    b[i] = tonumber(ARGV[a + 2])
    a = a + 3
  end

  local raw = redis.call('GET', KEYS[k])
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
      local rem = idiv(math.max(0, b[i] * p[i] - d[i]), p[i])
      if remaining < 0 or rem < remaining then
        remaining = rem
        if not denied then idx = i - 1 end
      end
      reset = math.max(reset, ceildiv(d[i], r[i]))
      nxt = math.max(nxt, unitwait(d[i], r[i], p[i], b[i]))
    end
    if denied then idx = ridx end
    if locked then
      lk = 1
      remaining = 0
      retry = math.max(retry, lock - now)
      nxt = math.max(nxt, lock - now)
    elseif penalty > 0 then
      lk = 1
      remaining = 0
      retry = math.max(retry, penalty)
      nxt = math.max(nxt, penalty)
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
      local rem = idiv(math.max(0, b[i] * p[i] - d2), p[i])
      if remaining < 0 or rem < remaining then
        remaining, idx = rem, i - 1
      end
      reset = math.max(reset, ceildiv(d2, r[i]))
      nxt = math.max(nxt, unitwait(d2, r[i], p[i], b[i]))
    end
    lock = 0
    write = true
    retry = 0
  end

  if write then
    local ttl = lock - now
    local parts = { string.format('%d', lock) }
    for i = 1, n do
      parts[#parts + 1] = string.format('%d %d', tu[i], tf[i])
      ttl = math.max(ttl, ceildiv((tu[i] - now) * r[i] + tf[i], r[i]))
    end
    ttl = math.max(ttl, 1)
    redis.call('SET', KEYS[k], table.concat(parts, ' '), 'PX', ceildiv(ttl, 1000))
  end

  if allowed == 0 then wait = 0 end
  out[#out + 1] = allowed
  out[#out + 1] = remaining
  out[#out + 1] = retry
  out[#out + 1] = reset
  out[#out + 1] = wait
  out[#out + 1] = idx
  out[#out + 1] = lk
  out[#out + 1] = nxt
  end
end

return out
