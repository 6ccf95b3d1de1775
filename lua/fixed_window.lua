-- fixed_window.lua: one decision of a fixed-window counter.
--
-- Time is cut into windows of period_us aligned to the Unix epoch (a window
-- starts when now mod period_us == 0). A request of cost c is admitted when
-- the cost already admitted in the current window plus c is at most quota;
-- the count restarts at 0 in each window. These are the semantics of
-- INCRBY + PEXPIRE on a key per window, kept in one key whose hash records
-- which window it counts, so the script declares every key it touches.
--
-- KEYS[1]  hash {w, n}: w the start of the window counted, in microseconds
--          since the Unix epoch; n the cost admitted in it
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  period_us: the window length in microseconds, integer >= 1
-- ARGV[3]  quota: cost a window admits, integer >= 1
-- ARGV[4]  cost: integer in [1, quota]
-- ARGV[5]  peek: 1 = decide but write nothing, 0 = spend if admitted
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}
--
-- retry_after is the time to the next window; reset_after is the time to
-- the end of the window, or 0 when nothing was admitted in it. TTL: the end
-- of the window, set on every write; a denial only lengthens it, when its
-- window ends later than the last write's (keep_for); a peek writes
-- nothing.

local key = KEYS[1]
local now = now_us()
local period = int_arg(2)
local quota = int_arg(3)
local cost = int_arg(4)
local peek = ARGV[5] == '1'

local start = now - math.fmod(now, period)
local st = redis.call('HMGET', key, 'w', 'n')
local w, n = tonumber(st[1]), tonumber(st[2])
if w == nil or n == nil or w < start then
  n = 0 -- no state, or it counts a past window
elseif w > start then
  start = w -- the clock stepped back: keep counting the later window
end

local left = start + period - now
local allowed = n + cost <= quota
if allowed and not peek then
  n = n + cost
  redis.call('HSET', key, 'w', start, 'n', n)
  redis.call('PEXPIRE', key, ttl_ms(left))
elseif not peek then
  keep_for(key, ttl_ms(left))
end

local remaining = quota - n
if remaining < 0 then
  remaining = 0 -- the quota was lowered
end
local retry, reset = 0, 0
if not allowed then
  retry = left
end
if n > 0 then
  reset = left
end
return {allowed and 1 or 0, remaining, retry, reset}
