-- preamble.lua: helpers shared by the limiter scripts: arguments, exact
-- division, TTLs. internal/scripts puts it, with the other shared files a
-- script needs (clock.lua, wide.lua, bucket.lua, packed.lua), before the
-- script's body before hashing it, so each helper is written once and the
-- SHA1 covers exactly what Redis runs. A script is built only from the
-- files it uses: every function a file defines is made again on each run,
-- called or not.
--
-- Numbers. Redis Lua numbers are IEEE doubles, exact for integers below
-- 2^53. Every quantity the scripts keep is such an integer: times and
-- durations in microseconds, token counts, token fractions scaled to an
-- integer numerator. Divisions go through floor_div and ceil_div, which
-- subtract math.fmod (exact) before dividing, instead of flooring a
-- rounded quotient. A product that can pass 2^53 (burst*period_us is up to
-- 2^85 for limits Limit.Validate accepts) goes through wide.lua's mul_div,
-- exact in two limbs. Numbers handed to redis.call are written by Redis
-- with 17 significant digits, so integers below 2^53 round-trip exactly
-- (Lua's own tostring keeps only 14: never use it on a stored number).

-- int_arg returns ARGV[i] as a number, or raises a script error.
local function int_arg(i)
  local v = tonumber(ARGV[i])
  if v == nil then
    error('ARGV[' .. i .. '] is not a number: ' .. tostring(ARGV[i]))
  end
  return v
end

-- floor_div returns floor(a / b) for integers a >= 0 and b > 0, exactly.
local function floor_div(a, b)
  return (a - math.fmod(a, b)) / b
end

-- ceil_div returns ceil(a / b) for integers a >= 0 and b > 0, exactly.
local function ceil_div(a, b)
  local r = math.fmod(a, b)
  if r == 0 then
    return a / b
  end
  return (a - r) / b + 1
end

-- ttl_ms turns the time a key's state matters, in microseconds, into a
-- PEXPIRE argument in milliseconds: rounded down plus one, so the key
-- outlives its state by less than a millisecond and never gets a TTL of 0.
local function ttl_ms(us)
  if us < 0 then
    us = 0
  end
  return floor_div(us, 1000) + 1
end

-- keep_for makes key live at least ms milliseconds more, never shortening
-- its TTL. A denial writes no state, but the state it read may matter
-- longer under its limit than under the limit of the write that set the
-- TTL (a slower refill, a longer window): expiring on the old schedule, it
-- would read as fresh and admit what the denial just refused.
local function keep_for(key, ms)
  local left = redis.call('PTTL', key)
  if left >= 0 and left < ms then
    redis.call('PEXPIRE', key, ms)
  end
end
