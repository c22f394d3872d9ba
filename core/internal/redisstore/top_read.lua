-- A read of one limit's top-talkers windows (see core/top.go), writing
-- nothing: KEYS holds four keys per window, as top_flush.lua names them
-- (admitted, denied, totals, names). Replies, per window, {the admitted
-- set's members and scores, the denied set's, the totals hash's fields
-- and values, the names hash's}.
local out = {}
for w = 0, #KEYS / 4 - 1 do
	local k = w * 4
	out[w + 1] = {
		redis.call('ZRANGE', KEYS[k + 1], 0, -1, 'WITHSCORES'),
		redis.call('ZRANGE', KEYS[k + 2], 0, -1, 'WITHSCORES'),
		redis.call('HGETALL', KEYS[k + 3]),
		redis.call('HGETALL', KEYS[k + 4]),
	}
end
return out
