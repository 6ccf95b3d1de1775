-- presence: records that an instance is alive and counts the live ones.
--
-- KEYS[1]  sorted set of instance ids, each scored by the time its record
--          lapses, in microseconds.
-- ARGV[1]  now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]  this instance's id.
-- ARGV[3]  record lifetime in microseconds (a few sync intervals).
-- ARGV[4]  1 to record this instance, 0 to remove it (on Close).
-- Reply:   the number of live instances, this one included when recorded.
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
return n
