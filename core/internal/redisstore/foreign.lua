-- Replaces a value of another type (a hash, a list, ...) found where a
-- bucket belongs (see core/internal/redisstore/foreign.go): KEYS[1] is deleted if it holds
-- anything but a string, so the key's next decision finds no bucket (a
-- full one) and writes its own. Replies {1} when it deleted it, {0} when the
-- value was a string or missing (another fault: left as it is). GET under
-- pcall tells a string apart: TYPE would be one more command for the Redis
-- user's ACL.
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  redis.call('DEL', KEYS[1])
  return {1}
end
return {0}
