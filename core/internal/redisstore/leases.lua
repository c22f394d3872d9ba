-- Prelude of the lease scripts (acquire.lua, renew.lua, release.lua), after
-- clock.lua. KEYS[1] is a key's lease set: a sorted set whose members are
-- lease ids scored by the millisecond (Redis's clock) they expire unless
-- renewed, and, while the key is in its grace period, the member '~grace'
-- scored by the millisecond the grace ends. A set that holds a lease has
-- no expiry, so an eviction policy that evicts only keys with one
-- (volatile-*) never evicts it; every script drops expired members, and
-- a set left without a member is gone (Redis deletes an empty set).
--
-- tidy(lease) drops what expired and clamps what cannot be valid: a score
-- later than now + lease (a lease renewed now ends then; a poisoned value
-- scored in the far future or +inf) is set to now + lease, so no value
-- holds a slot longer than one lease. A value of another type in the key
-- (WRONGTYPE) is deleted and reported: tidy returns 1 then, else 0.
-- (ZCARD under pcall finds it: TYPE would be one more command for the
-- Redis user's ACL.)
-- Replies of the lease scripts end with that flag, so the limiter logs
-- the key once.
local GRACE = '~grace'
-- SLACK is how far a start read from INFO may lie before the real one:
-- uptime_in_seconds is the difference of two whole-second clocks, so
-- now - uptime is within a second of the start either way. A grace period
-- ends SLACK + lease after the start read, never before a lease after the
-- real start (a holder re-asserts within it).
local SLACK = 1000
local function tidy(lease)
  local n = redis.pcall('ZCARD', KEYS[1])
  if type(n) == 'table' and n.err then
    redis.call('DEL', KEYS[1])
    return 1
  end
  if n == 0 then
    return 0
  end
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  local horizon = now + lease
  local late = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. horizon, '+inf', 'LIMIT', 0, 1000)
  for _, m in ipairs(late) do
    redis.call('ZADD', KEYS[1], horizon, m)
  end
  return 0
end

-- hold scores lease id until now + lease. The set loses any expiry (one
-- written by an older version, or by the grace marker alone): its
-- members' scores are what end its leases.
local function hold(id, lease)
  redis.call('ZADD', KEYS[1], now + lease, id)
  redis.call('PERSIST', KEYS[1])
end

-- held counts the leases of the set, not its grace marker.
local function held()
  local n = redis.call('ZCARD', KEYS[1])
  if redis.call('ZSCORE', KEYS[1], GRACE) then
    n = n - 1
  end
  return n
end

-- server reads INFO: when the server started, in ms on its clock,
-- within a second either way (see SLACK), and which process
-- it is: the first 13 hex digits of its run_id (new at every start), as a
-- number. nil when the server refuses INFO (a user without @dangerous, or
-- a server that lacks it): the scripts are blind to the process, and
-- tell a loss of data by the key's epoch instead (see epoch).
local function server()
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then
    return nil
  end
  local up = tonumber(string.match(info, 'uptime_in_seconds:(%d+)')) or 0
  local id = tonumber(string.sub(string.match(info, 'run_id:(%x+)') or '1', 1, 13), 16) or 1
  return now - up * 1000, id
end

-- history reads INFO replication: the replication history the server
-- carries (master_replid) and the one it carried before it was promoted
-- (master_replid2; none: 0), each as the number of its first 13 hex
-- digits.
local function history()
  local info = redis.call('INFO', 'replication')
  local function num(field)
    return tonumber(string.sub(string.match(info, field .. ':(%x+)') or '0', 1, 13), 16) or 0
  end
  return num('master_replid'), num('master_replid2')
end

-- epoch reads the epoch of the key's hash tag, KEYS[2]: a value written
-- once, with no expiry, so it goes only with the server's data (a restart
-- without persistence, a flush, a failover that lost its write). Blind
-- scripts (see server) compare it with the one the limiter knew: another
-- one says the key's lease set may lack holders, as a new process does.
-- Missing (or of another type) it is written as fresh. Returns its first
-- 13 hex digits as a number, and whether it was written now.
local function epoch(fresh)
  local e = redis.pcall('GET', KEYS[2])
  if type(e) ~= 'string' then
    if type(e) == 'table' then
      redis.call('DEL', KEYS[2])
    end
    redis.call('SET', KEYS[2], fresh)
    return tonumber(string.sub(fresh, 1, 13), 16) or 1, true
  end
  return tonumber(string.sub(e, 1, 13), 16) or 1, false
end
