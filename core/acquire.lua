-- Takes a slot of a concurrency cap (see core/concurrency.go): KEYS[1] is
-- the key's lease set (see leases.lua); ARGV max, lease_ms, id, save, run,
-- restart_ms: what the limiter knows of this node's server (0: nothing):
-- its LASTSAVE when last read (the second it started, or its last save),
-- which process it is (see server() in leases.lua), and when it started if
-- the limiter saw it replace another (a restart). Replies {acquired,
-- held, foreign, save, run, start_ms}: acquired 1 when the lease is taken
-- (or was already: an acquisition sent again with its id takes no second
-- slot), 0 when the key is at its cap or in its grace period; held the
-- slots held after it; foreign 1 when the key held a value of another
-- type, which was deleted; save the server's LASTSAVE when the script read
-- it, run and start_ms the process and when it started when it read INFO
-- (else 0s).
--
-- The grace period: a set that is missing less than a lease after the
-- server started, on a server the limiter saw replace another, may have
-- had holders the restart forgot. Until a lease after the start only they
-- take slots, by re-asserting (renew.lua), and newcomers are refused. The
-- marker '~grace' remembers it in the set for every limiter. The script
-- reads LASTSAVE (cheap) when the set is missing, and INFO only when that
-- changed or is less than 2s old (a server restarted within the second it
-- started keeps its LASTSAVE). Runs after clock.lua and leases.lua.
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
local missing = g == 0 and n == 0
local save, run, start = 0, 0, 0
if missing or knownRun == 0 then
  save = redis.call('LASTSAVE')
  if knownRun == 0 or save ~= knownSave or now < save * 1000 + 2000 then
    start, run = server()
    if knownRun ~= 0 and run ~= knownRun then
      since = start
    end
  end
  if missing and knownRun ~= 0 and since ~= 0 and since + SLACK + lease > now then
    g = since + SLACK + lease
    redis.call('ZADD', KEYS[1], g, GRACE)
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
