-- wide.lua: exact products past 2^53, for the scripts whose products can
-- pass it (gcra.lua, token_bucket.lua, sliding_window.lua).
--
-- wide returns mul_div and ceil_mul_div, made when it is called: a script
-- calls it where it needs them, so one whose usual path keeps its products
-- below two52 (gcra.lua) does not make three functions on every run for a
-- path it rarely takes.

local two52 = 4503599627370496 -- 2^52

local function wide()
  local two26 = 67108864 -- 2^26

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

  return mul_div, ceil_mul_div
end
