-- sluice: a path of keys (an organisation, its team, the team's user, the
-- user's API key) decided as one, all or nothing. Each level is a key with
-- its own limits, stored exactly as bucket.lua stores a key (see its layout
-- table); this script reads every level, decides each as bucket.lua's
-- batch form would, and only then writes: when every level admits, every
-- level is charged; when any level denies (or is locked), no level is
-- charged, and only the deciding level may be locked (a penalty).
-- The model of the arithmetic is stepPath in core/path_model.go; in Go,
-- core/path.go builds the arguments (pathCall.args) and decodes the reply
-- (parsePathReply). All keys share one Cluster slot: their hash tag is the
-- root's (see pathKey).
--
-- KEYS     lone form: one bucket per level, the root first; 1 to 8
--          levels. Batch form: each path's keys in turn.
--
-- ARGV, lone form (ARGV[1] ~= '0'): one path.
--   | 1         | nlevels          | the number of levels (#KEYS)          |
--   | then, per | cost             | events taken, the same at every level |
--   | level     | max_wait_us      | how long a reservation may wait       |
--   |           | penalty_us       | how long a denial locks the deciding  |
--   |           |                  | level's key; 0: none                  |
--   |           | nlimits          | the level's number of limits, 1 to 8  |
--   |           | limits           | nlimits times, as in bucket.lua's     |
--   |           |                  | batch form: continuous (3 numbers),   |
--   |           |                  | interval (0 and 3) or calendar (-1    |
--   |           |                  | and 8)                                |
--   Each level's group is exactly a group of bucket.lua's batch form.
--   A path with stepped limits may end with a quota section (see
--   quota.lua); its last KEYS entry, after the levels', is then the root
--   tag's epoch key (<prefix>{tag}~epoch):
--   | fresh     | an epoch to write for a tag that has none         |
--   | then, per | known  | the tag's epoch the caller knows for the     |
--   | level     |        | level; 0: none                               |
--   |           | m      | the number of counts that follow             |
--   |           | limit, | m times: the caller admitted count under the |
--   |           | window,| level's limit (1-based) in the window (its   |
--   |           | count  | index, as stored)                            |
--   | q         | the marker, the path's last argument              |
--   A path with a shared level (fair share, priority classes; see
--   core/path_share_model.go and docs/fairshare.md) ends with a share
--   section of seven arguments, after its quota section if any; its two
--   KEYS entries follow the levels' (before the epoch key): the shared
--   level's record of its children (<level's key>~fair) and the child's
--   (<child level's key>~fair).
--   | level     | the shared level, 1-based; its one continuous limit |
--   | fair      | 1: fair share among its children; 0: classes only   |
--   | weight    | the child's weight, >= 1                            |
--   | window    | the records' window, microseconds                   |
--   | contend   | tokens: a take leaving fewer is under contention    |
--   | floor     | tokens the request's class must leave               |
--   | s         | the marker, the path's last argument                |
--   Records, each a string expiring at the end of the window after the
--   one it was written in: the parent's "win cur prev wcur wprev" (the
--   window, the cost its children were admitted in it and in the one
--   before, the weight of the children that last asked in each), the
--   child's "win cur prev weight" (the window it last asked in, its
--   admitted cost then and in the one before, its weight).
--
-- ARGV, batch form (ARGV[1] == '0'): several paths, decided in order.
--   | 1         | 0                | the marker                            |
--   | 2         | npaths           | the number of paths                   |
--   | then, per | span             | the number of the path's arguments    |
--   | path      | nlevels, groups  | the path's arguments, as in the lone  |
--   |           |                  | form                                  |
--
-- Reply: six integers.
--   | 1 | flags     | as bucket.lua's, of the deciding level: 1 if admitted, |
--   |   |           | +2 if locked, +4 times the index of the limit that     |
--   |   |           | decided within it                                      |
--   | 2 | remaining | as bucket.lua's, of the deciding level                 |
--   | 3 | delay_us  | a denial's retry (the deciding level's); an admitted   |
--   |   |           | reservation's wait (the longest of the levels')        |
--   | 4 | reset_us  | as bucket.lua's, of the deciding level                 |
--   | 5 | next_us   | admitted: the longest of the levels'; denied: the      |
--   |   |           | deciding level's                                       |
--   | 6 | level     | the deciding level, 0-based: of the levels that deny,  |
--   |   |           | the one with the longest retry (the first of equals);  |
--   |   |           | when all admit, the one with the fewest requests left  |
--   |   |           | (the first of equals); plus 16 times the 1-based index |
--   |   |           | of a level whose value of another type was deleted     |
--   |   |           | (see read_level), if any; plus 256 times the reason of |
--   |   |           | a shared level's denial: 1 fair share, 2 a class's     |
--   |   |           | reserve (0: its bucket, or an admission)               |
--
-- With a quota section, a seventh: the tag's epoch as read (its first 13
-- hex digits). Last, always: now, the instant the path was decided at
-- (TIME, unix microseconds), as in bucket.lua.
--
-- Batch form reply: six integers per path, in order; flags -1 (and five
-- zeros) for a path that raised an error of its own (WRONGTYPE, ERR): it
-- wrote nothing, and the other paths are decided. Then one integer per
-- path with a quota section, in order: its epoch (0 for a failed path).
-- Last, once per call: now, as in the lone form.
--
-- Errors: a path's error is raised before it writes anything (every level
-- is read and judged first), so a failed path charges nothing. In the lone
-- form it fails the call; in the batch form it fails its path alone, but
-- an error of the server's state (READONLY, OOM, ...) fails the call, as
-- does a failure of every path (with the first one's error).
--
-- Numbers are doubles, every value an integer below 2^53, as in bucket.lua.

local call, format, match = redis.call, string.format, string.match
local t = call('TIME')
local now = t[1] * 1000000 + t[2]

local max = math.max
--#include arith.lua
--#include waits.lua
-- Made by the first level that needs them (see limits.lua), and by the
-- first path with a quota section (see quota.lua).
local parse_limit, judge, store
local quota_epoch, quota_lost, quota_reassert

-- read_level returns a level's stored value, or nil for a value no
-- script writes, read as a full bucket and overwritten by the level's next
-- charge (as bucket.lua does): longer than any value of nlimits limits (a
-- 10 MB value, say), or a lock ahead of now on a value without an expiry
-- (every value the scripts write has one), which would otherwise lock the
-- level for good.
--
-- A value of another type (a hash another program wrote at the level's
-- name) is deleted and read as a full bucket too, and foreign remembers
-- which level held it (1-based; 0: none): the reply reports it (see the
-- layout table), and the limiter logs it once.
local foreign = 0
local function read_level(key, nlimits, lv)
  local stored = redis.pcall('GET', key)
  if type(stored) == 'table' then
    call('DEL', key)
    foreign = lv
    return nil
  end
  if not stored then return nil end
  if #stored > 24 * (1 + 2 * nlimits) then return nil end
  local lock = match(stored, '^(%-?%d+) ')
  if lock and lock + 0 > now and call('PTTL', key) == -1 then return nil end
  return stored
end

-- judge_one is judge for a level of one continuous limit, as bucket.lua's
-- decide_one decides it, writing nothing.
local function judge_one(key, L, lv)
  local r, p, b = L.r1, L.p1, L.b1
  local stored = read_level(key, 1, lv)
  local exists, lock_until, debt = false, 0, 0
  if stored then
    local sl, su, sf = match(stored, '^(%-?%d+) (%-?%d+) (%-?%d+)$')
    if sl then
      exists, lock_until, L.s_us, L.s_frac = true, sl + 0, su + 0, sf + 0
      debt = (L.s_us - now) * r + L.s_frac
      if debt < 0 then debt = 0 end
      if debt > b * p and call('PTTL', key) == -1 then
        exists, lock_until, debt = false, 0, 0 -- a debt no script writes (see read_level)
      end
    end
  end
  L.exists, L.lock_until, L.debt1 = exists, lock_until, debt
  local capacity = b * p
  local after = debt + L.cost * p
  local excess = after - capacity
  local wait_us = 0
  if excess > 0 then wait_us = ceildiv(excess, r) end
  local locked = exists and now < lock_until
  if locked or excess > L.max_wait_us * r then
    local remaining = floordiv(max(0, capacity - debt), p)
    local next_us = until_us(debt + p - capacity, r, nil)
    local lock_flag, retry_us = 0, wait_us
    if locked then
      lock_flag, remaining = 1, 0
      retry_us = max(retry_us, lock_until - now)
      next_us = max(next_us, lock_until - now)
    end
    return 0, lock_flag, 0, remaining, retry_us, until_us(debt, r, nil), next_us
  end
  local whole = floordiv(after, r)
  L.new1_us, L.new1_frac, L.ttl = now + whole, after - whole * r, max(1, ceildiv(after, r))
  return 1, 0, 0, floordiv(max(0, capacity - after), p), wait_us, until_us(after, r, nil), until_us(after + p - capacity, r, nil)
end

-- read_share reads a share record at key as n integers, or nil for none:
-- a value of another shape (or type, then deleted) is no record.
local function read_share(key, n)
  local v = redis.pcall('GET', key)
  if type(v) == 'table' then
    call('DEL', key)
    return nil
  end
  if not v or #v > 24 * n then return nil end
  local f = {}
  for x in string.gmatch(v, '%-?%d+') do f[#f + 1] = x + 0 end
  if #f ~= n then return nil end
  return f
end

-- share_roll reads the records of S (the share section) and brings them
-- to the window holding now, the child counted as asking in it, as
-- shareRoll in core/path_share_model.go does.
local function share_roll(S)
  local w = floordiv(now, S.window)
  local P = { w, 0, 0, 0, 0 }
  local f = read_share(S.pkey, 5)
  if f and f[1] == w then
    P = f
  elseif f and f[1] == w - 1 then
    P = { w, 0, f[2], 0, f[4] }
  end
  local c = read_share(S.ckey, 4)
  local C = { w, 0, 0, S.weight }
  if c and c[1] == w then
    P[4] = P[4] + S.weight - c[4]
    C[2], C[3] = c[2], c[3]
  elseif c and c[1] == w - 1 then
    P[5] = P[5] - c[4]
    P[4] = P[4] + S.weight
    C[3] = c[2]
  else
    P[4] = P[4] + S.weight
  end
  P[4] = max(P[4], S.weight)
  P[5] = max(P[5], 0)
  P[2] = max(P[2], C[2])
  P[3] = max(P[3], C[3])
  S.P, S.C = P, C
end

-- share_gate judges the shared level L (one continuous limit), whose
-- bucket admitted, as gateShare does: the class's floor, then under
-- contention the child's fair share. It returns nil, or the denial's
-- reason (1 fair share, 2 a class's reserve) and its decision (as
-- judge_one's, from remaining on).
local function share_gate(S, L)
  local r, p, d = L.r1, L.p1, L.debt1
  local left = L.b1 * p - d - L.cost * p
  local thr, why = nil, 0
  if left < S.floor * p then
    thr, why = S.floor, 2
  elseif S.fair and left < S.contend * p then
    local P, C, win = S.P, S.C, S.window
    local e = now - P[1] * win
    local lhs = (C[2] * win + C[3] * (win - e)) * (P[4] + P[5])
    local rhs = (P[2] * win + P[3] * (win - e)) * S.weight
    rhs = rhs * (S.contend * 2 + floordiv(left, p))
    lhs = lhs * (S.contend * 2)
    if lhs > rhs then thr, why = S.contend, 1 end
  end
  if not thr then return nil end
  local limit = L.b1 * p - thr * p
  return why, floordiv(max(0, limit - d), p), ceildiv(d + L.cost * p - limit, r), until_us(d, r, nil), max(0, ceildiv(d + p - limit, r))
end

-- share_write stores S's records, charged cost when admitted.
local function share_write(S, admitted, cost)
  local P, C = S.P, S.C
  if admitted then
    C[2] = C[2] + cost
    P[2] = P[2] + cost
  end
  local px = ceildiv((P[1] + 2) * S.window - now, 1000)
  call('SET', S.pkey, format('%d %d %d %d %d', P[1], P[2], P[3], P[4], P[5]), 'PX', px)
  call('SET', S.ckey, format('%d %d %d %d', C[1], C[2], C[3], C[4]), 'PX', px)
end

-- quota_path reads a path's quota section, from ARGV[at] (see the layout
-- table), for its levels (parsed) whose keys are keys; ekey is the root
-- tag's epoch key. After a loss it re-asserts each level's counts and
-- begins the grace period (see quota.lua). It returns the epoch and the
-- grace period left, in microseconds (0: none).
local function quota_path(at, levels, keys, ekey)
  if not quota_epoch then
    --#include quota.lua
  end
  local fresh = ARGV[at]
  at = at + 1
  local e, id, g = quota_epoch(ekey, fresh)
  for lv = 1, #levels do
    local L, known, m = levels[lv], ARGV[at] + 0, ARGV[at + 1] + 0
    local win, cnt = {}, {}
    at = at + 2
    for _ = 1, m do
      local i = ARGV[at] + 0
      win[i], cnt[i] = ARGV[at + 1] + 0, ARGV[at + 2] + 0
      at = at + 3
    end
    if known ~= 0 and known ~= e then
      g = quota_lost(ekey, id, g)
      if not L.one then
        quota_reassert(keys[lv], read_level(keys[lv], L.n, lv), L.n, L.r, L.p, L.b, L.step, win, cnt)
      end
    end
  end
  if g > now then return e, g - now end
  return e, 0
end

-- decide_path decides the path whose keys follow KEYS[k0] and whose
-- arguments start at ARGV[at] (its nlevels) and end at ARGV[last], and
-- returns its reply (see the layout table) and, with a quota section, its
-- epoch. It writes only once every level is judged (a re-assertion
-- apart), so a path that fails part way writes nothing else.
local function decide_path(k0, at, last)
  foreign = 0
  -- Parse the levels.
  local nlevels = ARGV[at] + 0
  local S, ks = nil, 0 -- the share section; its keys, which come before the epoch key
  if ARGV[last] == 's' then
    S = { lv = ARGV[last - 6] + 0, fair = ARGV[last - 5] == '1', weight = ARGV[last - 4] + 0, window = ARGV[last - 3] + 0, contend = ARGV[last - 2] + 0, floor = ARGV[last - 1] + 0, pkey = KEYS[k0 + nlevels + 1], ckey = KEYS[k0 + nlevels + 2] }
    last, ks = last - 7, 2
    if S.fair then share_roll(S) end
  end
  at = at + 1
  local levels, keys = {}, {}
  for lv = 1, nlevels do
    keys[lv] = KEYS[k0 + lv]
    local L = { cost = ARGV[at] + 0, max_wait_us = ARGV[at + 1] + 0, penalty_us = ARGV[at + 2] + 0, n = ARGV[at + 3] + 0 }
    at = at + 4
    if L.n == 1 and ARGV[at] ~= '0' and ARGV[at] ~= '-1' then
      -- One continuous limit, the usual level: scalars, no tables (see
      -- judge_one).
      L.one, L.r1, L.p1, L.b1 = true, ARGV[at] + 0, ARGV[at + 1] + 0, ARGV[at + 2] + 0
      at = at + 3
    else
      L.r, L.p, L.b, L.step = {}, {}, {}, {}
      if not judge then
        --#include limits.lua
      end
    end
    for i = 1, (L.one and 0 or L.n) do
      local bad
      L.r[i], L.p[i], L.b[i], L.step[i], at, bad = parse_limit(ARGV, at, now)
      if bad then error(bad) end
    end
    levels[lv] = L
  end
  if S and not (levels[S.lv] and levels[S.lv].one) then
    error('ERR sluice: a shared level has one continuous limit')
  end
  local epoch, grace_us = nil, 0
  if ARGV[last] == 'q' then
    epoch, grace_us = quota_path(at, levels, keys, KEYS[k0 + nlevels + ks + 1])
  end

  -- Judge every level; find the deciding one.
  local all_admit = true
  local dl, d_allowed, d_lock, d_index, d_remaining, d_delay, d_reset, d_next
  local d_why = 0 -- the deciding level's reason (see the layout table)
  local max_wait, max_next = 0, 0
  for lv = 1, nlevels do
    local L = levels[lv]
    local allowed, lock_flag, index, remaining, delay_us, reset_us, next_us
    if L.one then
      allowed, lock_flag, index, remaining, delay_us, reset_us, next_us = judge_one(keys[lv], L, lv)
    else
      -- Several limits, or stepped ones: judged as bucket.lua's batch
      -- form judges a key (see limits.lua), and written only if every
      -- level admits (or for a penalty).
      local lock_until, clamped
      allowed, lock_flag, index, remaining, delay_us, reset_us, next_us, L.exists, lock_until, clamped, L.us, L.frac, L.debt = judge(keys[lv], read_level(keys[lv], L.n, lv), L.n, L.cost, L.max_wait_us, L.r, L.p, L.b, L.step)
    end
    local why = 0
    if S and lv == S.lv and allowed == 1 then
      local w, rem, del, res, nxt = share_gate(S, L)
      if w then
        why, allowed, lock_flag, index, remaining, delay_us, reset_us, next_us = w, 0, 0, 0, rem, del, res, nxt
      end
    end
    local take = false
    if allowed == 1 then
      max_wait = max(max_wait, delay_us)
      max_next = max(max_next, next_us)
      if all_admit and (dl == nil or remaining < d_remaining) then take = true end
    else
      if all_admit or delay_us > d_delay then take = true end
      all_admit = false
    end
    if take then
      dl, d_allowed, d_lock, d_index, d_remaining, d_delay, d_reset, d_next, d_why = lv, allowed, lock_flag, index, remaining, delay_us, reset_us, next_us, why
    end
  end
  if S and S.fair then share_write(S, all_admit and grace_us == 0, levels[1].cost) end

  if grace_us > 0 then
    -- In the tag's grace period: refused, nothing written.
    local delay = grace_us
    if not all_admit then delay = max(d_delay, grace_us) end
    return { 2 * d_lock + 4 * d_index, 0, delay, d_reset, max(d_next, grace_us), dl - 1 + 16 * foreign + 256 * d_why }, epoch
  end

  if all_admit then
    for lv = 1, nlevels do
      local L = levels[lv]
      if L.cost > 0 and L.one then
        call('SET', keys[lv], format('0 %d %d', L.new1_us, L.new1_frac), 'PX', format('%d', ceildiv(L.ttl, 1000)))
      elseif L.cost > 0 then
        store(keys[lv], L.exists, L.us, L.frac, L.debt, 0, L.n, L.r, L.step)
      end
    end
    return { 1 + 4 * d_index, d_remaining, max_wait, d_reset, max_next, dl - 1 + 16 * foreign }, epoch
  end

  -- Denied: nothing is charged. A penalty locks the deciding level's key
  -- (unless it is locked already), its buckets written back unchanged.
  local L = levels[dl]
  if d_lock == 0 and L.penalty_us > 0 and d_why == 0 then
    local penalty_us = L.penalty_us
    d_lock, d_remaining = 1, 0
    d_delay = max(d_delay, penalty_us)
    d_next = max(d_next, penalty_us)
    local lock_until = now + penalty_us
    if L.one then
      local us, frac = now, 0
      if L.exists then us, frac = L.s_us, L.s_frac end
      local ttl = max(1, lock_until - now, ceildiv((us - now) * L.r1 + frac, L.r1))
      call('SET', keys[dl], format('%d %d %d', lock_until, us, frac), 'PX', format('%d', ceildiv(ttl, 1000)))
      return { 2 + 4 * d_index, d_remaining, d_delay, d_reset, d_next, dl - 1 + 16 * foreign }, epoch
    end
    store(keys[dl], L.exists, L.us, L.frac, L.debt, lock_until, L.n, L.r, L.step)
  end
  return { 2 * d_lock + 4 * d_index, d_remaining, d_delay, d_reset, d_next, dl - 1 + 16 * foreign + 256 * d_why }, epoch
end

if ARGV[1] ~= '0' then -- the lone form
  local nkeys, last = ARGV[1] + 0, #ARGV
  if ARGV[last] == 's' then nkeys, last = nkeys + 2, last - 7 end
  if ARGV[last] == 'q' then nkeys = nkeys + 1 end
  if nkeys ~= #KEYS then error('ERR sluice: path.lua wants one key per level, and one for a quota section') end
  local res, epoch = decide_path(0, 1, #ARGV)
  if epoch then res[7] = epoch end
  res[#res + 1] = now
  return res
end

-- The batch form: each path decided in order under pcall, so that one
-- failing path (WRONGTYPE, a calendar mismatch) fails alone.
local npaths = ARGV[2] + 0
local reply, k0, at, nfailed, first_error = {}, 0, 3, 0, nil
local epochs = {} -- one per path with a quota section, in order
for i = 1, npaths do
  local span, nlevels = ARGV[at] + 0, ARGV[at + 1] + 0
  local share = ARGV[at + span] == 's'
  local quota = ARGV[at + span - (share and 7 or 0)] == 'q'
  local ok, res, epoch = pcall(decide_path, k0, at + 1, at + span)
  if not ok then
    -- As in bucket.lua: an error of the server's state fails the call.
    if type(res) == 'string' and match(res, '^%u+ ') then res = { err = res } end
    local code = type(res) == 'table' and type(res.err) == 'string' and match(res.err, '^%u+')
    if code and code ~= 'WRONGTYPE' and code ~= 'ERR' then
      error(res, 0)
    end
    nfailed = nfailed + 1
    first_error = first_error or res
    res = { -1, 0, 0, 0, 0, 0 }
  end
  for j = 1, 6 do reply[6 * i - 6 + j] = res[j] end
  if quota then
    epochs[#epochs + 1] = ok and epoch or 0
    k0 = k0 + 1
  end
  if share then k0 = k0 + 2 end
  k0, at = k0 + nlevels, at + 1 + span
end
if nfailed == npaths then error(first_error, 0) end
for j = 1, #epochs do reply[6 * npaths + j] = epochs[j] end
reply[#reply + 1] = now
return reply
