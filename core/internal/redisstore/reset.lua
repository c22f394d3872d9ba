-- Deletes one bucket's state, KEYS[1] (Limiter.Reset); replies {1} if it
-- existed, {0} if not. A script keeps the key's slot, and a Scripter has
-- no DEL.
return {redis.call('DEL', KEYS[1])}
