-- hit_counter.lua: count hits in a fixed window, every hit, admitted or not.
--
-- This is the counting of Envoy's reference rate limit service, which its
-- users' numbers depend on: INCRBY on a key named after the window, and a
-- TTL when the key is made. The caller names the key (prefix, domain, the
-- descriptor's entries, the window's start in Unix seconds) and compares
-- the count with the limit itself; a key over the limit keeps counting.
-- Unlike INCRBY followed by EXPIRE in a pipeline, the count and its TTL are
-- written in one step, so no key is ever left without a TTL. The script
-- stands alone: it needs none of the shared files.
--
-- KEYS[1]  string: the window's count, an integer
-- ARGV[1]  hits: integer in [0, 2^53); 0 reads the count and writes nothing
-- ARGV[2]  ttl: seconds, integer >= 1, given to the key when the increment
--          creates it (the window's length, plus any jitter)
--
-- Reply: {count}: the count after the increment (before it, for 0 hits;
-- 0 for a key that does not exist).

local hits = tonumber(ARGV[1])
local ttl = tonumber(ARGV[2])
if hits == nil or hits < 0 or hits >= 2^53 or ttl == nil or ttl < 1 then
  return redis.error_reply('ERR hit_counter: bad arguments ' .. tostring(ARGV[1]) .. ' ' .. tostring(ARGV[2]))
end
if hits == 0 then
  return {tonumber(redis.call('GET', KEYS[1]) or '0')}
end
local n = redis.call('INCRBY', KEYS[1], ARGV[1])
if n == hits then
  -- This increment made the key. A larger count means an earlier write
  -- made it and gave it its TTL: ours here, the reference's by the EXPIRE
  -- it pipelines after each INCRBY.
  redis.call('EXPIRE', KEYS[1], ttl)
end
return {n}
