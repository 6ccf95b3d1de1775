-- sliding_window.lua: one decision of a sliding-window counter.
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
-- mul_div: every decision and time is exact.
--
-- KEYS[1]  hash {w, c, p}: w the start of the current window in
--          microseconds since the Unix epoch; c the cost admitted in it; p
--          the cost admitted in the window before it
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  period_us: the window length in microseconds, integer >= 1
-- ARGV[3]  quota: cost admitted per sliding period, integer >= 1
-- ARGV[4]  cost: integer in [1, quota]
-- ARGV[5]  peek: 1 = decide but write nothing, 0 = spend if admitted
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}
--
-- retry_after is the exact time until the estimate has fallen enough,
-- assuming nothing else is admitted; reset_after is the time until the
-- estimate is 0. TTL: the end of the next window (cur is still weighed
-- until then), set on every write; a denial only lengthens it, when its
-- period is longer than the last write's (keep_for); a peek writes
-- nothing.

local key = KEYS[1]
local now = now_us()
local period = int_arg(2)
local quota = int_arg(3)
local cost = int_arg(4)
local peek = ARGV[5] == '1'

local start = now - math.fmod(now, period)
local st = redis.call('HMGET', key, 'w', 'c', 'p')
local w, c, p = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
local cur, prev = 0, 0
if w ~= nil and c ~= nil and p ~= nil then
  if w == start then
    cur, prev = c, p
  elseif w == start - period then
    cur, prev = 0, c -- the window rolled over once
  elseif w > start then
    start, cur, prev = w, c, p -- the clock stepped back: keep the later window
  end -- else: two or more windows ago, both counts are 0
end

local elapsed = now - start
if elapsed < 0 then
  elapsed = 0
end
local left = period - elapsed
local weighed = ceil_mul_div(prev, left, 0, period) -- of prev, still counted
local allowed = cur + weighed + cost <= quota
if allowed and not peek then
  cur = cur + cost
  redis.call('HSET', key, 'w', start, 'c', cur, 'p', prev)
  redis.call('PEXPIRE', key, ttl_ms(start + 2 * period - now))
elseif not peek then
  keep_for(key, ttl_ms(start + 2 * period - now))
end

local remaining = quota - cur - weighed
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

local reset = 0
if cur > 0 then
  reset = start + 2 * period - now
elseif prev > 0 then
  reset = start + period - now
end
return {allowed and 1 or 0, remaining, retry, reset}
