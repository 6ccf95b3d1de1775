-- sliding_log.lua: one decision of a sliding-window log, or a refund.
--
-- Every admitted request is logged with its time and cost. A request of cost
-- c at time now is admitted when the cost logged in (now - period_us, now]
-- plus c is at most quota. Exact, at the price of one sorted-set member per
-- admitted request still in the window. A refund removes the newest member
-- of cost c among the newest 32 (the decision refunded, unless a later one
-- of the same cost came meanwhile, which counts the same), or else takes c
-- off the newest members, removing them or lowering their cost.
--
-- KEYS[1]  sorted set, one member per admitted request, scored by its time
--          in microseconds; the member is "<time_us>:<seq>:<cost>", unique
--          because seq comes from a counter (a cost is never split into
--          members, so a large cost is one member)
-- KEYS[2]  hash {seq, sum, t}: the member counter, the total cost of the
--          members of KEYS[1], and the latest time a call wrote at; same
--          hash tag, so same slot, as KEYS[1]
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  period_us: the window length in microseconds, integer >= 1
-- ARGV[3]  quota: cost admitted per window, integer >= 1
-- ARGV[4]  cost: integer in [1, quota]; for a charge in [1, 2^50)
-- ARGV[5]  mode: 0 = spend if admitted, 1 = peek (decide, write nothing),
--          2 = refund the cost, 3 = charge the cost whatever the log holds
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}; for a
-- refund {given, remaining, 0, reset_after_us}, given being the cost
-- removed from the log; for a charge {1, remaining, the wait for one
-- unit, reset_after_us}, or {-1, 0, 0, 0} when the cost logged would reach
-- 2^50: refused, nothing written. A charge is logged as an admission is,
-- past the quota, and leaves the window as it does.
--
-- A change of quota or period needs no conversion: the cost logged in the
-- window of the new period is compared with the new quota, exactly, as far
-- as the log reaches (a call under a shorter period removes the members
-- older than it, which a longer period would still count).
--
-- The log's time never runs back: a call stamped earlier than t (a clock
-- that stepped back, callers' clocks that disagree) is decided and logged
-- at t. Logged at its own time it would leave the window before requests
-- already logged at t, whose window dropped members it should have seen,
-- and the windows ending after t would over-admit. Times in the reply
-- count from the caller's now, as the fixed window's do.
--
-- Members scored at or before t - period_us have left the window and are
-- removed (their cost taken off sum) by any call but a peek; the work is
-- amortised, each member is removed once. retry_after is the time until
-- enough of the oldest members leave; reset_after the time until the
-- newest one does. TTL: the newest member's lifetime, t + period - now,
-- on both keys, set on every admission and on meta whenever it is
-- written; removing members never needs a longer TTL on the log. A
-- denial lengthens both TTLs when its period is longer than the last
-- write's (keep_for).

local log, meta = KEYS[1], KEYS[2]
local now = now_us()
local period = int_arg(2)
local quota = int_arg(3)
local cost = int_arg(4)
local mode = ARGV[5]
local peek, refund, charge = mode == '1', mode == '2', mode == '3'

local function cost_of(member)
  return tonumber(string.match(member, ':(%d+)$')) or 0
end

local st = redis.call('HMGET', meta, 'sum', 't')
local sum, t = tonumber(st[1]), tonumber(st[2])
if sum == nil or redis.call('EXISTS', log) == 0 then
  -- A new limiter, or one key of the pair evicted: rebuild the sum from
  -- the log (an empty log, when the log is the one missing).
  sum = 0
  for _, member in ipairs(redis.call('ZRANGE', log, 0, -1)) do
    sum = sum + cost_of(member)
  end
end
if t == nil then
  -- meta lost, or written before it kept t: the newest member stands in.
  local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  t = tonumber(newest[2]) or now
end
if now > t then
  t = now
end
local ttl = ttl_ms(t - now + period)

