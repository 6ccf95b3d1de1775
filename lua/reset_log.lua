-- reset_log: records that a key of the hybrid limiter was reset
-- (sync_reset.lua), so that every instance hears of it at its next
-- presence call (presence.lua), even one that holds a denial of the key
-- and so has no message to send about it.
--
-- KEYS[1]  the reset log: a sorted set of the keys reset, each scored by
--          the time of its latest reset in microseconds, on the node of the
--          presence set; the member "" is scored by the latest reset it
--          dropped to stay within its cap.
-- ARGV[1]  now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]  the key reset, as the limiter's caller names it.
-- ARGV[3]  how long the log keeps a reset, in milliseconds.
-- Reply:   the number of resets the log holds.
local now = now_us()
local keep = int_arg(3)
-- At most this many resets are kept: a reader that finds one it needed
-- dropped treats every key as reset.
local cap = 4096
local log = KEYS[1]
if ARGV[2] == '' then
  return redis.error_reply('reset_log: the key is empty')
end
redis.call('ZADD', log, now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', log, '-inf', '(' .. string.format('%d', now - keep * 1000))
local dropped = redis.call('ZSCORE', log, '')
local n = redis.call('ZCARD', log)
if dropped then
  n = n - 1
end
if n > cap then
  -- The oldest resets go; "" remembers the latest of them.
  redis.call('ZREM', log, '')
  local cut = redis.call('ZRANGE', log, n - cap - 1, n - cap - 1, 'WITHSCORES')
  redis.call('ZREMRANGEBYRANK', log, 0, n - cap - 1)
  local latest = tonumber(cut[2])
  if dropped then
    latest = math.max(latest, tonumber(dropped))
  end
  redis.call('ZADD', log, latest, '')
  n = cap
end
redis.call('PEXPIRE', log, keep)
return n
