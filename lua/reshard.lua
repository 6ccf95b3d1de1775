-- reshard.lua: one step of moving a hybrid key from one layout of parts to
-- another (package sync, automatic sharding) on one part's global bucket.
-- A reshard opens the new parts empty, closes the old ones, which hands
-- back what they held, credits that to the new parts, and points the
-- markers of the key's default layout to the new one; sync.lua answers a
-- message to a closed part with the layout its marker names.
--
-- The bucket is a GCRA theoretical arrival time in microseconds (see
-- sync.lua), absent when full, or a marker "m<shards>.<generation>".
--
-- KEYS[1]  the part's global bucket.
-- ARGV[1]  now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]  op:
--            "open"   create the bucket empty, refilling from now, unless
--                     the key exists;
--            "close"  replace the bucket with the marker, unless it is one;
--            "credit" add ARGV[7] tokens to an open bucket, up to full;
--            "mark"   set the marker if the bucket is a marker already
--                     or absent (the default layout of a moved key);
--            "lock"   set KEYS[1] to the marker (here an owner's name)
--                     unless it exists, for ARGV[7] milliseconds;
--            "unlock" delete KEYS[1] if it holds the marker.
-- ARGV[3]  rate, ARGV[4] period in microseconds, ARGV[5] burst: the
--          part's limit.
-- ARGV[6]  marker, such as "m4.2".
-- ARGV[7]  credit in tokens (credit), or the marker's TTL in milliseconds
--          (close, mark).
-- Reply: {done, tokens, now}: done 1 if the op changed the key, else 0;
--        tokens the whole tokens the bucket held when closed (close), else 0;
--        now the time used, in microseconds.
local now = now_us()
local op = ARGV[2]
local rate, period, burst = int_arg(3), int_arg(4), int_arg(5)
local marker = ARGV[6]
local n = int_arg(7)
local key = KEYS[1]
local interval = period / rate
local tolerance = burst * interval
if op == 'lock' then
  if redis.call('SET', key, marker, 'NX', 'PX', n) then return {1, 0, now} end
  return {0, 0, now}
elseif op == 'unlock' then
  if redis.call('GET', key) == marker then
    redis.call('DEL', key)
    return {1, 0, now}
  end
  return {0, 0, now}
end
local raw = redis.call('GET', key)
local closed = raw and string.sub(raw, 1, 1) == 'm'

if op == 'open' then
  if raw then return {0, 0, now} end
  store_tat(key, now + tolerance, now)
  return {1, 0, now}
elseif op == 'close' then
  if closed then return {0, 0, now} end
  local tat = math.max(tonumber(raw) or now, now)
  local held = math.max(0, math.floor((tolerance - (tat - now)) / interval + 1e-6))
  redis.call('SET', key, marker, 'PX', n)
  return {1, held, now}
elseif op == 'credit' then
  if closed or not raw then return {0, 0, now} end
  store_tat(key, math.max(now, tonumber(raw) - n * interval), now)
  return {1, 0, now}
elseif op == 'mark' then
  if raw and not closed then return {0, 0, now} end
  redis.call('SET', key, marker, 'PX', n)
  return {1, 0, now}
end
return redis.error_reply('reshard: unknown op ' .. tostring(op))
