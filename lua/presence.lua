-- presence: records that an instance is alive, counts the live ones, and
-- tells it which keys were reset since it last asked.
--
-- KEYS[1]  sorted set of instance ids, each scored by the time its record
--          lapses, in microseconds.
-- KEYS[2]  optional: the reset log (reset_log.lua), on KEYS[1]'s node.
-- ARGV[1]  now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]  this instance's id.
-- ARGV[3]  record lifetime in microseconds (a few sync intervals).
-- ARGV[4]  1 to record this instance, 0 to remove it (on Close).
-- ARGV[5]  with KEYS[2]: the script's time at this instance's last read of
--          the log (the now of its last reply), or 0 for its first read,
--          which takes every reset the log holds.
-- ARGV[6]  with KEYS[2]: how long the log keeps a reset, in milliseconds.
-- Reply:   {live, now, whole, key...}: the number of live instances, this
--          one included when recorded; the script's time in microseconds;
--          1 when the keys that follow are every key reset at or after
--          ARGV[5] (on a first read, every reset the log keeps), 0 when the
--          log cannot tell (a read older than the log keeps, resets dropped
--          past its cap, or more of them than a reply carries): then any key
--          may have been reset.
local now = now_us()
local life = int_arg(3)
-- The record is written first: out of memory under noeviction, Redis
-- refuses a script at its first write that may grow memory (ZADD) but lets
-- it through once an earlier write (ZREMRANGEBYSCORE) has run, and the
-- hybrid limiter uses this script as the probe that tells its breaker Redis
-- works again. It must fail whenever the sync script would.
if ARGV[4] == '1' then
  redis.call('ZADD', KEYS[1], now + life, ARGV[2])
else
  redis.call('ZREM', KEYS[1], ARGV[2])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local n = redis.call('ZCARD', KEYS[1])
if n > 0 then
  local last = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  redis.call('PEXPIRE', KEYS[1], ttl_ms(tonumber(last[2]) - now))
end
local reply = {n, now, 1}
if #KEYS < 2 then
  return reply
end
-- At most this many keys a reply: past it, the reply says "any key".
local most = 256
local since, keep = int_arg(5), int_arg(6)
-- The member "" (no key is empty) is scored by the latest reset the log
-- dropped to stay within its cap.
local dropped = redis.call('ZSCORE', KEYS[2], '')
if since > 0 and since < now - keep * 1000 or (dropped and tonumber(dropped) >= since) then
  reply[3] = 0
  return reply
end
local got = redis.call('ZRANGEBYSCORE', KEYS[2], since, '+inf', 'LIMIT', 0, most + 2)
for _, key in ipairs(got) do
  if key ~= '' then
    reply[#reply + 1] = key
  end
end
if #reply - 3 > most then
  return {n, now, 0}
end
return reply
