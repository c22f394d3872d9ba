-- Takes a slot of a concurrency cap (see core/concurrency.go): KEYS[1] is
-- the key's lease set (see leases.lua); ARGV max, lease_ms, id, save, run,
-- since_ms: what the limiter knows of this node's server (0: nothing):
-- its LASTSAVE when last read (the second it started, or its last save),
-- which process it is (see server() in leases.lua), and, if the limiter
-- saw it replace another, since when (below). Replies {acquired,
-- held, foreign, save, run, start_ms}: acquired 1 when the lease is taken
-- (or was already: an acquisition sent again with its id takes no second
-- slot), 0 when the key is at its cap or in its grace period; held the
-- slots held after it; foreign 1 when the key held a value of another
-- type, which was deleted; save the server's LASTSAVE, run and start_ms
-- the process and when it started when it read INFO (else 0s), start_ms
-- being the new since_ms when run is another process than the limiter's.
--
-- The grace period: a key's set may lack holders that the server the
-- limiter now talks to never heard of. A restart without persistence
-- forgets them all; a failover that lost the last writes, or a restart
-- that loaded a file older than them, forgets the last acquisitions. So
-- when the limiter saw this node's server replace another, for a lease
-- from then only re-assertions take slots (renew.lua), and newcomers are
-- refused, whether the key's set is missing or not. "Then" is the
-- server's start if it started less than a lease ago (a restart), else the
-- moment a limiter first noticed the change (a failover to a server that
-- ran before: when the switch happened is not known, and it was not
-- later than that). The marker '~grace' remembers the end in the set for
-- every limiter. The script reads LASTSAVE (cheap) on every call, and INFO
-- only when that changed or is less than 2s old (a server restarted
-- within the second it started keeps its LASTSAVE). Runs after clock.lua
-- and leases.lua.
local lease = tonumber(ARGV[2])
local foreign = tidy(lease)
local n = held()
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  -- Sent again after an answer that came too late: the lease is ours.
  hold(ARGV[3], lease)
  return {1, n, foreign, 0, 0, 0}
end
local g = tonumber(redis.call('ZSCORE', KEYS[1], GRACE) or '0')
local knownSave, knownRun, since = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local save = redis.call('LASTSAVE')
local run, start = 0, 0
if knownRun == 0 or save ~= knownSave or now < save * 1000 + 2000 then
  start, run = server()
  if knownRun ~= 0 and run ~= knownRun then
    if start + SLACK + lease <= now then
      start = now - SLACK -- noticed now; SLACK as for a start read from INFO
    end
    since = start
  end
end
if knownRun ~= 0 and since ~= 0 and since + SLACK + lease > g and since + SLACK + lease > now then
  g = since + SLACK + lease
  redis.call('ZADD', KEYS[1], g, GRACE)
  if n == 0 then
    redis.call('PEXPIRE', KEYS[1], g - now)
  end
end
if now < g then
  return {0, n, foreign, save, run, start}
end
if n >= tonumber(ARGV[1]) then
  return {0, n, foreign, save, run, start}
end
hold(ARGV[3], lease)
return {1, n + 1, foreign, save, run, start}
