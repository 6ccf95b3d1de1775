-- token_bucket.lua: one decision of a continuous token bucket, or a refund.
--
-- The bucket holds at most burst tokens and gains rate tokens every period,
-- continuously. A request of cost c is admitted, and spends c tokens, when
-- the bucket holds at least c. A missing key is a full bucket. A refund
-- gives c tokens back, never filling the bucket beyond burst.
--
-- KEYS[1]  hash {n, m, ts, p, r, b}: n whole tokens; m the fraction of the
--          next token in units of 1/p (0 <= m < p); ts the time in
--          microseconds up to which refill has been credited; p, r, b the
--          period_us, rate and burst of the limit that wrote them.
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  rate: tokens added per period, integer >= 1
-- ARGV[3]  period_us: the period in microseconds, integer >= 1
-- ARGV[4]  burst: capacity in tokens, integer >= 1
-- ARGV[5]  cost: tokens this request asks for (or gives back), integer in
--          [1, burst]; for a charge in [1, 2^50)
-- ARGV[6]  mode: 0 = spend if admitted, 1 = peek (decide, write nothing),
--          2 = refund cost tokens, 3 = charge cost tokens whatever the
--          bucket holds
--
-- Reply: {allowed 0|1, remaining tokens, retry_after_us, reset_after_us};
-- for a refund {given, remaining tokens, 0, reset_after_us}, given being the
-- whole tokens added (less than cost when the bucket filled up); for a
-- charge {1, remaining tokens, the wait for one token, reset_after_us}, or
-- {-1, 0, 0, 0} when it would leave the bucket 2^50 tokens or more short,
-- or 2^50 microseconds or more from full, past which the arithmetic here
-- is not exact: refused, nothing written.
--
-- Debt: a charge takes n below zero, and refill repays it before the
-- bucket admits again; the TTL, the time to full, covers it. A limit
-- change keeps a debt in tokens, cut to what the new limit refills in
-- 2^50 microseconds.
--
-- A limit change (the key asked under another rate, period or burst than
-- the one that wrote it) keeps the tokens the bucket holds: it is refilled
-- under the old limit up to now, its fraction of a token rescaled to the
-- new period (rounded down), cut to the new burst, and refilled under the
-- new limit from now on. A bucket full under the old limit is full under
-- the new one, as an absent key is: a full bucket's state expires, and
-- forgetting it must change nothing. The first call under the new limit writes the
-- converted state even when it is denied, so the change takes effect at
-- that call. State written before the limit was kept (no r, b) is read
-- under the call's limit, its fraction dropped if p differs.
--
-- Exactness: refill over e microseconds adds e*rate units of 1/period_us
-- token, an integer, so the state is an exact rational. Products such as
-- e*rate and burst*period_us pass 2^53 for large limits: they go through
-- mul_div, so every decision and every time in the reply is exact.
-- TTL: time until the bucket is full again, set on every write. A denial
-- under the limit that wrote the state writes nothing and only lengthens
-- the TTL, when its limit fills the bucket more slowly than the last
-- write's (keep_for); a peek writes nothing.

local mul_div, ceil_mul_div = wide()
local key = KEYS[1]
local now = now_us()
local rate = int_arg(2)
local period = int_arg(3)
local burst = int_arg(4)
local cost = int_arg(5)
local mode = ARGV[6]
local peek, refund, charge = mode == '1', mode == '2', mode == '3'
local two50 = 1125899906842624 -- 2^50

local st = redis.call('HMGET', key, 'n', 'm', 'ts', 'p', 'r', 'b')
local n, m, ts = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
local fresh = n == nil or m == nil or ts == nil
local p0, r0, b0 = tonumber(st[4]), tonumber(st[5]), tonumber(st[6])
if fresh then
  n, m, ts = burst, 0, now
  p0, r0, b0 = period, rate, burst
elseif r0 == nil or b0 == nil or p0 == nil then
  -- Written before the limit was kept: read under this one. A fraction in
  -- units of another period could stand for many tokens: drop it, less
  -- than a token, never more.
  if p0 ~= period then
    m = 0
  end
  p0, r0, b0 = period, rate, burst
end
local changed = p0 ~= period or r0 ~= rate or b0 ~= burst

-- refill credits the refill up to now at rate r per period p, burst b. A
-- clock that stepped back refills nothing and keeps ts.
local function refill(r, p, b)
  if n >= b then
    n, m = b, 0
  elseif now > ts then
    local e = now - ts
    if e >= ceil_mul_div(b - n, p, -m, r) then -- the time to fill
      n, m = b, 0
    else
      local add
      add, m = mul_div(e, r, m, p)
      n = n + add
    end
  end
  if now > ts then
    ts = now
  end
end

refill(r0, p0, b0)
if changed then
  if n >= b0 then
    n, m = burst, 0 -- full: full under the new limit too, as an absent key is
  elseif p0 ~= period then
    m = mul_div(m, period, 0, p0) -- m/p0 of a token in units of 1/period, rounded down
  end
  if n >= burst then
    n, m = burst, 0
  end
end

-- most_short returns the most whole tokens the bucket may be short of
-- full: 2^50 - 1, and no more than the new limit refills in 2^50 - 1
-- microseconds.
local function most_short()
  if rate >= period then
    return two50 - 1
  end
  return (mul_div(two50 - 1, rate, 0, period))
end

if changed and n < 0 and burst - n > most_short() then
  n, m = burst - most_short(), 0
end

-- When the clock stepped back, the state is as of ts, later than now.
local lag = 0
if ts > now then
  lag = ts - now
end

local function reset_us()
  return lag + ceil_mul_div(burst - n, period, -m, rate)
end

local function save()
  redis.call('HSET', key, 'n', n, 'm', m, 'ts', ts, 'p', period, 'r', rate, 'b', burst)
  redis.call('PEXPIRE', key, ttl_ms(reset_us()))
end

if charge then
  if burst - n + cost > most_short() then
    return {-1, 0, 0, 0}
  end
  n = n - cost
  save()
  local retry = 0
  if n < 1 then
    retry = lag + ceil_mul_div(1 - n, period, -m, rate)
  end
  return {1, math.max(n, 0), retry, reset_us()}
end

if refund then
  -- A missing key is full: nothing to give back.
  local given = 0
  if not fresh then
    given = math.min(cost, burst - n)
    if n + cost >= burst then
      n, m = burst, 0
    else
      n = n + cost
    end
    save()
  end
  return {given, math.max(n, 0), 0, reset_us()}
end

local allowed = n >= cost
if allowed and not peek then
  n = n - cost
end
if allowed and not peek then
  save()
elseif not peek then
  if changed then
    save()
  else
    keep_for(key, ttl_ms(reset_us()))
  end
end

local retry = 0
if not allowed then
  retry = lag + ceil_mul_div(cost - n, period, -m, rate)
end
return {allowed and 1 or 0, math.max(n, 0), retry, reset_us()}
