-- Shared by bucket.lua's form for several limits and path.lua (see
-- luainclude.go), after arith.lua and waits.lua, with now (Redis's clock in
-- microseconds), call (redis.call), format (string.format) and max
-- (math.max) in scope: a key under several limits, from its arguments and
-- its stored value (bucket.lua's layout table) to its decision and what it
-- writes. The arithmetic is decide in core/gcra.go. A limit's numbers are
-- tables indexed by limit: r (ticks per microsecond), p (ticks per event),
-- b (burst) and step (a stepped limit's place among its windows, nil for a
-- continuous one; the table itself may be empty but not nil).
--
-- It assigns three functions to locals the including script declares
-- (local parse_limit, judge, store), so that a script can make these
-- closures only when a call needs them: each script call makes its
-- closures anew, at about a thousand instructions each.

-- parse_limit reads the limit whose first argument is args[at], as
-- bucket.lua's layout table gives it, at now, and returns its r, p, b and
-- step (nil: continuous), the index of the argument after it, and an error
-- for calendar windows that do not hold now (the caller fails the key with
-- it, or the call). It takes what it uses as arguments: each script call
-- makes its closures anew, and upvalues are what costs in one.
parse_limit = function(args, at, now)
  local r, p, b = args[at] + 0, args[at + 1] + 0, args[at + 2] + 0
  at = at + 3
  if r >= 1 then return r, p, b, nil, at, nil end
  -- A stepped limit: it counts in events, and step says where Redis's
  -- clock stands among its windows.
  local step, bad = { refill = p }, nil
  if r == 0 then
    local every = args[at] + 0
    step.every, step.idx = every, (now - now % every) / every -- exact below 2^53
    at = at + 1
  else
    local first, starts = args[at] + 0, {}
    for j = 1, 5 do starts[j] = args[at + j] + 0 end
    at = at + 6
    for j = 0, 2 do
      if starts[j + 1] <= now and now < starts[j + 2] then step.idx, step.base = first + j, j end
    end
    if not step.idx then
      step.idx, step.base = first + 1, 1
      bad = { err = 'ERR sluice: the calendar windows passed do not hold the server clock (client and server clocks differ by more than a period)' }
    end
    step.starts = starts
  end
  return 1, 1, b, step, at, bad
end

-- judge decides key, whose stored value is stored (nil or false: none),
-- under n limits for cost events, as decide in gcra.go does, and writes
-- nothing. A value that has not the shape of n limits is read as full
-- buckets; so is a debt beyond a burst on a value without an expiry (no
-- script writes one). With clamp_to, a lock later than clamp_to on a value
-- without an expiry is clamped to it (bucket.lua's layout table).
--
-- It returns the decision (allowed, lock_flag, index, remaining, delay_us,
-- reset_us, next_us, as in bucket.lua's reply), then what store needs:
-- exists, lock_until, clamped, and tables of each limit's arrival_us,
-- arrival_frac and debt in ticks, all as charged when admitted. They are
-- return values, not a table: a table per key cost 3k instructions.
judge = function(key, stored, n, cost, max_wait_us, r, p, b, step, clamp_to)
  local arrival_us, arrival_frac, debt = {}, {}, {}
  local exists, lock_until, clamped = false, 0, false
  if stored and #stored <= 24 * (1 + 2 * n) then
    local count = 0
    for field in string.gmatch(stored, '%-?%d+') do
      count = count + 1
      if count == 1 then
        lock_until = field + 0
      elseif count % 2 == 0 then
        arrival_us[count / 2] = field + 0
      else
        arrival_frac[(count - 1) / 2] = field + 0
      end
    end
    exists = count == 1 + 2 * n
    if not exists then lock_until = 0 end
  end
  if exists and clamp_to and lock_until > clamp_to and call('PTTL', key) == -1 then
    lock_until, clamped = clamp_to, true
  end
  for i = 1, n do
    local d = 0
    if exists then
      if step[i] then
        d = arrival_us[i]
        local crossed = step[i].idx - arrival_frac[i]
        if crossed > 0 then d = d - crossed * step[i].refill end
      else
        d = (arrival_us[i] - now) * r[i] + arrival_frac[i]
      end
      if d < 0 then d = 0 end
    end
    debt[i] = d
  end
  for i = 1, n do
    if debt[i] > b[i] * p[i] then
      if call('PTTL', key) == -1 then -- a debt no script writes: full buckets
        exists, lock_until, clamped = false, 0, false
        for j = 1, n do debt[j] = 0 end
      end
      break
    end
  end

  local denied = false
  local retry_us, wait_us, retry_index = 0, 0, 0
  for i = 1, n do
    local excess = debt[i] + cost * p[i] - b[i] * p[i]
    if excess > 0 then
      local w = until_us(excess, r[i], step[i])
      if step[i] then
        -- A stepped limit waits for its next window at most.
        if excess > step[i].refill or w > max_wait_us then denied = true end
      elseif excess > max_wait_us * r[i] then denied = true end
      if w > retry_us then retry_us, retry_index = w, i - 1 end
      if w > wait_us then wait_us = w end
    end
  end

  local locked = exists and now < lock_until
  local remaining, reset_us, index, next_us = -1, 0, 0, 0
  if locked or denied then
    for i = 1, n do
      if not denied then -- locked: the limit with the fewest requests left decides
        local rem = floordiv(max(0, b[i] * p[i] - debt[i]), p[i])
        if remaining < 0 or rem < remaining then remaining, index = rem, i - 1 end
      end
      next_us = max(next_us, unit_wait(debt[i], r[i], p[i], b[i], step[i]))
    end
    if denied then -- the limit with the longest retry decides
      index = retry_index
      local i = retry_index + 1
      remaining = floordiv(max(0, b[i] * p[i] - debt[i]), p[i])
    end
    reset_us = until_us(debt[index + 1], r[index + 1], step[index + 1])
    local lock_flag = 0
    if locked then
      lock_flag, remaining = 1, 0
      retry_us = max(retry_us, lock_until - now)
      next_us = max(next_us, lock_until - now)
    end
    return 0, lock_flag, index, remaining, retry_us, reset_us, next_us, exists, lock_until, clamped, arrival_us, arrival_frac, debt
  end

  -- Admitted: S becomes the state to store, charged.
  for i = 1, n do
    local after = debt[i] + cost * p[i]
    debt[i] = after
    if step[i] then
      arrival_us[i], arrival_frac[i] = after, step[i].idx
    else
      local whole = floordiv(after, r[i])
      arrival_us[i], arrival_frac[i] = now + whole, after - whole * r[i]
    end
    local rem = floordiv(max(0, b[i] * p[i] - after), p[i])
    if remaining < 0 or rem < remaining then
      remaining, index, reset_us = rem, i - 1, until_us(after, r[i], step[i])
    end
    next_us = max(next_us, unit_wait(after, r[i], p[i], b[i], step[i]))
  end
  return 1, 0, index, remaining, wait_us, reset_us, next_us, true, 0, false, arrival_us, arrival_frac, debt
end

-- store writes key's value from what judge returned (exists, us, frac,
-- debt) with its lock ending at lock_until (0: none; full buckets if the
-- key held none), expiring when every bucket is full again and not before
-- the lock ends.
store = function(key, exists, us, frac, debt, lock_until, n, r, step)
  local ttl = lock_until - now
  local parts = { format('%d', lock_until) }
  for i = 1, n do
    if not exists then
      if step[i] then us[i], frac[i] = 0, step[i].idx else us[i], frac[i] = now, 0 end
    end
    parts[i + 1] = format('%d %d', us[i], frac[i])
    if step[i] then
      ttl = max(ttl, until_us(debt[i], 1, step[i]))
    else
      ttl = max(ttl, ceildiv((us[i] - now) * r[i] + frac[i], r[i]))
    end
  end
  ttl = max(ttl, 1)
  call('SET', key, table.concat(parts, ' '), 'PX', ceildiv(ttl, 1000))
end
