-- gcra.lua: one decision of the generic cell rate algorithm.
--
-- The state is the theoretical arrival time (TAT). With emission interval
-- T = period_us / rate, a request of cost c is admitted when
-- max(TAT, now) + c*T - now <= burst*T, and then moves TAT there. A missing
-- key, or a TAT in the past, is an idle limiter: TAT = now.
--
-- T is rarely a whole number of microseconds, so TAT is kept exactly as
-- t + f/rate microseconds, t an integer and 0 <= f < rate, and the Go side
-- passes c*T and burst*T split the same way (computed in 128-bit integers).
-- Every comparison is then between integers: no rounding, whatever the
-- limit.
--
-- KEYS[1]  hash {t, f, r}: TAT = t + f/r microseconds since the Unix
--          epoch; r the rate that wrote them (0 <= f < r)
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  rate: requests per period, integer >= 1
-- ARGV[3]  period_us: the period in microseconds, integer >= 1
-- ARGV[4]  inc_q: floor(cost*period_us / rate), whole microseconds of c*T
-- ARGV[5]  inc_r: (cost*period_us) mod rate, the remainder in 1/rate us
-- ARGV[6]  tol_q: floor(burst*period_us / rate), whole microseconds of burst*T
-- ARGV[7]  tol_r: (burst*period_us) mod rate
-- ARGV[8]  peek: 1 = decide but write nothing, 0 = spend if admitted
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}
--
-- remaining = floor((burst*T - (TAT - now)) / T), exact: the product
-- with rate, past 2^53 for large limits, goes through mul_div. TTL:
-- TAT - now (when the limiter is idle again), set on every write; a denial
-- or a peek writes nothing.

local key = KEYS[1]
local now = now_us()
local rate = int_arg(2)
local period = int_arg(3)
local inc_q, inc_r = int_arg(4), int_arg(5)
local tol_q, tol_r = int_arg(6), int_arg(7)
local peek = ARGV[8] == '1'

local st = redis.call('HMGET', key, 't', 'f', 'r')
local t, f, r = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
if t ~= nil and f ~= nil and f > 0 and r ~= rate then
  -- f is in units of 1/r us (the same key asked with another Rate): read in
  -- this rate's units it could stand for hours. Round it up into them: TAT
  -- later by less than 1/rate us. State from before r was kept: to the next
  -- whole microsecond.
  if r == nil then
    f = rate
  else
    f = ceil_mul_div(f, rate, 0, r)
  end
  if f == rate then
    t, f = t + 1, 0
  end
end
if t == nil or f == nil or t < now then
  t, f = now, 0 -- idle: t < now means TAT < now, as f/rate < 1
end

-- The TAT this request would leave behind.
local nt, nf = t + inc_q, f + inc_r
if nf >= rate then
  nt, nf = nt + 1, nf - rate
end
local d = nt - now
local allowed = d < tol_q or (d == tol_q and nf <= tol_r)

local retry = 0
if allowed and not peek then
  t, f = nt, nf
elseif not allowed then
  -- ceil(new TAT - burst*T - now)
  retry = d - tol_q
  if nf > tol_r then
    retry = retry + 1
  end
end

local reset = t - now -- ceil(TAT - now); t >= now here
if f > 0 then
  reset = reset + 1
end
if allowed and not peek then
  redis.call('HSET', key, 't', t, 'f', f, 'r', rate)
  redis.call('PEXPIRE', key, ttl_ms(reset))
end

-- In units of 1/rate us, burst*T - (TAT - now) is x*rate + tol_r - f and
-- T is period.
local x = tol_q - (t - now)
local remaining = 0
if x >= 0 then
  local q = mul_div(x, rate, tol_r - f, period)
  remaining = math.max(q, 0)
end
return {allowed and 1 or 0, remaining, retry, reset}
