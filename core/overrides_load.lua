-- Reads an overrides set: replies {version} when the version KEYS[2] is
-- ARGV[1] (nothing changed); {version, entries} without reading them when
-- the hash KEYS[1] holds more than ARGV[2] entries; otherwise {version,
-- the whole hash}.
local v = redis.call('GET', KEYS[2]) or '0'
if v == ARGV[1] then
  return {v}
end
local n = redis.call('HLEN', KEYS[1])
if n > tonumber(ARGV[2]) then
  return {v, n}
end
return {v, redis.call('HGETALL', KEYS[1])}
