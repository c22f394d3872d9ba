-- sluice: exact token buckets (GCRA), one or more per key, decided atomically.
--
-- The layout table: the script's protocol, described here and nowhere else.
-- Everything else points here: in Go, bucket.go builds the arguments
-- (appendArgs the lone form, scriptArgs the batch form) and decodes the
-- reply (parseReply), and gcra.go's stepBucket is the model of the arithmetic;
-- docs/architecture.md describes the round trip. Names are the script's
-- own. A limit travels in ticks, as limit.go's tickLimit: ticks_per_us,
-- ticks_per_event and burst are its r, p and b.
--
-- KEYS     one bucket per key, decided in order.
--
-- ARGV, lone form (#ARGV < 8): one key, or several under the same
-- numbers, under one continuous limit. Trailing arguments at their default
-- are left out: a plain Allow sends three.
--   | 1 | ticks_per_us    | r: one microsecond is r ticks                  |
--   | 2 | ticks_per_event | p: one event is p ticks                        |
--   | 3 | burst           | b: the capacity, in events (b * p ticks)       |
--   | 4 | cost            | events taken; absent: 1; 0 peeks: the reply of |
--   |   |                 | a request taking nothing, and nothing written  |
--   | 5 | max_wait_us     | how long a reservation may wait; absent: 0     |
--   | 6 | penalty_us      | how long a denial locks the key; absent: 0     |
--
-- ARGV, batch form (#ARGV >= 8): any keys, in groups of equal numbers.
--   | 1         | ngroups          | the number of groups                  |
--   | then, per | cost             | as in the lone form                   |
--   | group     | max_wait_us      | as in the lone form                   |
--   |           | penalty_us       | as in the lone form                   |
--   |           | nlimits          | the number of limits, 1 to 8          |
--   |           | ticks_per_us,    | nlimits times, one limit each, as in  |
--   |           | ticks_per_event, | the lone form                         |
--   |           | burst            |                                       |
--   | then      | group            | with ngroups > 1 only: each key's     |
--   |           |                  | group, 1-based, in key order          |
--   A batch of one group of one limit, the usual case, has 8 arguments
--   and nothing per key.
--   A stepped limit (core.Refill; a call with one goes in the batch form,
--   even alone) takes the place of a limit's three numbers with these,
--   counted in events; its reservation waits for its next window at most:
--   | interval | 0          | the marker: Rate at once every Period      |
--   |          | refill     | events added at each window's start        |
--   |          | burst      | the capacity, in events                    |
--   |          | every_us   | the window: windows start at multiples of  |
--   |          |            | every_us since the Unix epoch              |
--   | calendar | -1         | the marker: the quota at each boundary     |
--   |          | refill     | events added at each window's start (the   |
--   |          | burst      | quota, both), and the capacity             |
--   |          | first      | the index of the window [start_0, start_1) |
--   |          | start_0 .. | five consecutive window starts, unix       |
--   |          | start_4    | microseconds, computed by the client (Lua  |
--   |          |            | has no time zones) around its clock; TIME  |
--   |          |            | must fall in [start_0, start_3), else the  |
--   |          |            | group's keys fail (ERR)                    |
--   A call with stepped limits may carry a quota section (see quota.lua)
--   after the groups, before the keys' groups:
--   | q         | the marker                                        |
--   | fresh     | an epoch to write for a tag that has none         |
--   | nq        | the number of entries; the last nq KEYS are their |
--   |           | tags' epoch keys (<prefix>{tag}~epoch), in order, |
--   |           | after the buckets                                 |
--   | then, per | key    | the bucket's index among KEYS, 1-based   |
--   | entry     | known  | the tag's epoch the caller knows; 0: none|
--   |           | m      | the number of counts that follow         |
--   |           | limit, | m times: the caller admitted count under |
--   |           | window,| the limit (1-based) in the window (its   |
--   |           | count  | index, as stored)                        |
--
-- Reply: per key, in key order, two integers in the lone form and five
-- in the batch form; then, with a quota section, one per entry in its
-- order: the tag's epoch as read (its first 13 hex digits; 0 when the key
-- failed before it was read), and last, once per call, now: the instant
-- every key was decided at (TIME, unix microseconds), which a recorded
-- decision carries so that a replay through the Go model decides at the
-- same instant (core.Result.Time).
-- A key under one continuous limit (every key in the lone form) gets its
-- flags and its debt; in the batch form the other three are 0. The rest
-- of its decision follows from the debt and the call's numbers, and
-- bucket.go's parseDebt works it out (as stepContinuous in gcra.go).
--   | 1 | flags     | 1: admitted; 0: denied; 2 + 4 * L: locked, for L   |
--   |   |           | microseconds from now (a lock that held the key,   |
--   |   |           | or the penalty of this denial); -1: this key       |
--   |   |           | failed (the other is 0), see below                 |
--   | 2 | debt      | the ticks its bucket held before the decision      |
-- A key under several limits, or stepped ones, gets five:
--   | 1 | flags     | 1 if admitted, +2 if locked, +4 times the index    |
--   |   |           | (0-based) of the limit that decided: of those that |
--   |   |           | deny, the one with the longest retry, else the one |
--   |   |           | with the fewest requests left; -1: this key failed |
--   |   |           | (the other four are 0), see below                  |
--   | 2 | remaining | unit requests the limit that decided could still   |
--   |   |           | take                                               |
--   | 3 | delay_us  | the wait of an admitted reservation, or the retry  |
--   |   |           | of a denial                                        |
--   | 4 | reset_us  | until the bucket of the limit that decided is full |
--   |   |           | again                                              |
--   | 5 | next_us   | until a unit request could be admitted, after this |
--   |   |           | decision                                           |
--
-- Errors: in a batch, a key whose decision raises an error of its own
-- (WRONGTYPE: the name holds another program's value; ERR; a runtime error)
-- gets flags -1, and the other keys are decided. An error of the server's
-- state (READONLY, OOM, ...) fails the call, as does a failure of every
-- key (with the first key's error): then the batch fails as a lone call
-- does, with Redis's error code.
--
-- Stored: each key's value, decimal integers separated by spaces.
--   | 1         | lock_until   | the microsecond a penalty lock ends; 0: none |
--   | then, per | arrival_us   | the limit's theoretical arrival time (when   |
--   | limit     | arrival_frac | its bucket is full again): arrival_us        |
--   |           |              | microseconds plus arrival_frac ticks, fewer  |
--   |           |              | than ticks_per_us                            |
--   A stepped limit's two fields are its debt in events and the index of
--   the window it was counted in (for an interval, floor(now / every_us);
--   for a calendar, core/calendar.go's index).
--   A value with another number of fields is read as a full bucket. A lock
--   later than now + the call's penalty_us on a value without an expiry
--   (which no script writes) is clamped to it and written so. Every
--   write sets an expiry of when the buckets are full again (and not before
--   a lock ends). core/internal/redisstore/settle.lua (a reservation's settlement) reads and
--   writes the same value.
--
-- Numbers are doubles here; every value stays an integer below 2^53 (the
-- limits are validated for it). There a / b never rounds across an integer,
-- so a % b (which Lua computes as a - floor(a / b) * b) is exact, and
-- floor(a / b) is (a - a % b) / b and ceil(a / b) is (a + (-a) % b) / b,
-- without a function call.
-- What costs most in Redis's Lua, and is avoided on the per-key path:
-- tonumber (two strtod; arithmetic on a string converts it once), function
-- calls, closures with upvalues (each script call makes them anew), tables,
-- every integer in the reply, and a number passed to redis.call: Redis
-- prints it with %.17g, glibc's float printing, so an expiry is passed as
-- format('%d', ms), about 1.1k instructions fewer per write (callgrind).
-- Names cost nothing: a local is a register.

local call, format, match = redis.call, string.format, string.match
local keys, argv = KEYS, ARGV
-- Redis's clock, read once: t is TIME's reply, now the instant in
-- microseconds every key is decided at.
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

-- decide_one decides a key under one limit, in the order of decide in
-- gcra.go, and returns its two integers (see the layout table): its flags
-- and its debt before the decision. cost_ticks is cost * ticks_per_event,
-- max_wait_ticks max_wait_us * ticks_per_us and capacity burst *
-- ticks_per_event, all in ticks; penalty_us is in microseconds. It takes
-- what it uses as arguments: a closure's upvalues cost more than its body.
local function decide_one(key, now, call, format, match, cost_ticks, max_wait_ticks, penalty_us, ticks_per_us, capacity)
  local stored = call('GET', key)
  -- debt: the ticks the bucket holds now, 0 when it is full.
  local lock_until, debt, stored_us, stored_frac = 0, 0, nil, nil
  -- A value longer than any this limit writes (three integers below 2^53)
  -- is read as a full bucket and overwritten, so it is read once.
  if stored and #stored <= 64 then
    local stored_lock
    stored_lock, stored_us, stored_frac = match(stored, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    if stored_lock then
      if stored_lock ~= '0' then
        lock_until = stored_lock + 0
        if lock_until > now + penalty_us and call('PTTL', key) == -1 then
          -- A lock on a value without an expiry, which no script writes (a
          -- value from elsewhere): it ends a penalty from now, and is
          -- written so, with an expiry, so it cannot lock the key for good.
          -- (A lock longer than this call's penalty, another rule's, has
          -- an expiry; its key ends no later than it.)
          lock_until = now + penalty_us
          local ttl = stored_us - now
          if penalty_us > ttl then ttl = penalty_us end
          if ttl < 1 then ttl = 1 end
          call('SET', key, format('%d %s %s', lock_until, stored_us, stored_frac), 'PX', format('%d', (ttl + (-ttl) % 1000) / 1000))
        end
      end
      debt = (stored_us - now) * ticks_per_us + stored_frac
      if debt < 0 then debt = 0 end
      if debt > capacity and call('PTTL', key) == -1 then
        -- A debt beyond a burst on a value without an expiry (an arrival
        -- years ahead, say): no script writes one. Read as a full bucket,
        -- overwritten by the next admission.
        debt, lock_until = 0, 0
      end
    end
  end
  local debt_after = debt + cost_ticks
  if now < lock_until then
    -- Locked: nothing is consumed.
    return 2 + 4 * (lock_until - now), debt
  end
  if debt_after - capacity > max_wait_ticks then
    -- Denied: nothing is consumed.
    if penalty_us > 0 then
      -- Lock the key. Its bucket is written back unchanged (a missing one
      -- as full), so the lock is the only effect of the denial.
      local arrival_us, arrival_frac = now, 0
      if stored_us then arrival_us, arrival_frac = stored_us + 0, stored_frac + 0 end
      local ttl = (arrival_us - now) * ticks_per_us + arrival_frac
      ttl = (ttl + (-ttl) % ticks_per_us) / ticks_per_us
      if penalty_us > ttl then ttl = penalty_us end
      call('SET', key, format('%d %d %d', now + penalty_us, arrival_us, arrival_frac), 'PX', format('%d', (ttl + (-ttl) % 1000) / 1000))
      return 2 + 4 * penalty_us, debt
    end
    return 0, debt
  end
  -- Admitted: debt_after ticks of debt from now on. The key lives until the
  -- bucket is full again.
  if cost_ticks > 0 then -- cost 0 is a peek: nothing is written
    local whole_us = (debt_after - debt_after % ticks_per_us) / ticks_per_us
    local ttl = (debt_after + (-debt_after) % ticks_per_us) / ticks_per_us
    if ttl < 1 then ttl = 1 end
    call('SET', key, format('0 %d %d', now + whole_us, debt_after - whole_us * ticks_per_us), 'PX', format('%d', (ttl + (-ttl) % 1000) / 1000))
  end
  return 1, debt
end

local nargs, nkeys = #argv, #keys
if nargs < 8 and nkeys == 1 then
  -- The lone form, the single-limit fast path: one key under one limit,
  -- its numbers parsed straight into scalars, no table but the reply's, no
  -- pcall (the one caller gets the script's error). Measured under
  -- callgrind, the whole server's instructions per call for a plain Allow
  -- of one key on a stored bucket (Redis 7.0.15): 60.0k here over three
  -- runs on 2026-11-27 (61.1k to 62.1k before the expiry went as
  -- format('%d'); 59.7k to 61.1k over 15 runs on 2026-11-24), against
  -- 74.1k (2026-11-24) for the same decision in the batch form (one
  -- group of one limit, on a scalar path that several keys under one
  -- limit now take in this form, below) and 106k on the batch form's
  -- table path. The first figure is `go run ./cmd/scriptcost
  -- -callgrind` (from bench/), "1 key per call". scriptcost sends the
  -- batch form (with -batch-form) only with several keys per call (33.6k
  -- per key at 10 on 2026-11-27; no figure for one key): the other two
  -- come from a copy of it that sends the batch form for one key ("01" as
  -- the group count takes the table path).
  local ticks_per_us, ticks_per_event = argv[1] + 0, argv[2] + 0
  local cost_ticks, max_wait_ticks, penalty_us = ticks_per_event, 0, 0
  if nargs > 3 then
    cost_ticks = argv[4] * ticks_per_event
    if nargs > 4 then
      max_wait_ticks = argv[5] * ticks_per_us
      if nargs > 5 then penalty_us = argv[6] + 0 end
    end
  end
  local flags, debt = decide_one(keys[1], now, call, format, match, cost_ticks, max_wait_ticks, penalty_us, ticks_per_us, argv[3] * ticks_per_event)
  return { flags, debt, now }
end

-- The batch. reply: each key's integers, width of them, in key order
-- (see below). decide_from(first_key, ...) decides keys first_key.. in
-- order into it.
local reply, width = nil, 2
local decide_from, cost_ticks, max_wait_ticks, penalty_us, ticks_per_us, capacity
local qepoch -- the quota section's epochs, in its order (see the layout table)
if nargs < 8 then
  -- Several keys under one limit, the usual batch, travel in the lone
  -- form: five arguments fewer than the batch form's, and no group to
  -- parse. Under callgrind (`go run ./cmd/scriptcost -callgrind
  -- -keys-per-call 2,4`, 2026-11-29), 51.1k to 51.6k instructions per key
  -- at two keys a call against 53.8k to 54.0k in the batch form, and
  -- 40.0k to 40.5k against 41.6k to 41.7k at four.
  local ticks_per_event
  ticks_per_us, ticks_per_event = argv[1] + 0, argv[2] + 0
  cost_ticks, max_wait_ticks, penalty_us = ticks_per_event, 0, 0
  if nargs > 3 then
    cost_ticks = argv[4] * ticks_per_event
    if nargs > 4 then
      max_wait_ticks = argv[5] * ticks_per_us
      if nargs > 5 then penalty_us = argv[6] + 0 end
    end
  end
  capacity = argv[3] * ticks_per_event
else
  -- Several groups, or several limits: each group parsed once, into tables
  -- indexed by group (and each limit's numbers by limit).
  width = 5
  local max = math.max
  --#include arith.lua
  --#include waits.lua
  local parse_limit, judge, store
  --#include limits.lua

  local ngroups = argv[1] + 0
  local group_cost, group_max_wait_us, group_penalty_us, group_nlimits = {}, {}, {}, {}
  local group_ticks_per_us, group_ticks_per_event, group_burst, group_step = {}, {}, {}, {}
  local group_error = {} -- a group whose calendar windows do not hold now: its keys fail
  local arg_at = 2 -- the next argument to parse
  for group = 1, ngroups do
    group_cost[group], group_max_wait_us[group], group_penalty_us[group], group_nlimits[group] = argv[arg_at] + 0, argv[arg_at + 1] + 0, argv[arg_at + 2] + 0, argv[arg_at + 3] + 0
    arg_at = arg_at + 4
    local r, p, b, step = {}, {}, {}, nil
    for i = 1, group_nlimits[group] do
      local s, bad
      r[i], p[i], b[i], s, arg_at, bad = parse_limit(argv, arg_at, now)
      if s then
        step = step or {}
        step[i] = s
      end
      if bad then group_error[group] = bad end
    end
    group_ticks_per_us[group], group_ticks_per_event[group], group_burst[group], group_step[group] = r, p, b, step
  end
  -- The quota section, if any (see the layout table): each entry's key,
  -- known epoch and counts, by key.
  local quota, fresh, qdone = nil, nil, {}
  qepoch = {}
  local quota_epoch, quota_lost, quota_reassert
  if argv[arg_at] == 'q' then
    --#include quota.lua
    local nq
    fresh, nq, quota = argv[arg_at + 1], argv[arg_at + 2] + 0, {}
    arg_at = arg_at + 3
    nkeys = nkeys - nq
    for j = 1, nq do
      local q = { j = j, ekey = keys[nkeys + j], known = argv[arg_at + 1] + 0, win = {}, cnt = {} }
      local m = argv[arg_at + 2] + 0
      quota[argv[arg_at] + 0] = q
      arg_at = arg_at + 3
      for _ = 1, m do
        local i = argv[arg_at] + 0
        q.win[i], q.cnt[i] = argv[arg_at + 1] + 0, argv[arg_at + 2] + 0
        arg_at = arg_at + 3
      end
      qepoch[j] = 0
    end
  end
  -- arg_at is now the first key's group, when ngroups > 1.

  local no_step = {}

  -- Each key is decided by its group.
  decide_from = function(first_key)
    for k = first_key, nkeys do
      local group = 1
      if ngroups > 1 then group = argv[arg_at + k - 1] + 0 end
      if group_error[group] then error(group_error[group]) end
      local nlimits, limit_ticks_per_us, limit_ticks_per_event = group_nlimits[group], group_ticks_per_us[group], group_ticks_per_event[group]
      local at = 5 * k - 5 -- the key's first integer in reply, less one
      if nlimits == 1 and not group_step[group] then
        local ticks_per_us, ticks_per_event = limit_ticks_per_us[1], limit_ticks_per_event[1]
        -- Its two integers, the other three 0.
        reply[at + 1], reply[at + 2] =
          decide_one(keys[k], now, call, format, match, group_cost[group] * ticks_per_event, group_max_wait_us[group] * ticks_per_us, group_penalty_us[group], ticks_per_us, group_burst[group][1] * ticks_per_event)
        reply[at + 3], reply[at + 4], reply[at + 5] = 0, 0, 0
      else
        -- Several limits, or stepped ones (see limits.lua): charged when
        -- admitted, locked when denied with a penalty.
        local key, cost, penalty_us, r, step = keys[k], group_cost[group], group_penalty_us[group], limit_ticks_per_us, group_step[group] or no_step
        local stored, grace_us, q = call('GET', key), 0, quota and quota[k]
        if q then
          -- A stepped key's quota entry: a loss re-asserts the caller's
          -- counts, once per key in this call, and a grace period refuses.
          local e, id, g = quota_epoch(q.ekey, fresh)
          qepoch[q.j] = e
          if q.known ~= 0 and q.known ~= e then
            g = quota_lost(q.ekey, id, g)
            if not qdone[key] and quota_reassert(key, stored, nlimits, r, limit_ticks_per_event, group_burst[group], step, q.win, q.cnt) then
              stored = call('GET', key)
            end
            qdone[key] = true
          end
          if g > now then grace_us = g - now end
        end
        local allowed, lock_flag, index, remaining, delay_us, reset_us, next_us, exists, lock_until, clamped, us, frac, debt = judge(key, stored, nlimits, cost, group_max_wait_us[group], r, limit_ticks_per_event, group_burst[group], step, now + penalty_us)
        if grace_us > 0 then
          -- In the tag's grace period: refused, nothing written.
          if allowed == 1 or delay_us < grace_us then delay_us = grace_us end
          allowed, remaining, next_us = 0, 0, max(next_us, grace_us)
        elseif allowed == 1 then
          if cost > 0 then store(key, exists, us, frac, debt, 0, nlimits, r, step) end -- cost 0 is a peek
        elseif lock_flag == 0 and penalty_us > 0 then
          lock_flag, remaining = 1, 0
          delay_us = max(delay_us, penalty_us)
          next_us = max(next_us, penalty_us)
          store(key, exists, us, frac, debt, now + penalty_us, nlimits, r, step)
        elseif clamped then -- a lock without an expiry, written so (as in decide_one)
          store(key, exists, us, frac, debt, lock_until, nlimits, r, step)
        end
        reply[at + 1], reply[at + 2], reply[at + 3], reply[at + 4], reply[at + 5] = allowed + 2 * lock_flag + 4 * index, remaining, delay_us, reset_us, next_us
      end
    end
  end
end
if not decide_from then
  -- The lone form's several keys, under one continuous limit: its numbers
  -- were parsed once and are passed as arguments, scalars all the way down.
  decide_from = function(first_key, nkeys, keys, reply, decide_one, now, call, format, match, cost_ticks, max_wait_ticks, penalty_us, ticks_per_us, capacity)
    for k = first_key, nkeys do
      reply[2 * k - 1], reply[2 * k] = decide_one(keys[k], now, call, format, match, cost_ticks, max_wait_ticks, penalty_us, ticks_per_us, capacity)
    end
  end
end

-- The reply is made at its full size at once, every integer UNSET: a
-- table grown an integer at a time is reallocated at each power of two,
-- five times for two keys (under callgrind, 2.4k instructions per key at
-- two keys a call). A key's integers are written after its decision, its
-- flags first, so the first key whose flags are still UNSET is the one
-- that failed (no flags are 255). string.byte returns its integers on Lua's stack: a larger reply
-- is filled in a loop.
local UNSET, size = 255, width * nkeys + 1
if qepoch then size = size + #qepoch end
if size <= 2000 then
  reply = { string.byte(string.rep('\255', size), 1, size) }
else
  reply = {}
  for i = 1, size do reply[i] = UNSET end
end

-- Decide every key, each under pcall: a key's decision may fail alone, and
-- after a failing key the others are decided on from the next one.
local k, nfailed, first_error = 1, 0, nil
while true do
  local ok, err = pcall(decide_from, k, nkeys, keys, reply, decide_one, now, call, format, match, cost_ticks, max_wait_ticks, penalty_us, ticks_per_us, capacity)
  if ok then break end
  -- Key k failed: its integers are not in reply yet. Redis 7.0 hands
  -- pcall a redis.call error as a string, later versions as {err = ...};
  -- raised again as a table it keeps its code, which clients act on.
  if type(err) == 'string' and match(err, '^%u+ ') then err = { err = err } end
  local code = type(err) == 'table' and type(err.err) == 'string' and match(err.err, '^%u+')
  if code and code ~= 'WRONGTYPE' and code ~= 'ERR' then
    -- The server's state (READONLY, OOM, ...), not the key's value: the
    -- call fails, as a lone call would.
    error(err, 0)
  end
  while reply[width * k - width + 1] ~= UNSET do k = k + 1 end
  for i = width * k - width + 1, width * k do reply[i] = 0 end
  reply[width * k - width + 1] = -1
  nfailed = nfailed + 1
  first_error = first_error or err
  k = k + 1
  if k > nkeys then break end
end
if nfailed == nkeys then
  error(first_error, 0)
end
if qepoch then
  for j = 1, #qepoch do reply[width * nkeys + j] = qepoch[j] end
end
reply[size] = now
return reply
