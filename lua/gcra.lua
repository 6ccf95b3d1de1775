-- gcra.lua: one decision of the generic cell rate algorithm, or a refund.
--
-- The state is the theoretical arrival time (TAT). With emission interval
-- T = period_us / rate, a request of cost c is admitted when
-- max(TAT, now) + c*T - now <= burst*T, and then moves TAT there. A missing
-- key, or a TAT in the past, is an idle limiter: TAT = now. A refund moves
-- TAT back by c*T, never before now.
--
-- T is rarely a whole number of microseconds, so TAT is kept exactly as
-- t + f/rate microseconds, t an integer and 0 <= f < rate, and the Go side
-- passes c*T and burst*T split the same way (computed in 128-bit integers).
-- Every comparison is then between integers: no rounding, whatever the
-- limit.
--
-- KEYS[1]  hash {t, f, r, p, b}: TAT = t + f/r microseconds since the Unix
--          epoch; r, p, b the rate, period_us and burst of the limit that
--          wrote them (0 <= f < r)
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  rate: requests per period, integer >= 1
-- ARGV[3]  period_us: the period in microseconds, integer >= 1
-- ARGV[4]  inc_q: floor(cost*period_us / rate), whole microseconds of c*T
-- ARGV[5]  inc_r: (cost*period_us) mod rate, the remainder in 1/rate us
-- ARGV[6]  tol_q: floor(burst*period_us / rate), whole microseconds of burst*T
-- ARGV[7]  tol_r: (burst*period_us) mod rate
-- ARGV[8]  mode: 0 = spend if admitted, 1 = peek (decide, write nothing),
--          2 = refund the cost
-- ARGV[9]  burst: integer >= 1
-- ARGV[10] cost: integer in [1, burst]
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}; for a
-- refund {given, remaining, 0, reset_after_us}, given being the whole
-- tokens the bucket was short of, up to cost.
--
-- remaining = floor((burst*T - (TAT - now)) / T), exact: the product
-- with rate, past 2^53 for large limits, goes through mul_div.
--
-- A limit change (the key asked under another rate, period or burst than
-- the one that wrote it) keeps the tokens the bucket holds at now,
-- burst0 - (TAT - now)/T0, cut to the new burst, and sets TAT so that the
-- bucket holds that many under the new limit, rounded to fewer tokens by
-- less than 1/rate us. The first call under the new limit writes the
-- converted state even when it is denied, so the change takes effect at
-- that call. A TAT more than burst0*T0 ahead (the clock stepped back) is
-- converted at the instant the bucket was empty, TAT - burst0*T0, as an
-- empty bucket. A bucket full under the old limit (TAT not ahead of now)
-- is full under the new one, as an absent key is. State without p or b (written before they were kept) keeps
-- its TAT, its fraction rounded up into this rate's units.
--
-- TTL: TAT - now (when the limiter is idle again), set on every write; a
-- denial under the limit that wrote the state, and a peek, write nothing.

local mul_div, ceil_mul_div = wide()
local key = KEYS[1]
local now = now_us()
local rate = int_arg(2)
local period = int_arg(3)
local inc_q, inc_r = int_arg(4), int_arg(5)
local tol_q, tol_r = int_arg(6), int_arg(7)
local mode = ARGV[8]
local peek, refund = mode == '1', mode == '2'
local burst = int_arg(9)
local cost = int_arg(10)

local st = redis.call('HMGET', key, 't', 'f', 'r', 'p', 'b')
local t, f = tonumber(st[1]), tonumber(st[2])
local r0, p0, b0 = tonumber(st[3]), tonumber(st[4]), tonumber(st[5])
local fresh = t == nil or f == nil
local changed = false
if fresh then
  t, f = now, 0
elseif r0 ~= nil and p0 ~= nil and b0 ~= nil then
  changed = r0 ~= rate or p0 ~= period or b0 ~= burst
  if changed and (t > now or (t == now and f > 0)) then
    -- burst0*T0 in whole microseconds and 1/r0 remainders.
    local tol_q0, tol_r0 = mul_div(b0, p0, 0, r0)
    local d = t - now -- TAT - now = d + f/r0 microseconds
    if d > tol_q0 or (d == tol_q0 and f > tol_r0) then
      -- Ahead of an empty bucket: empty at ceil(TAT - burst0*T0).
      local te = t - tol_q0
      if f > tol_r0 then
        te = te + 1
      end
      t, f = te + tol_q, tol_r
    else
      -- s = sq + sr/p0 tokens short of burst0; the new bucket is short of
      -- k + sr/p0 = s + burst - burst0, at most burst.
      local sq, sr = mul_div(d, r0, f, p0)
      local k = sq + burst - b0
      if k < 0 or (k == 0 and sr == 0) then
        t, f = now, 0 -- holds the new burst or more: full
      else
        -- (k*period + ceil(sr*period/p0)) / rate microseconds short of full.
        local dq, dr = mul_div(k, period, ceil_mul_div(sr, period, 0, p0), rate)
        t, f = now + dq, dr
      end
    end
  end
elseif f > 0 and r0 ~= rate then
  -- f is in units of 1/r us (the same key asked with another Rate): read in
  -- this rate's units it could stand for hours. Round it up into them: TAT
  -- later by less than 1/rate us. State from before r was kept: to the next
  -- whole microsecond.
  if r0 == nil then
    f = rate
  else
    f = ceil_mul_div(f, rate, 0, r0)
  end
  if f == rate then
    t, f = t + 1, 0
  end
  changed = true
else
  changed = r0 ~= rate
end
if t < now then
  t, f = now, 0 -- idle: t < now means TAT < now, as f/rate < 1
end

local function reset_us()
  local reset = t - now -- ceil(TAT - now); t >= now here
  if f > 0 then
    reset = reset + 1
  end
  return reset
end

local function remaining()
  -- In units of 1/rate us, burst*T - (TAT - now) is x*rate + tol_r - f and
  -- T is period.
  local x = tol_q - (t - now)
  if x < 0 then
    return 0
  end
  return math.max(mul_div(x, rate, tol_r - f, period), 0)
end

local function save()
  redis.call('HSET', key, 't', t, 'f', f, 'r', rate, 'p', period, 'b', burst)
  redis.call('PEXPIRE', key, ttl_ms(reset_us()))
end

if refund then
  -- Whole tokens short of full, ceil((TAT - now) / T), up to the cost.
  local given = 0
  if not fresh and (t > now or f > 0) then
    given = math.min(cost, ceil_mul_div(t - now, rate, f, period))
    local nt, nf = t - inc_q, f - inc_r
    if nf < 0 then
      nt, nf = nt - 1, nf + rate
    end
    if nt < now then
      nt, nf = now, 0
    end
    t, f = nt, nf
    save()
  end
  return {given, remaining(), 0, reset_us()}
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

if not peek and (allowed or (changed and not fresh)) then
  save()
end
return {allowed and 1 or 0, remaining(), retry, reset_us()}
