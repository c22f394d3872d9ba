-- Renews a lease (see acquire.lua): KEYS[1] the lease set, KEYS[2] its
-- tag's epoch; ARGV max, lease_ms, id, and a fresh epoch for a blind
-- script (see epoch() in leases.lua). A lease the
-- set no longer holds is re-asserted if the key has a free slot: Redis
-- may have forgotten it (a restart, a failover that lost writes), and a
-- holder reclaims it, also in the key's grace period, when newcomers are
-- refused; a re-assertion into a missing set less than a lease after the
-- server started begins that grace period. Replies {renewed, foreign}:
-- renewed 1 when the lease is held, 0 when it was missing and the key is
-- at its cap (the holder has lost it); foreign as in acquire.lua. Runs
-- after clock.lua and leases.lua.
local lease = tonumber(ARGV[2])
local foreign = tidy(lease)
if redis.call('ZSCORE', KEYS[1], ARGV[3]) then
  hold(ARGV[3], lease)
  return {1, foreign}
end
if held() >= tonumber(ARGV[1]) then
  return {0, foreign}
end
if redis.call('ZCARD', KEYS[1]) == 0 then
  local start = server()
  if start == nil then
    -- Blind (see server() in leases.lua): a loss of the data shows in the
    -- tag's epoch (KEYS[2]; ARGV[4] is a fresh one), noticed now.
    local _, lost = epoch(ARGV[4])
    start = lost and now - SLACK or 0
  end
  if start + SLACK + lease > now then
    redis.call('ZADD', KEYS[1], start + SLACK + lease, GRACE)
  end
end
hold(ARGV[3], lease)
return {1, foreign}
