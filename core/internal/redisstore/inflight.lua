-- Counts the slots held of a concurrency cap's key (Concurrency.InFlight),
-- after clock.lua, writing nothing: KEYS[1] is the key's lease set (see
-- leases.lua); its leases that have not expired on the server's clock
-- (scored after now) are counted, and its grace marker is not a lease.
-- Replies {held}, or {-1} when the key holds a value of another type
-- (left as it is: the next acquisition deletes it).
local n = redis.pcall('ZCOUNT', KEYS[1], '(' .. now, '+inf')
if type(n) ~= 'number' then
  return {-1}
end
local grace = redis.call('ZSCORE', KEYS[1], '~grace')
if grace and tonumber(grace) > now then
  n = n - 1
end
return {n}
