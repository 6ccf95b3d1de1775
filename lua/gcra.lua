-- gcra.lua: one decision of the generic cell rate algorithm, or a refund.
--
-- The state is the theoretical arrival time (TAT). With emission interval
-- T = period_us / rate, a request of cost c is admitted when
-- max(TAT, now) + c*T - now <= burst*T, and then moves TAT there. A missing
-- key, or a TAT in the past, is an idle limiter: TAT = now. A refund moves
-- TAT back by c*T, never before now.
--
-- T is rarely a whole number of microseconds, so TAT is kept exactly as
-- t + f/rate microseconds, t an integer and 0 <= f < rate, and c*T and
-- burst*T are split the same way. Every comparison is then between
-- integers: no rounding, whatever the limit.
--
-- KEYS[1]  string "t f rate period_us burst": TAT = t + f/rate microseconds
--          since the Unix epoch (0 <= f < rate), then the limit that wrote
--          it, as ARGV[2] spelled it
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  limit: "rate period_us burst", three decimal integers >= 1
--          separated by single spaces: requests per period, the period in
--          microseconds, the bucket's capacity
-- ARGV[3]  cost: integer in [1, burst]; for a charge in [1, 2^50)
-- ARGV[4]  mode: 0 = spend if admitted, 1 = peek (decide, write nothing),
--          2 = refund the cost, 3 = charge the cost whatever the bucket
--          holds
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}; for a
-- refund {given, remaining, 0, reset_after_us}, given being the whole
-- tokens the bucket was short of, up to cost; for a charge {1, remaining,
-- the wait for one token, reset_after_us}, or {-1, 0, 0, 0} when TAT would
-- end 2^50 microseconds or more ahead of now, or as many tokens: refused,
-- nothing written.
--
-- Debt: a charge moves TAT to max(TAT, now) + c*T with no bound but the
-- representation's; a TAT more than burst*T ahead is a bucket in debt,
-- which admits nothing until refill has repaid it. The TTL, until TAT,
-- covers it. A limit change converts it as any TAT ahead of an empty
-- bucket (below): the bucket is empty again at the same instant, or at
-- most 2^50 - 1 microseconds or tokens of the new limit later.
--
-- remaining = floor((burst*T - (TAT - now)) / T), exact.
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
-- is full under the new one, as an absent key is.
--
-- TTL: until TAT rounded up to a whole even second (the end of the
-- two-second block TAT falls in, counting from the Unix epoch) by the
-- script's clock. A write sets the TTL (PX) only when that end is later
-- than the one of the TAT it replaces, which the key's TTL already
-- reaches, and keeps it (KEEPTTL) otherwise, which costs Redis less: a
-- key's TTL is set once per block its TAT moves into, so a key used every
-- half second sets it on one write in four, and an idle key outlives its
-- state by a second on average. A denial under the limit that wrote the
-- state, and a peek, write nothing.
--
-- Cost. Redis runs three commands a decision (TIME, GET, SET). The script
-- makes three small functions a run (now_us, wide, md); wide()'s exact
-- products are made only for a product of 2^52 or more. The limit travels
-- and is stored as text, so an unchanged limit is one comparison of
-- strings (Lua interns them); the usual path converts the limit's three
-- numbers, the cost and the state's two from text, and the state's two
-- back.

local key = KEYS[1]
local now = now_us()
local lim = ARGV[2]
local rs, ps, bs = string.match(lim, '^(%d+) (%d+) (%d+)$')
if rs == nil then
  error('ARGV[2] is not a limit: ' .. tostring(lim))
end
local rate, period, burst = rs + 0, ps + 0, bs + 0
local cost = ARGV[3] + 0
local mode = ARGV[4]
local peek, refund, charge = mode == '1', mode == '2', mode == '3'

local mul_div -- wide()'s, made by md when a product needs it

-- md returns q, r with a*b + c = q*d + r and 0 <= r < d, as mul_div does
-- and under its conditions. A product below 2^52 is exact, and so are its
-- sum with c and the sum's floor division by d: % floors the rounded
-- quotient, which for a dividend below 2^53 never rounds across an
-- integer. So mul_div is made only for a larger product. The usual path
-- divides its products below 2^52 in line, as md does, which saves it a
-- call each.
local function md(a, b, c, d)
  local p = a * b
  if p < two52 then
    local s = p + c
    local r = s % d
    return (s - r) / d, r
  end
  if mul_div == nil then
    mul_div = wide()
  end
  return mul_div(a, b, c, d)
end

-- c*T = inc_q + inc_r/rate and burst*T = tol_q + tol_r/rate microseconds.
local inc_q, inc_r, tol_q, tol_r
local p = cost * period
if p < two52 then
  inc_r = p % rate
  inc_q = (p - inc_r) / rate
else
  inc_q, inc_r = md(cost, period, 0, rate)
end
p = burst * period
if p < two52 then
  tol_r = p % rate
  tol_q = (p - tol_r) / rate
else
  tol_q, tol_r = md(burst, period, 0, rate)
end

