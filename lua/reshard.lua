-- reshard.lua: one step of moving a hybrid key from one layout of parts to
-- another (package sync, automatic sharding) on one part's global bucket.
-- A reshard opens the new parts empty, closes the old ones, which hands
-- back what they held, credits that to the new parts, and points the
-- markers of the key's default layout to the new one; sync.lua answers a
-- message to a closed part with the layout its marker names.
--
-- The bucket is the hash of bucket.lua: its field t holds the GCRA
-- theoretical arrival time in microseconds (see sync.lua), is absent when
-- full, or holds a marker "m<shards>.<generation>".
--
-- KEYS[1]  the part's global bucket.
-- ARGV[1]  now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]  op:
--            "open"   make the bucket empty, refilling from now, unless
--                     it holds a marker or is not full;
--            "close"  replace the bucket with the marker, unless it is one;
--            "credit" add ARGV[7] tokens to an open bucket that is not
--                     full, up to full;
--            "mark"   set the marker if the bucket is a marker already
--                     or full (the default layout of a moved key); a
--                     marker of a later generation stays, renewed;
--            "check"  change nothing; done is 1 if the bucket is open
--                     (not a marker), so still part of the key's layout.
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
local got = redis.call('HMGET', key, 't', 'x')
local raw, x = got[1], got[2]
local closed = raw and string.sub(raw, 1, 1) == 'm'
-- A time not ahead of now is a full bucket, as an absent one is.
local exists = closed or (raw and tonumber(raw) > now)
local now_ms = floor_div(now, 1000)

-- set writes field t and makes the key live until at least until_ms.
local function set(t, until_ms)
  local at = extend(x, until_ms, 0)
  if at then
    redis.call('HSET', key, 't', t, 'x', string.format('%d', at))
    redis.call('PEXPIRE', key, at - now_ms) -- relative: now may be the caller's clock
  else
    redis.call('HSET', key, 't', t)
  end
end

if op == 'check' then
  return {closed and 0 or 1, 0, now}
elseif op == 'open' then
  if exists then return {0, 0, now} end
  set(num_text(now + tolerance), now_ms + ttl_ms(tolerance))
  return {1, 0, now}
elseif op == 'close' then
  if closed then return {0, 0, now} end
  local tat = math.max(tonumber(raw) or now, now)
  local held = math.max(0, math.floor((tolerance - (tat - now)) / interval + 1e-6))
  set(marker, now_ms + n)
  return {1, held, now}
elseif op == 'credit' then
  if closed or not exists then return {0, 0, now} end
  local tat = math.max(now, later(tonumber(raw), -n * interval))
  local t = tat_text(tat, raw)
  if t then set(t, now_ms + ttl_ms(tat - now)) end
  return {1, 0, now}
elseif op == 'mark' then
  if exists and not closed then return {0, 0, now} end
  -- Renewal: the marker's life starts again now, whatever is left of it.
  -- A marker is never moved back to an earlier generation: an instance
  -- that has not heard of the latest move renews the one it knows of.
  local gen = function(m) return tonumber(string.match(m, '^m%d+%.(%d+)$')) or -1 end
  if closed and gen(raw) > gen(marker) then
    marker = raw
  end
  redis.call('HSET', key, 't', marker, 'x', string.format('%d', now_ms + n))
  redis.call('PEXPIRE', key, n)
  return {1, 0, now}
end
return redis.error_reply('reshard: unknown op ' .. tostring(op))
