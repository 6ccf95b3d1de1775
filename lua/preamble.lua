-- preamble.lua: helpers shared by every script in this package. The Go side
-- prepends this file to each script body before hashing it, so it is
-- written once and the SHA1 covers exactly what Redis runs.
--
-- Numbers. Redis Lua numbers are IEEE doubles, exact for integers below
-- 2^53. Every quantity the scripts keep is such an integer: times and
-- durations in microseconds, token counts, token fractions scaled to an
-- integer numerator. Divisions go through floor_div and ceil_div, which
-- subtract math.fmod (exact) before dividing, instead of flooring a
-- rounded quotient. A product that can pass 2^53 (burst*period_us is up to
-- 2^85 for limits Limit.Validate accepts) goes through mul_div, exact in
-- two limbs. Numbers handed to redis.call are written by Redis with 17
-- significant digits, so integers below 2^53 round-trip exactly (Lua's own
-- tostring keeps only 14: never use it on a stored number).

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

local two26 = 67108864 -- 2^26
local two52 = 4503599627370496 -- 2^52

-- wide_mul returns hi, lo with a*b = hi*2^52 + lo and 0 <= lo < 2^52, for
-- integers 0 <= a, b < 2^52, exactly: each is cut into 26-bit limbs, whose
-- products and their sums stay below 2^53.
local function wide_mul(a, b)
  local a0, b0 = math.fmod(a, two26), math.fmod(b, two26)
  local a1, b1 = (a - a0) / two26, (b - b0) / two26
  local mid = a1 * b0 + a0 * b1
  local m0 = math.fmod(mid, two26)
  local hi = a1 * b1 + (mid - m0) / two26
  local lo = m0 * two26 + a0 * b0
  if lo >= two52 then
    return hi + 1, lo - two52
  end
  return hi, lo
end

-- mul_div returns q, r with a*b + c = q*d + r and 0 <= r < d, exactly, for
-- integers 0 <= a, b < 2^52, |c| < 2^52, 1 <= d < 2^50, when |q| < 2^50.
-- A product below 2^52 is exact as it is. Above, the quotient of the
-- rounded product is within one of the true one (relative error 2^-52 of
-- a quotient below 2^50), and the remainder a*b + c - q*d, computed in
-- limbs, is exact and corrects it.
local function mul_div(a, b, c, d)
  local p = a * b
  if p < two52 then
    local s = p + c
    local r = math.fmod(s, d)
    if r < 0 then
      r = r + d
    end
    return (s - r) / d, r
  end
  local hi, lo = wide_mul(a, b)
  lo = lo + c
  local q = math.floor((hi * two52 + lo) / d)
  local qh, ql = wide_mul(q, d)
  local r = (hi - qh) * two52 + (lo - ql)
  while r < 0 do
    q, r = q - 1, r + d
  end
  while r >= d do
    q, r = q + 1, r - d
  end
  return q, r
end

-- ceil_mul_div returns ceil((a*b + c) / d), under mul_div's conditions.
local function ceil_mul_div(a, b, c, d)
  local q, r = mul_div(a, b, c, d)
  if r > 0 then
    return q + 1
  end
  return q
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

-- The hybrid limiter's bucket (sync.lua, reshard.lua) is one hash a key
-- (or a part of a split key), so that a message finds all it reads and
-- writes in one key, with one read and one write:
--   t       the GCRA theoretical arrival time in microseconds, %.17g (17
--           significant digits keep the float exact): a time not ahead of
--           now says since when the bucket has been full; or a marker
--           "m<shards>.<generation>" (reshard.lua); absent: full since
--           ever.
--   f       "fs fg": the last full stretch a charge ended, from fs to fg
--           (sync.lua), whose refill pays for tokens reported late.
--   x       the key's expiry in milliseconds by the scripts' clock (now_us,
--           which may be the caller's), as last set, so that a message
--           extends it only when it falls short, not every time.
--   l:<id>  instance id's ledger (sync.lua).

-- tat_text returns the text to store in field t for a bucket at tat, or
-- nil when old (the field's text, or false for an absent bucket, as if 0)
-- already says the same: an empty bucket that granted nothing, a full one
-- that took nothing back. A tat not ahead of now says since when the
-- bucket has been full (sync.lua's owe reads it).
local function tat_text(tat, old)
  if tat <= 0 and not old then
    return nil
  end
  local v = string.format('%.17g', tat)
  if v == old then
    return nil
  end
  return v
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

-- later returns tat + d (d < 0 moves it back) rounded up, never below
-- the exact sum: the bucket's time must move by at least what the tokens
-- granted or handed back are worth. A float of microseconds since the
-- epoch has a step of 1/4 us in this century; rounded to nearest, a grant
-- of less than half a step (a token, above 8M tokens a second) added
-- nothing and was free, and a return could give back more than it took.
-- t - tat is exact (the two are within a factor of two of each other).
local function later(tat, d)
  local t = tat + d
  if t - tat < d then
    local _, e = math.frexp(t)
    t = t + 2 ^ (e - 53)
  end
  return t
end

-- extend returns the expiry to give a bucket whose field x holds x (or
-- false) and whose state must live until need_ms, with slack_ms to spare
-- so that the next messages need not extend it again; nil when x already
-- reaches need_ms.
local function extend(x, need_ms, slack_ms)
  if x and tonumber(x) >= need_ms then
    return nil
  end
  return need_ms + slack_ms
end

-- Script body follows.