local t, f, lim0
local st = redis.call('GET', key)
if st then
  local ts, fs
  ts, fs, lim0 = string.match(st, '^(%d+) (%d+) (.+)$')
  if ts then
    t, f = ts + 0, fs + 0
  end
end
local r0, p0, b0
if t ~= nil and lim0 ~= lim then
  local r, p, b = string.match(lim0, '^(%d+) (%d+) (%d+)$')
  if r then
    r0, p0, b0 = r + 0, p + 0, b + 0
  else
    t = nil
  end
end
local fresh = t == nil
local held = t -- the t the key holds, whose e (below) its TTL reaches
local changed = false
if fresh then
  t, f = now, 0
elseif r0 ~= nil then
  changed = r0 ~= rate or p0 ~= period or b0 ~= burst
  if changed and (t > now or (t == now and f > 0)) then
    -- burst0*T0 in whole microseconds and 1/r0 remainders.
    local tol_q0, tol_r0 = md(b0, p0, 0, r0)
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
      local sq, sr = md(d, r0, f, p0)
      local k = sq + burst - b0
      if k < 0 or (k == 0 and sr == 0) then
        t, f = now, 0 -- holds the new burst or more: full
      else
        -- (k*period + ceil(sr*period/p0)) / rate microseconds short of full.
        local cq, cr = md(sr, period, 0, p0)
        if cr > 0 then
          cq = cq + 1
        end
        local dq, dr = md(k, period, cq, rate)
        t, f = now + dq, dr
      end
    end
  end
end
if t < now then
  t, f = now, 0 -- idle: t < now means TAT < now, as f/rate < 1
end

-- most_ahead returns the most microseconds TAT may be ahead of now: 2^50 - 1,
-- and no more than 2^50 - 1 tokens take.
local function most_ahead()
  if rate > period then
    return (md(1125899906842623, period, 0, rate))
  end
  return 1125899906842623
end
if changed and t - now >= most_ahead() then
  -- A debt converted to a faster limit: cut to what the arithmetic holds.
  t, f = now + most_ahead() - 1, 0
end

-- The reply's first and third numbers, and whether to write.
local first, third, write
if charge then
  local most = most_ahead()
  local nt, nf = t + inc_q, f + inc_r
  if nf >= rate then
    nt, nf = nt + 1, nf - rate
  end
  if nt - now >= most then
    return {-1, 0, 0, 0}
  end
  t, f, write = nt, nf, true
  first, third = 1, 0
  -- The wait for one token: ceil(TAT + T - burst*T - now), when positive.
  local q1, r1 = md(1, period, 0, rate)
  local d, f1 = t + q1 - now, f + r1
  if f1 >= rate then
    d, f1 = d + 1, f1 - rate
  end
  if d > tol_q or (d == tol_q and f1 > tol_r) then
    third = d - tol_q
    if f1 > tol_r then
      third = third + 1
    end
  end
elseif refund then
  -- Whole tokens short of full, ceil((TAT - now) / T), up to the cost.
  first, third, write = 0, 0, false
  if not fresh and (t > now or f > 0) then
    local q, r = md(t - now, rate, f, period)
    if r > 0 then
      q = q + 1
    end
    first = math.min(cost, q)
    local nt, nf = t - inc_q, f - inc_r
    if nf < 0 then
      nt, nf = nt - 1, nf + rate
    end
    if nt < now then
      nt, nf = now, 0
    end
    t, f, write = nt, nf, true
  end
else
  -- The TAT this request would leave behind.
  local nt, nf = t + inc_q, f + inc_r
  if nf >= rate then
    nt, nf = nt + 1, nf - rate
  end
  local d = nt - now
  local allowed = d < tol_q or (d == tol_q and nf <= tol_r)
  first, third = 0, 0
  if allowed then
    first = 1
    if not peek then
      t, f = nt, nf
    end
  else
    -- ceil(new TAT - burst*T - now)
    third = d - tol_q
    if nf > tol_r then
      third = third + 1
    end
  end
  write = not peek and (allowed or (changed and not fresh))
end

if write then
  -- The key lives until e, the end of t's two-second block: TAT =
  -- t + f/rate < t + 1 <= e. Its TTL reaches the e of held already.
  local e = t - t % 2000000 + 2000000
  local v = string.format('%d %d ', t, f) .. lim
  if not fresh and e <= held - held % 2000000 + 2000000 then
    redis.call('SET', key, v, 'KEEPTTL')
  else
    local left = e - now -- > 0: in ms rounded down plus one, the key outlives e
    redis.call('SET', key, v, 'PX', string.format('%d', (left - left % 1000) / 1000 + 1))
  end
end

local reset = t - now -- ceil(TAT - now); t >= now here
if f > 0 then
  reset = reset + 1
end
-- In units of 1/rate us, burst*T - (TAT - now) is x*rate + tol_r - f and
-- T is period.
local remaining = 0
local x = tol_q - (t - now)
if x >= 0 then
  p = x * rate
  if p < two52 then
    p = p + tol_r - f
    remaining = (p - p % period) / period
  else
    remaining = md(x, rate, tol_r - f, period)
  end
  if remaining < 0 then
    remaining = 0
  end
end
return {first, remaining, third, reset}
