-- Locks a bucket for a time, as a penalty lock does (Rule.Lock): every
-- decision on it is denied until the lock ends, on every replica.
--
-- KEYS[1] the bucket. ARGV[1] the lock's length in microseconds, at least
-- 1; ARGV[2] the fields of full buckets under the bucket's limits, for a
-- value that has none of its own: " 0 0" per limit (bucket.lua's layout
-- table: an arrival of 0 is a full bucket, and so is a stepped limit's
-- debt of 0). A value with a lock that ends later keeps it: a lock is
-- never shortened. Otherwise the value is written with its first field
-- the lock's end and the rest as it was (or full buckets, for a missing
-- value or one that is not a bucket's), with an expiry no earlier than
-- the lock's end nor than the one it had.
--
-- Reply: {lock_us}, microseconds from Redis's clock until the key's lock
-- ends.
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local key, len_us = KEYS[1], ARGV[1] + 0
local ends = now + len_us
local stored = redis.call('GET', key)
local lock, rest
if stored and #stored <= 24 * 17 then
  lock, rest = string.match(stored, '^(%-?%d+)( [%-%d ]+)$')
  -- A bucket's value has the fields of its limits, as many as ARGV[2].
  if rest and select(2, string.gsub(rest, '%-?%d+', '')) ~= select(2, string.gsub(ARGV[2], '%d+', '')) then
    lock, rest = nil, nil
  end
end
if lock and lock + 0 >= ends then
  return { lock - now }
end
local ms = (len_us + (-len_us) % 1000) / 1000
local pttl = redis.call('PTTL', key)
if pttl > ms then ms = pttl end
redis.call('SET', key, string.format('%d', ends) .. (rest or ARGV[2]), 'PX', string.format('%d', ms))
return { len_us }