local cutoff = t - period
local old = redis.call('ZRANGEBYSCORE', log, '-inf', cutoff)
for _, member in ipairs(old) do
  sum = sum - cost_of(member)
end
if sum < 0 then
  sum = 0
end
if #old > 0 and not peek then
  redis.call('ZREMRANGEBYSCORE', log, '-inf', cutoff)
  redis.call('HSET', meta, 'sum', sum, 't', t)
  redis.call('PEXPIRE', meta, ttl) -- meta may have been rebuilt
end

local function reset_us()
  if sum <= 0 then
    return 0
  end
  local newest = redis.call('ZRANGE', log, -1, -1, 'WITHSCORES')
  if #newest == 2 then
    return math.max(tonumber(newest[2]) + period - now, 0)
  end
  return 0
end

if refund then
  local given = 0
  local newest = redis.call('ZREVRANGEBYSCORE', log, '+inf', '(' .. string.format('%d', cutoff), 'LIMIT', 0, 32)
  for _, member in ipairs(newest) do
    if cost_of(member) == cost then
      redis.call('ZREM', log, member)
      given = cost
      break
    end
  end
  -- No member of that cost among the newest: take it off the newest ones,
  -- removing each, or lowering the cost of the last one taken from.
  while given < cost do
    local batch = redis.call('ZREVRANGEBYSCORE', log, '+inf', '(' .. string.format('%d', cutoff), 'WITHSCORES', 'LIMIT', 0, 32)
    if #batch == 0 then
      break
    end
    for i = 1, #batch, 2 do
      local member, c = batch[i], cost_of(batch[i])
      local take = math.min(c, cost - given)
      if take < c then
        -- Added before the old entry goes, so the log is never empty in
        -- between: an emptied key would lose its TTL.
        local ts, seq = string.match(member, '^(%d+):(%d+):')
        redis.call('ZADD', log, batch[i + 1], string.format('%s:%s:%d', ts, seq, c - take))
      end
      redis.call('ZREM', log, member)
      given = given + take
      if given >= cost then
        break
      end
    end
  end
  if given > 0 then
    sum = math.max(sum - given, 0)
    redis.call('HSET', meta, 'sum', sum, 't', t)
    redis.call('PEXPIRE', meta, ttl)
  end
  return {given, math.max(quota - sum, 0), 0, reset_us()}
end

if charge and sum + cost >= 1125899906842624 then -- 2^50
  return {-1, 0, 0, 0}
end

local allowed = charge or sum + cost <= quota
if allowed and not peek then
  local seq = redis.call('HINCRBY', meta, 'seq', 1)
  redis.call('ZADD', log, t, string.format('%d:%d:%d', t, seq, cost))
  sum = sum + cost
  redis.call('HSET', meta, 'sum', sum, 't', t)
  redis.call('PEXPIRE', log, ttl)
  redis.call('PEXPIRE', meta, ttl)
elseif not peek then
  keep_for(log, ttl)
  keep_for(meta, ttl)
end
if charge then
  -- Logged whatever the sum: the rest answers as a decision of cost 1,
  -- whose retry is the wait for one unit.
  cost = 1
  allowed = sum + cost <= quota
end

local remaining = quota - sum
if remaining < 0 then
  remaining = 0
end

local retry = 0
if not allowed then
  -- Walk the oldest members still in the window until enough cost has
  -- left. Each costs at least 1, so at most need members are read.
  local need = sum + cost - quota
  local bound = '(' .. string.format('%d', cutoff)
  local entries = redis.call('ZRANGEBYSCORE', log, bound, '+inf', 'WITHSCORES', 'LIMIT', 0, need)
  retry = t - now + period -- unreachable unless the log and sum disagree
  local freed = 0
  for i = 1, #entries, 2 do
    freed = freed + cost_of(entries[i])
    if freed >= need then
      retry = tonumber(entries[i + 1]) + period - now
      break
    end
  end
end

if charge then
  return {1, remaining, retry, reset_us()}
end
return {allowed and 1 or 0, remaining, retry, reset_us()}
