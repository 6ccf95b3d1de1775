-- token_bucket.lua: one decision of a continuous token bucket.
--
-- The bucket holds at most burst tokens and gains rate tokens every period,
-- continuously. A request of cost c is admitted, and spends c tokens, when
-- the bucket holds at least c. A missing key is a full bucket.
--
-- KEYS[1]  hash {n, m, ts, p}: n whole tokens; m the fraction of the next
--          token in units of 1/p (0 <= m < p); ts the time in microseconds
--          up to which refill has been credited; p the period_us that wrote
--          them.
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  rate: tokens added per period, integer >= 1
-- ARGV[3]  period_us: the period in microseconds, integer >= 1
-- ARGV[4]  burst: capacity in tokens, integer >= 1
-- ARGV[5]  cost: tokens this request asks for, integer in [1, burst]
-- ARGV[6]  peek: 1 = decide but write nothing, 0 = spend if admitted
--
-- Reply: {allowed 0|1, remaining tokens, retry_after_us, reset_after_us}
--
-- Exactness: refill over e microseconds adds e*rate units of 1/period_us
-- token, an integer, so the state is an exact rational. Products such as
-- e*rate and burst*period_us pass 2^53 for large limits: they go through
-- mul_div, so every decision and every time in the reply is exact.
-- TTL: time until the bucket is full again, set on every write. A denial
-- writes no state and only lengthens the TTL, when its limit fills the
-- bucket more slowly than the last write's (keep_for); a peek writes
-- nothing.

local key = KEYS[1]
local now = now_us()
local rate = int_arg(2)
local period = int_arg(3)
local burst = int_arg(4)
local cost = int_arg(5)
local peek = ARGV[6] == '1'

local st = redis.call('HMGET', key, 'n', 'm', 'ts', 'p')
local n, m, ts = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
if n == nil or m == nil or ts == nil then
  n, m, ts = burst, 0, now
end
if tonumber(st[4]) ~= period then
  -- The fraction is in units of another period (the same key asked with
  -- another Period, or state from before p was kept): read in this one it
  -- could stand for many tokens. Drop it: less than a token, never more.
  m = 0
end
if n >= burst then
  n, m = burst, 0 -- full, or the burst was lowered since the last write
end

-- Refill. A clock that stepped back refills nothing and keeps ts.
if now > ts then
  local e = now - ts
  if e >= ceil_mul_div(burst - n, period, -m, rate) then -- the time to fill
    n, m = burst, 0
  else
    local add
    add, m = mul_div(e, rate, m, period)
    n = n + add
  end
  ts = now
end

-- When the clock stepped back, the state is as of ts, later than now.
local lag = 0
if ts > now then
  lag = ts - now
end

local allowed = n >= cost
if allowed and not peek then
  n = n - cost
end
local reset = lag + ceil_mul_div(burst - n, period, -m, rate)
if allowed and not peek then
  redis.call('HSET', key, 'n', n, 'm', m, 'ts', ts, 'p', period)
  redis.call('PEXPIRE', key, ttl_ms(reset))
elseif not peek then
  keep_for(key, ttl_ms(reset))
end

local retry = 0
if not allowed then
  retry = lag + ceil_mul_div(cost - n, period, -m, rate)
end
return {allowed and 1 or 0, n, retry, reset}
