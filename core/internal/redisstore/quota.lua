-- Shared by bucket.lua's batch form and path.lua (see luainclude.go),
-- after limits.lua, with now (Redis's clock in microseconds), call,
-- format and match in scope: what a key with stepped limits (an interval
-- or a calendar quota) does when Redis has lost its data (a restart
-- without persistence, a flush, a failover that lost the epoch's write).
-- The store's side is core/internal/redisstore/quota.go.
--
-- A loss shows in the epoch of the key's hash tag, <prefix>{tag}~epoch,
-- the key the concurrency caps read (see epoch() in leases.lua): a string
-- without expiry that goes only with the server's data. A call brings the
-- epoch its replica last read for the key (0: none) and, for each stepped
-- limit, what the replica itself admitted in its window (the window's
-- index and the count). When the epoch it brings is not Redis's, the
-- replica's count is added to the key's debt, once per loss (re-asserted),
-- and the tag's grace period begins if it has not begun for this epoch:
-- for QUOTA_GRACE_US every stepped call on the tag is refused, with a
-- retry at its end, and only re-assertions are written, so that every
-- replica that is still alive re-asserts before any admits again. A
-- replica that knew no epoch (first contact, a brand-new tag) starts no
-- grace period. The grace period's end is kept in the epoch's value, after
-- the epoch and a space: "<epoch> <end_us>"; the caps read only the
-- epoch's first 13 hex digits.
--
-- It assigns three functions to locals the including script declares
-- (local quota_epoch, quota_lost, quota_reassert), as limits.lua does, so
-- that only a call with a quota section makes these closures.

-- quota_epoch reads ekey, the tag's epoch (missing, or of another type, it
-- is written as fresh), and returns it as a number (its first 13 hex
-- digits, as the caps read it), its first word as stored, and the end of
-- its grace period (0: none).
quota_epoch = function(ekey, fresh)
  local e = redis.pcall('GET', ekey)
  if type(e) ~= 'string' then
    if type(e) == 'table' then call('DEL', ekey) end
    e = fresh
    call('SET', ekey, e)
  end
  local id, g = match(e, '^(%S+) (%d+)$')
  if id then g = g + 0 else id, g = e, 0 end
  return tonumber(string.sub(id, 1, 13), 16) or 1, id, g
end

-- quota_lost begins the grace period of the tag whose epoch key ekey holds
-- id, unless it began (g, its end, is not 0), and returns its end. The
-- period is QUOTA_GRACE_US, 2 seconds.
quota_lost = function(ekey, id, g)
  local QUOTA_GRACE_US = 2000000
  if g == 0 then
    g = now + QUOTA_GRACE_US
    call('SET', ekey, format('%s %d', id, g))
  end
  return g
end

-- quota_reassert adds to key's debts (its value stored, as read) what a
-- replica admitted: win[i] and cnt[i] for limit i (nil: nothing), counted
-- only when win[i] is the limit's window on Redis's clock, a debt never
-- beyond the limit's burst; the value is written, its lock kept. It
-- returns whether it wrote.
quota_reassert = function(key, stored, n, r, p, b, step, win, cnt)
  local any = false
  for i = 1, n do
    if step[i] and cnt[i] and cnt[i] > 0 and win[i] == step[i].idx then any = true end
  end
  if not any then return false end
  -- A peek (cost 0) reads each limit's debt and what store needs.
  local _, _, _, _, _, _, _, _, lock_until, _, us, frac, debt = judge(key, stored, n, 0, 0, r, p, b, step, nil)
  for i = 1, n do
    if step[i] and cnt[i] and cnt[i] > 0 and win[i] == step[i].idx then
      local d = debt[i] + cnt[i]
      if d > b[i] then d = max(b[i], debt[i]) end
      debt[i], us[i], frac[i] = d, d, step[i].idx
    end
  end
  store(key, true, us, frac, debt, lock_until, n, r, step)
  return true
end
