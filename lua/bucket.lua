-- bucket.lua: helpers of the hybrid limiter's bucket (sync.lua,
-- reshard.lua), put after preamble.lua. The bucket is one hash a key (or a
-- part of a split key), so that a message finds all it reads and writes in
-- one key, with one read and one write:
--   t       the GCRA theoretical arrival time in microseconds, %.17g (17
--           significant digits keep the float exact): a time not ahead of
--           now says since when the bucket has been full; or a marker
--           "m<shards>.<generation>" (reshard.lua); absent: full since
--           ever.
--   f, g    the full stretches whose refill no charge has used, at most
--           two, and the edge, the end of the last one recorded or used
--           (sync.lua): f "s g", or "e s g" when the edge e is not the
--           later stretch's end, or "e" alone; g "s g", the other stretch,
--           earlier or later, or empty. Their refill pays for tokens
--           reported late.
--   x       the key's expiry in milliseconds by the scripts' clock (now_us,
--           which may be the caller's), as last set, so that a message
--           extends it only when it falls short, not every time.
--   lb:<id> instance id's ledger, packed (sync.lua).

-- num_text returns x as a stored number's text: %.17g, whose 17
-- significant digits keep a float exact. A positive integer below 2^53
-- (most times and stretches: microseconds, whole at whole-microsecond
-- intervals) is written with %d, the same digits, which Redis's Lua
-- formats in about 0.12 us against 0.30 for %.17g.
local function num_text(x)
  if x > 0 and x < 9007199254740992 and x == math.floor(x) then
    return string.format('%d', x)
  end
  return string.format('%.17g', x)
end

-- tat_text returns the text to store in field t for a bucket at tat, or
-- nil when old (the field's text, or false for an absent bucket, as if 0)
-- already says the same: an empty bucket that granted nothing, a full one
-- that took nothing back. A tat not ahead of now says since when the
-- bucket has been full (sync.lua's owe reads it).
local function tat_text(tat, old)
  if tat <= 0 and not old then
    return nil
  end
  local v = num_text(tat)
  if v == old then
    return nil
  end
  return v
end

-- later returns tat + d (d < 0 moves it back) rounded up, never below
-- the exact sum: the bucket's time must move by at least what the tokens
-- granted or handed back are worth. A float of microseconds since the
-- epoch has a step of 1/4 us in this century; rounded to nearest, a grant
-- of less than half a step (a token, above 8M tokens a second) would add
-- nothing and be free, and a return could give back more than it took.
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
