-- A flush of one limit's top-talkers sketches (see core/top.go) into one
-- window: KEYS[1] and KEYS[2] are the window's sorted sets of admitted
-- cost and of denials by key hash, KEYS[3] its hash of totals and bounds
-- (at, ab: admitted total and bound; dt, db: the denials'), KEYS[4] its
-- hash of key names (written only when the limiter keeps names). ARGV[1]
-- is the keys' TTL in milliseconds, ARGV[2] to ARGV[5] the totals and
-- bounds to add (at, ab, dt, db), ARGV[6] and ARGV[7] the numbers of
-- admitted and denied entries, then that many (member, count) pairs of
-- each, then (member, name) pairs. Every count is added (ZINCRBY,
-- HINCRBY); every key's TTL is set again. Replies {entries added}.
local na, nd = tonumber(ARGV[6]), tonumber(ARGV[7])
local i = 8
for _ = 1, na do
	redis.call('ZINCRBY', KEYS[1], ARGV[i + 1], ARGV[i])
	i = i + 2
end
for _ = 1, nd do
	redis.call('ZINCRBY', KEYS[2], ARGV[i + 1], ARGV[i])
	i = i + 2
end
while i < #ARGV do
	redis.call('HSET', KEYS[4], ARGV[i], ARGV[i + 1])
	i = i + 2
end
local fields = {'at', 'ab', 'dt', 'db'}
for f = 1, 4 do
	redis.call('HINCRBY', KEYS[3], fields[f], ARGV[f + 1])
end
for k = 1, 4 do
	redis.call('PEXPIRE', KEYS[k], ARGV[1])
end
return {na + nd}
