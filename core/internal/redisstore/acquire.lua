-- Takes a slot of a concurrency cap (see core/concurrency.go): KEYS[1] is
-- the key's lease set (see leases.lua), KEYS[2] its tag's epoch (see
-- epoch() there); ARGV max, lease_ms, id, save, run,
-- since_ms: what the limiter knows of this node's server (0: nothing):
-- its LASTSAVE when last read (the second it started, or its last save),
-- which process it is (see server() in leases.lua), and, if the limiter
-- saw it replace another, since when (below); myid: on a Cluster the
-- node id (CLUSTER MYID, its first 13 hex digits as a number) the limiter
-- knows for the node (0: none yet), elsewhere -1; epoch: the epoch the
-- limiter knows for the key's tag (0: none), and fresh: one to write if
-- the tag has none (both used only by a blind script: see below); then
-- the replication histories (see history() in leases.lua) of the servers
-- the limiter knows on its other nodes, sent on first contact (run 0).
-- Replies {acquired,
-- held, foreign, save, run, start_ms, replaced, replid, myid}: acquired 1
-- when the lease is taken (or was already: an acquisition sent again with
-- its id takes no second slot), 0 when the key is at its cap or in its grace period; held
-- the slots held after it; foreign 1 when the key held a value of another
-- type, which was deleted; save the server's LASTSAVE, run and start_ms
-- the process and when it started when it read INFO (else 0s); replaced
-- 1 when the server replaced another the limiter knew, start_ms then
-- being the new since_ms; replid the server's replication history when
-- read (on first contact), else 0; myid the node's id on a Cluster, else
-- 0. A blind script (the server refuses LASTSAVE: a user without
-- @dangerous, or a server that lacks it, as miniredis) replies save -1
-- and, as run, the tag's epoch.
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
-- later than that). A limiter notices a change behind one address (a
-- single server, Sentinel) by the process (run_id); on a Cluster the new
-- master is another node, met for the first time, and its previous
-- history (master_replid2) being one the limiter knew on another node
-- says it was promoted from that node's replica. On a Cluster the script
-- also reads CLUSTER MYID (cheap) on every call: a call that a stale slot
-- map sent to the old master reaches the new one through a redirect, and
-- servers that started in the same second and never saved answer LASTSAVE
-- alike. The marker '~grace' remembers the end in the set for
-- every limiter. The script reads LASTSAVE (cheap) on every call, and INFO
-- only when that changed or is less than 2s old (a server restarted
-- within the second it started keeps its LASTSAVE). Blind, it notices a
-- loss of the tag's data by its epoch instead: a restart without
-- persistence and a flush, and a failover that lost the epoch's write, but
-- not a failover or a restart from a file that kept the epoch and lost
-- later acquisitions. Runs after clock.lua and leases.lua.
local lease = tonumber(ARGV[2])
local foreign = tidy(lease)
local n = held()
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  -- Sent again after an answer that came too late: the lease is ours.
  hold(ARGV[3], lease)
  return {1, n, foreign, 0, 0, 0, 0, 0, 0}
end
local g = tonumber(redis.call('ZSCORE', KEYS[1], GRACE) or '0')
local knownSave, knownRun, since = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local knownID = tonumber(ARGV[7])
local save = redis.pcall('LASTSAVE')
local run, start, replaced, replid, me = 0, 0, 0, 0, 0
if knownID >= 0 then
  local id = redis.pcall('CLUSTER', 'MYID')
  if type(id) == 'string' then
    me = tonumber(string.sub(id, 1, 13), 16) or 0
  end
end
if type(save) ~= 'number' then
  -- Blind (see server() in leases.lua): the key's epoch tells a loss of
  -- its data, noticed now.
  local known = tonumber(ARGV[8])
  save, run = -1, epoch(ARGV[9])
  if known ~= 0 and run ~= known then
    replaced, start = 1, now - SLACK
    since = start
  end
elseif knownRun == 0 or me ~= knownID and knownID > 0 or save ~= knownSave or now < save * 1000 + 2000 then
  start, run = server()
  if start == nil then
    start, run = 0, 0 -- LASTSAVE allowed, INFO not: nothing more to tell
  elseif knownRun ~= 0 and run ~= knownRun then
    replaced = 1
  elseif knownRun == 0 then
    local before
    replid, before = history()
    for i = 10, #ARGV do
      if before ~= 0 and tonumber(ARGV[i]) == before then
        replaced = 1
      end
    end
  end
  if replaced == 1 then
    if start + SLACK + lease <= now then
      start = now - SLACK -- noticed now; SLACK as for a start read from INFO
    end
    since = start
  end
end
if since ~= 0 and since + SLACK + lease > g and since + SLACK + lease > now then
  g = since + SLACK + lease
  redis.call('ZADD', KEYS[1], g, GRACE)
  if n == 0 then
    redis.call('PEXPIRE', KEYS[1], g - now)
  end
end
if now < g then
  return {0, n, foreign, save, run, start, replaced, replid, me}
end
if n >= tonumber(ARGV[1]) then
  return {0, n, foreign, save, run, start, replaced, replid, me}
end
hold(ARGV[3], lease)
return {1, n + 1, foreign, save, run, start, replaced, replid, me}
