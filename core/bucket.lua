-- sluice: exact token buckets (GCRA), one or more per key, decided atomically.
--
-- The script's protocol, the one description of it (store_redis.go builds
-- the arguments and decodes the reply by it):
--
-- KEYS     one bucket per key, decided in order.
--
-- ARGV, lone form (#ARGV < 8): one key under one limit. Trailing
-- arguments at their default are left out: a plain Allow sends three.
--   | 1..3 | r, p, b  | the limit: one microsecond is r ticks, one      |
--   |      |          | event p ticks, capacity b events                |
--   | 4    | cost     | events taken; absent: 1; 0 peeks: the reply of  |
--   |      |          | a request taking nothing, and nothing written   |
--   | 5    | max_wait | microseconds a reservation may wait; absent: 0  |
--   | 6    | penalty  | microseconds a denial locks the key; absent: 0  |
--
-- ARGV, batch form (#ARGV >= 8): any keys, in groups of equal numbers.
--   | 1         | g        | the number of groups                       |
--   | then, per | cost,    | as in the lone form                        |
--   | group     | max_wait,|                                            |
--   |           | penalty  |                                            |
--   |           | n        | the number of limits, 1 to 8               |
--   |           | r, p, b  | n times, one limit each                    |
--   | then      | group    | with g > 1 only: each key's group, 1-based |
--   A batch of one group of one limit, the usual case, has 8 arguments
--   and nothing per key.
--
-- Reply: five integers per key, in key order.
--   | 1 | flags     | 1 if admitted, +2 if locked, +4 times the index    |
--   |   |           | (0-based) of the limit that decided; -1: this key  |
--   |   |           | failed (the other four are 0), see below           |
--   | 2 | remaining | unit requests the key could still take             |
--   | 3 | delay_us  | the wait of an admitted reservation, or the retry  |
--   |   |           | of a denial                                        |
--   | 4 | reset_us  | until every bucket is full again                   |
--   | 5 | next_us   | until a unit request could be admitted, after this |
--   |   |           | decision                                           |
--
-- Errors: in a batch, a key whose decision raises an error of its own
-- (WRONGTYPE: the name holds another program's value; ERR; a runtime error)
-- gets flags -1, and the other keys are decided. An error of the server's
-- state (READONLY, OOM, ...) fails the call, as does a failure of every
-- key (with the first key's error): then the batch fails as a lone call
-- does, with Redis's error code.
--
-- Stored: "lock tat1 frac1 tat2 frac2 ..." in decimal: lock is the
-- microsecond a penalty lock ends (0 for none); each limit's theoretical
-- arrival time is tat microseconds plus frac/r. Every write sets an expiry
-- of when the buckets are full again (and not before a lock ends).
--
-- Numbers are doubles here; every value stays an integer below 2^53 (the
-- limits are validated for it). There a / b never rounds across an integer,
-- so a % b (which Lua computes as a - floor(a / b) * b) is exact, and
-- floor(a / b) is (a - a % b) / b and ceil(a / b) is (a + (-a) % b) / b,
-- without a function call.
-- What costs most in Redis's Lua, and is avoided on the per-key path:
-- tonumber (two strtod; arithmetic on a string converts it once), function
-- calls, closures with upvalues (each script call makes them anew), tables,
-- and every integer in the reply.

local call, format, match = redis.call, string.format, string.match
local keys, argv = KEYS, ARGV
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

-- one decides a key under one limit, in the order of decide in gcra.go,
-- and returns its five integers. cp is cost * p, mw max_wait * r and cap
-- b * p, in ticks; pen is the penalty in microseconds. It takes what it
-- uses as arguments: a closure's upvalues cost more than its body.
local function one(key, now, call, format, match, cp, mw, pen, r, p, cap)
  local raw = call('GET', key)
  local lock, d, t1, f1 = 0, 0, nil, nil
  if raw then
    local l1
    l1, t1, f1 = match(raw, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    if l1 then
      if l1 ~= '0' then lock = l1 + 0 end
      d = (t1 - now) * r + f1
      if d < 0 then d = 0 end
    end
  end
  local d2 = d + cp
  local over = d2 - cap
  local wait = 0
  if over > 0 then
    wait = (over + (-over) % r) / r
  end
  if over > mw or now < lock then
    -- Denied, or locked: nothing is consumed.
    local remaining = cap - d
    if remaining > 0 then remaining = (remaining - remaining % p) / p else remaining = 0 end
    local nxt = d + p - cap
    if nxt > 0 then nxt = (nxt + (-nxt) % r) / r else nxt = 0 end
    local flags, retry = 0, wait
    if now < lock then
      flags, remaining = 2, 0
      if lock - now > retry then retry = lock - now end
      if lock - now > nxt then nxt = lock - now end
    elseif pen > 0 then
      -- Lock the key. Its bucket is written back unchanged (a missing one
      -- as full), so the lock is the only effect of the denial.
      flags, remaining = 2, 0
      if pen > retry then retry = pen end
      if pen > nxt then nxt = pen end
      local tu, tf = now, 0
      if t1 then tu, tf = t1 + 0, f1 + 0 end
      lock = now + pen
      local ttl = (tu - now) * r + tf
      ttl = (ttl + (-ttl) % r) / r
      if pen > ttl then ttl = pen end
      call('SET', key, format('%d %d %d', lock, tu, tf), 'PX', (ttl + (-ttl) % 1000) / 1000)
    end
    return flags, remaining, retry, (d + (-d) % r) / r, nxt
  end
  -- Admitted: d2 ticks of debt from now on. The key lives until the bucket
  -- is full again, reset microseconds.
  local q = (d2 - d2 % r) / r
  local reset = (d2 + (-d2) % r) / r
  if cp > 0 then -- cost 0 is a peek: nothing is written
    local ttl = reset
    if ttl < 1 then ttl = 1 end
    call('SET', key, format('0 %d %d', now + q, d2 - q * r), 'PX', (ttl + (-ttl) % 1000) / 1000)
  end
  local nxt = over + p
  if nxt > 0 then nxt = (nxt + (-nxt) % r) / r else nxt = 0 end
  local remaining = -over
  if remaining > 0 then remaining = (remaining - remaining % p) / p else remaining = 0 end
  return 1, remaining, wait, reset, nxt
end

local na, nk = #argv, #keys
if na < 8 then
  -- The lone form. No pcall: the one caller gets the script's error.
  local r, p = argv[1] + 0, argv[2] + 0
  local cp, mw, pen = p, 0, 0
  if na > 3 then
    cp = argv[4] * p
    if na > 4 then
      mw = argv[5] * r
      if na > 5 then pen = argv[6] + 0 end
    end
  end
  return { one(keys[1], now, call, format, match, cp, mw, pen, r, p, argv[3] * p) }
end

-- The batch form. Each key's decision may fail alone: the keys are decided
-- under pcall and, after a failure, on from the next key.
local out = {}
-- from(k, ...) decides keys k.. in order into out, five integers each.
local from, cp, mw, pen, r, p, cap
if argv[1] == '1' and argv[5] == '1' then
  -- One group of one limit, the usual batch: its numbers are parsed once
  -- and passed as arguments, scalars all the way down.
  r, p = argv[6] + 0, argv[7] + 0
  cp, mw, pen, cap = argv[2] * p, argv[3] * r, argv[4] + 0, argv[8] * p
  from = function(k, nk, keys, out, one, now, call, format, match, cp, mw, pen, r, p, cap)
    for k = k, nk do
      local m = 5 * k - 5
      out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] = one(keys[k], now, call, format, match, cp, mw, pen, r, p, cap)
    end
  end
else
  -- Several groups, or several limits: each group parsed once, into tables.
  local ng = argv[1] + 0
  local gcost, gwait, gpen, gn, gr, gp, gb = {}, {}, {}, {}, {}, {}, {}
  local a = 2
  for g = 1, ng do
    gcost[g], gwait[g], gpen[g], gn[g] = argv[a] + 0, argv[a + 1] + 0, argv[a + 2] + 0, argv[a + 3] + 0
    a = a + 4
    local rs, ps, bs = {}, {}, {}
    for i = 1, gn[g] do
      rs[i], ps[i], bs[i] = argv[a] + 0, argv[a + 1] + 0, argv[a + 2] + 0
      a = a + 3
    end
    gr[g], gp[g], gb[g] = rs, ps, bs
  end

  local floor, max = math.floor, math.max
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

  -- many decides a key under several limits, with tables, in the order of
  -- decide in gcra.go.
  local function many(key, cost, maxwait, penalty, n, r, p, b)
    local raw = call('GET', key)
    local set = false
    local lock = 0
    local tu, tf = {}, {}
    if raw then
      local f = {}
      for w in string.gmatch(raw, '%-?%d+') do
        f[#f + 1] = w + 0
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
      write = cost > 0 -- cost 0 is a peek: nothing is written
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

  -- Each key is decided by its group.
  from = function(k)
    for k = k, nk do
      local g = 1
      if ng > 1 then g = argv[a + k - 1] + 0 end
      local n, rs, ps = gn[g], gr[g], gp[g]
      local m = 5 * k - 5
      if n == 1 then
        local r, p = rs[1], ps[1]
        out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] =
          one(keys[k], now, call, format, match, gcost[g] * p, gwait[g] * r, gpen[g], r, p, gb[g][1] * p)
      else
        out[m + 1], out[m + 2], out[m + 3], out[m + 4], out[m + 5] = many(keys[k], gcost[g], gwait[g], gpen[g], n, rs, ps, gb[g])
      end
    end
  end
end

local k, failed, first = 1, 0, nil
while true do
  local ok, e = pcall(from, k, nk, keys, out, one, now, call, format, match, cp, mw, pen, r, p, cap)
  if ok then break end
  -- Key k failed: its five integers are not in out yet. Redis 7.0 hands
  -- pcall a redis.call error as a string, later versions as {err = ...};
  -- raised again as a table it keeps its code, which clients act on.
  if type(e) == 'string' and match(e, '^%u+ ') then e = { err = e } end
  local code = type(e) == 'table' and type(e.err) == 'string' and match(e.err, '^%u+')
  if code and code ~= 'WRONGTYPE' and code ~= 'ERR' then
    -- The server's state (READONLY, OOM, ...), not the key's value: the
    -- call fails, as a lone call would.
    error(e, 0)
  end
  k = #out / 5 + 1
  out[5 * k - 4], out[5 * k - 3], out[5 * k - 2], out[5 * k - 1], out[5 * k] = -1, 0, 0, 0, 0
  failed = failed + 1
  first = first or e
  k = k + 1
  if k > nk then break end
end
if failed == nk then
  error(first, 0)
end
return out
