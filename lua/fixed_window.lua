-- fixed_window.lua: one decision of a fixed-window counter, or a refund.
--
-- Time is cut into windows of period_us aligned to the Unix epoch (a window
-- starts when now mod period_us == 0). A request of cost c is admitted when
-- the cost already admitted in the current window plus c is at most quota;
-- the count restarts at 0 in each window. These are the semantics of
-- INCRBY + PEXPIRE on a key per window, kept in one key whose hash records
-- which window it counts, so the script declares every key it touches. A
-- refund takes c off the current window's count, never below 0; a count of
-- a past window is gone already.
--
-- KEYS[1]  hash {w, n, p}: w the start of the window counted, in
--          microseconds since the Unix epoch; n the cost admitted in it; p
--          the period_us that wrote them (absent: this call's)
-- ARGV[1]  now: microseconds since the Unix epoch; 0 = use Redis TIME
-- ARGV[2]  period_us: the window length in microseconds, integer >= 1
-- ARGV[3]  quota: cost a window admits, integer >= 1
-- ARGV[4]  cost: integer in [1, quota]; for a charge in [1, 2^50)
-- ARGV[5]  mode: 0 = spend if admitted, 1 = peek (decide, write nothing),
--          2 = refund the cost, 3 = charge the cost whatever the count
--
-- Reply: {allowed 0|1, remaining, retry_after_us, reset_after_us}; for a
-- refund {given, remaining, 0, reset_after_us}, given being what was taken
-- off the count; for a charge {1, remaining, the wait for one unit,
-- reset_after_us}, or {-1, 0, 0, 0} when the count would reach 2^50:
-- refused, nothing written.
--
-- A charge counts past the quota: the window admits nothing more, and the
-- next window starts from 0, as every window does.
--
-- retry_after is the time to the next window; reset_after is the time to
-- the end of the window, or 0 when nothing was admitted in it.
--
-- A quota change counts on: the window's count is compared with the new
-- quota, so a raised quota admits at once and a lowered one clamps. A
-- period change keeps the count while the old window [w, w + p) has not
-- ended before the current window of the new period starts, and counts it
-- in that window (the requests it counts may all lie in it), else drops
-- it. The first call under the new period writes the converted state even
-- when it is denied. Requests admitted in earlier windows of the old
-- period are not counted: in the window of the change a longer period may
-- admit up to its quota on top of what those admitted.
--
-- TTL: the end of the window, set on every write; a denial only lengthens
-- it, when its window ends later than the last write's (keep_for); a peek
-- writes nothing.

local key = KEYS[1]
local now = now_us()
local period = int_arg(2)
local quota = int_arg(3)
local cost = int_arg(4)
local mode = ARGV[5]
local peek, refund, charge = mode == '1', mode == '2', mode == '3'

local start = now - math.fmod(now, period)
local st = redis.call('HMGET', key, 'w', 'n', 'p')
local w, n, p0 = tonumber(st[1]), tonumber(st[2]), tonumber(st[3])
local fresh = w == nil or n == nil
local changed = false
if fresh then
  n = 0
elseif p0 ~= nil and p0 ~= period then
  changed = true
  if w + p0 <= start then
    n = 0 -- the old window ended before this one started
  elseif w >= start + period then
    start = w - math.fmod(w, period) -- later (the clock stepped back): its window
  end
elseif w < start then
  n = 0 -- it counts a past window
elseif w > start then
  start = w -- the clock stepped back: keep counting the later window
end

local left = start + period - now

local function save()
  redis.call('HSET', key, 'w', start, 'n', n, 'p', period)
  redis.call('PEXPIRE', key, ttl_ms(left))
end

local function remaining()
  return math.max(quota - n, 0) -- below 0 when the quota was lowered
end

if charge then
  if n + cost >= 1125899906842624 then -- 2^50
    return {-1, 0, 0, 0}
  end
  n = n + cost
  save()
  local retry = 0
  if n + 1 > quota then
    retry = left
  end
  return {1, remaining(), retry, left}
end

if refund then
  local given = math.min(cost, n)
  if given > 0 then
    n = n - given
    save()
  end
  local reset = 0
  if n > 0 then
    reset = left
  end
  return {given, remaining(), 0, reset}
end

local allowed = n + cost <= quota
if allowed and not peek then
  n = n + cost
  save()
elseif not peek then
  if changed then
    save()
  else
    keep_for(key, ttl_ms(left))
  end
end

local retry, reset = 0, 0
if not allowed then
  retry = left
end
if n > 0 then
  reset = left
end
return {allowed and 1 or 0, remaining(), retry, reset}
