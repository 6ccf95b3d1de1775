-- concurrency_acquire.lua: try to take one lease of a concurrency limiter.
--
-- Each lease is a member of a sorted set scored by the time it expires. A
-- lease is granted when fewer than max leases are unexpired; it lasts
-- ttl_us unless released first, so a crashed holder's lease frees itself.
-- Leases expiring at or before now are removed on every call but a peek.
--
-- KEYS[1]  sorted set: lease id -> expiry in microseconds since the Unix epoch
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  max: leases that may be held at once, integer >= 1
-- ARGV[3]  ttl_us: lease lifetime in microseconds, integer >= 1
-- ARGV[4]  id: the new lease's id, unique (random, made by the caller)
-- ARGV[5]  peek: 1 = decide but write nothing, 0 = take a lease if granted
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}
--
-- remaining is max minus the leases held after this call; retry_after the
-- time until enough leases expire (an upper bound: holders release early);
-- reset_after the time until the last lease expires. TTL: the latest
-- expiry, set on every grant; pruning and releases only shorten what the
-- TTL must cover.

local key = KEYS[1]
local now = now_us()
local max = int_arg(2)
local ttl = int_arg(3)
local id = ARGV[4]
local peek = ARGV[5] == '1'

local held
if peek then
  held = redis.call('ZCOUNT', key, '(' .. string.format('%d', now), '+inf')
else
  redis.call('ZREMRANGEBYSCORE', key, '-inf', now)
  held = redis.call('ZCARD', key)
end

local allowed
if not peek and redis.call('ZSCORE', key, id) then
  -- This lease is held already, unexpired: the call is a retry of one
  -- that took it and whose reply was lost. Grant it again, take no more
  -- (counting it against itself would deny the caller and leave the
  -- lease to nobody until it expires).
  allowed = true
else
  allowed = held < max
  if allowed and not peek then
    redis.call('ZADD', key, now + ttl, id)
    held = held + 1
  end
end

local reset = 0
if held > 0 then
  local last = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  reset = tonumber(last[2]) - now
  if allowed and not peek then
    redis.call('PEXPIRE', key, ttl_ms(reset))
  end
end

local retry = 0
if not allowed then
  -- The (held - max + 1)-th earliest expiry brings held below max.
  local bound = '(' .. string.format('%d', now)
  local e = redis.call('ZRANGEBYSCORE', key, bound, '+inf', 'WITHSCORES', 'LIMIT', held - max, 1)
  retry = tonumber(e[2]) - now
end

local remaining = max - held
if remaining < 0 then
  remaining = 0
end
return {allowed and 1 or 0, remaining, retry, reset}
