-- sliding_window.lua: one decision of a sliding-window counter, or a refund.
--
-- Windows of period_us are aligned to the Unix epoch as in fixed_window.lua,
-- and the script keeps the cost admitted in the current window (cur) and in
-- the one before it (prev). At elapsed microseconds into the current window
-- the previous window still overlaps the sliding window by
-- left = period_us - elapsed, and the estimate of the cost admitted over
-- the last period is
--
--   prev * left / period_us + cur
--
-- A request of cost c is admitted when estimate + c <= quota, that is when
-- cur + ceil(prev*left / period_us) + c <= quota, as every other term is
-- whole. remaining = quota - cur - ceil(prev*left / period_us), at least 0.
-- Products such as prev*left, past 2^53 for large limits, go through
-- mul_div: every decision and time is exact. A refund takes c off cur,
-- and what cur lacks off prev, never below 0.
--
-- KEYS[1]  hash {w, c, p, d}: w the start of the current window in
--          microseconds since the Unix epoch; c the cost admitted in it; p
--          the cost admitted in the window before it; d the period_us that
--          wrote them (absent: this call's)
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  period_us: the window length in microseconds, integer >= 1
-- ARGV[3]  quota: cost admitted per sliding period, integer >= 1
-- ARGV[4]  cost: integer in [1, quota]; for a charge in [1, 2^50)
-- ARGV[5]  mode: 0 = spend if admitted, 1 = peek (decide, write nothing),
--          2 = refund the cost, 3 = charge the cost whatever the count
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}; for a
-- refund {given, remaining, 0, reset_after_us}, given being what was taken
-- off the counts; for a charge {1, remaining, the wait for one unit,
-- reset_after_us}, or {-1, 0, 0, 0} when the current count would reach
-- 2^50: refused, nothing written. A charge counts past the quota, and
-- what it counts weighs on the next window as every count does.
--
-- retry_after is the exact time until the estimate has fallen enough,
-- assuming nothing else is admitted; reset_after is the time until the
-- estimate is 0.
--
-- A quota change counts on: the estimate is compared with the new quota. A
-- period change takes the estimate under the old period at now,
-- ceil(prev*left0/d) + cur, as the count of the current window of the new
-- period, with nothing before it: what the old limit counted over its last
-- period weighs in full until the new window ends, then decays over the
-- next. The first call under the new period writes the converted state
-- even when it is denied. Requests the old estimate no longer counted are
-- forgotten, so a longer period may admit up to its quota on top of them.
--
-- TTL: the end of the next window (cur is still weighed until then), set
-- on every write; a denial only lengthens it, when its period is longer
-- than the last write's (keep_for); a peek writes nothing.

local mul_div, ceil_mul_div = wide()
local key = KEYS[1]
local now = now_us()
local period = int_arg(2)
local quota = int_arg(3)
local cost = int_arg(4)
local mode = ARGV[5]
local peek, refund, charge = mode == '1', mode == '2', mode == '3'

-- counts returns the window start, cur and prev at now of state w, c, p
-- under windows of length d, and whether the state counts a window (not
-- two or more ago).
local function counts(w, c, p, d)
  local start = now - math.fmod(now, d)
  if w == start then
    return start, c, p
  elseif w == start - d then
    return start, 0, c -- the window rolled over once
  elseif w > start then
    return w, c, p -- the clock stepped back: keep the later window
  end
  return start, 0, 0 -- two or more windows ago
end

local st = redis.call('HMGET', key, 'w', 'c', 'p', 'd')
local w, c, p, d0 = tonumber(st[1]), tonumber(st[2]), tonumber(st[3]), tonumber(st[4])
local start, cur, prev = now - math.fmod(now, period), 0, 0
local changed = false
if w ~= nil and c ~= nil and p ~= nil then
  if d0 ~= nil and d0 ~= period then
    changed = true
    local s0, c0, p0 = counts(w, c, p, d0)
    local left0 = math.max(d0 - math.max(now - s0, 0), 0)
    cur = c0 + ceil_mul_div(p0, left0, 0, d0)
    if s0 > now then
      start = s0 - math.fmod(s0, period) -- the clock stepped back
    end
  else
    start, cur, prev = counts(w, c, p, period)
  end
end

local elapsed = now - start
if elapsed < 0 then
  elapsed = 0
end
local left = period - elapsed

local function save()
  redis.call('HSET', key, 'w', start, 'c', cur, 'p', prev, 'd', period)
  redis.call('PEXPIRE', key, ttl_ms(start + 2 * period - now))
end

local function weighed()
  return ceil_mul_div(prev, left, 0, period) -- of prev, still counted
end

local function reset_us()
  if cur > 0 then
    return start + 2 * period - now
  elseif prev > 0 then
    return start + period - now
  end
  return 0
end

if refund then
  local from_cur = math.min(cost, cur)
  local from_prev = math.min(cost - from_cur, prev)
  if from_cur + from_prev > 0 then
    cur, prev = cur - from_cur, prev - from_prev
    save()
  end
  return {from_cur + from_prev, math.max(quota - cur - weighed(), 0), 0, reset_us()}
end

if charge then
  if cur + cost >= 1125899906842624 then -- 2^50
    return {-1, 0, 0, 0}
  end
  -- Counted whatever the estimate: the rest answers as a peek of cost 1,
  -- whose retry is the wait for one unit.
  cur = cur + cost
  save()
  cost, peek = 1, true
end

local allowed = cur + weighed() + cost <= quota
if allowed and not peek then
  cur = cur + cost
  save()
elseif not peek then
  if changed then
    save()
  else
    keep_for(key, ttl_ms(start + 2 * period - now))
  end
end

local remaining = quota - cur - weighed()
if remaining < 0 then
  remaining = 0
end

local retry = 0
if not allowed then
  if cur + cost > quota then
    -- Not before the next window, where cur becomes the previous count and
    -- must decay until cur*(period - x) + cost*period <= quota*period.
    retry = (start + period - now) + ceil_mul_div(cur + cost - quota, period, 0, cur)
  else
    -- Within this window, once prev*(start + period - now - x) <=
    -- (quota - cur - cost)*period, that is once x is start + period - now
    -- less floor((quota - cur - cost)*period / prev): left, plus the wait
    -- for start when the clock stepped back to before it (elapsed 0).
    retry = (start + period - now) - mul_div(quota - cur - cost, period, 0, prev)
  end
end

if charge then
  return {1, remaining, retry, reset_us()}
end
return {allowed and 1 or 0, remaining, retry, reset_us()}
