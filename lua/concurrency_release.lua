-- concurrency_release.lua: give back one lease of a concurrency limiter.
--
-- KEYS[1]  sorted set: lease id -> expiry in microseconds since the Unix epoch
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  id: the lease's id
--
-- Reply: {released 0|1, held}: released is 1 when the lease was held and
-- unexpired; held is the number of unexpired leases left. The lease is
-- removed either way. Removing members never needs a longer TTL, so the
-- key keeps the one its last grant set (and disappears when empty).

local key = KEYS[1]
local now = now_us()
local id = ARGV[2]

local expiry = tonumber(redis.call('ZSCORE', key, id))
local released = 0
if expiry ~= nil then
  redis.call('ZREM', key, id)
  if expiry > now then
    released = 1
  end
end
local held = redis.call('ZCOUNT', key, '(' .. string.format('%d', now), '+inf')
return {released, held}
