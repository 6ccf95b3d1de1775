-- preamble.lua: helpers shared by every script in this package. The Go side
-- prepends this file to each script body before hashing it, so it is
-- written once and the SHA1 covers exactly what Redis runs.
--
-- Numbers. Redis Lua numbers are IEEE doubles, exact for integers below
-- 2^53. Every quantity the scripts keep is such an integer: times and
-- durations in microseconds, token counts, token fractions scaled to an
-- integer numerator. Divisions go through floor_div and ceil_div, which
-- subtract math.fmod (exact) before dividing, instead of flooring a
-- rounded quotient. Numbers handed to redis.call are written by Redis with
-- 17 significant digits, so integers below 2^53 round-trip exactly (Lua's
-- own tostring keeps only 14: never use it on a stored number).

-- int_arg returns ARGV[i] as a number, or raises a script error.
local function int_arg(i)
  local v = tonumber(ARGV[i])
  if v == nil then
    error('ARGV[' .. i .. '] is not a number: ' .. tostring(ARGV[i]))
  end
  return v
end

-- now_us returns the time in microseconds since the Unix epoch: ARGV[1]
-- when it is a positive number (a caller-supplied clock, such as the
-- simulator's), else Redis TIME. Since Redis 7 a script's TIME is frozen for
-- its whole run and scripts replicate by effects, so TIME is safe here.
local function now_us()
  local t = tonumber(ARGV[1])
  if t ~= nil and t > 0 then
    return t
  end
  local tm = redis.call('TIME')
  return tonumber(tm[1]) * 1000000 + tonumber(tm[2])
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

-- store_tat writes a GCRA theoretical arrival time of tat microseconds to
-- key with the TTL of its state (until the bucket is full), or deletes the
-- key when tat is not ahead of now: an absent bucket is a full one.
-- 17 significant digits keep the float exact on reading. old, if given,
-- is what the key holds (false: nothing); then a write that would change
-- nothing is skipped (an empty bucket that granted nothing, a full one
-- that took nothing back): the same tat has the same expiry.
local function store_tat(key, tat, now, old)
  if tat > now then
    local v = string.format('%.17g', tat)
    if v ~= old then
      redis.call('SET', key, v, 'PX', ttl_ms(tat - now))
    end
  elseif old ~= false then
    redis.call('DEL', key)
  end
end

-- Script body follows.
