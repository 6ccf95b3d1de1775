-- packed.lua: the hybrid limiter's binary numbers (sync.lua), put after
-- bucket.lua. Messages and ledgers are little-endian IEEE doubles, packed
-- and read with the struct library Redis and Valkey build into their Lua
-- (struct.pack('<dd', a, b), struct.unpack('<dd', s)): one C call where
-- decimal text takes a pattern match and a tonumber per number, or a
-- string.format. A double holds every integer below 2^53 exactly, as Lua's
-- numbers do.
--
-- An interpreter without struct (miniredis's own EVAL, which tests run;
-- the simulator's interpreter has struct in Go) gets the same two calls in
-- Lua, for the formats the scripts use, '<' followed by 'd's, and raises an
-- error on any other. They write what Redis's struct writes, byte for byte, for every
-- finite double (internal/scripts TestPackedMatchesRedis); they are made
-- only where struct is missing, so Redis pays nothing for them.
local struct = rawget(_G, 'struct')
if not struct then
  -- doubles returns how many doubles fmt, '<' and then 'd's, describes.
  local function doubles(fmt)
    if not string.find(fmt, '^<d+$') then
      error('struct: format ' .. tostring(fmt) .. ' unsupported here')
    end
    return #fmt - 1
  end
  -- put appends the 8 bytes of v, little-endian, to out.
  local function put(out, v)
    local sign, exp, mant = 0, 0, 0
    if v < 0 or (v == 0 and 1 / v < 0) then
      sign, v = 128, -v
    end
    if v ~= v or v == 1 / 0 then -- (gopher-lua's math.huge is the largest double)
      error('struct: cannot pack ' .. tostring(v))
    elseif v > 0 then
      local m, e = math.frexp(v) -- v = m * 2^e, 0.5 <= m < 1
      if e > -1022 then
        exp, mant = e + 1022, (m * 2 - 1) * 2 ^ 52
      else -- subnormal
        mant = math.ldexp(m, e + 1074)
      end
    end
    for _ = 1, 6 do
      local byte = mant % 256
      out[#out + 1] = string.char(byte)
      mant = (mant - byte) / 256
    end
    out[#out + 1] = string.char(mant + (exp % 16) * 16)
    out[#out + 1] = string.char((exp - exp % 16) / 16 + sign)
  end
  -- get returns the double whose 8 bytes start at i of s.
  local function get(s, i)
    local b1, b2, b3, b4, b5, b6, b7, b8 = string.byte(s, i, i + 7)
    local exp = (b8 % 128) * 16 + (b7 - b7 % 16) / 16
    local mant = ((((((b7 % 16) * 256 + b6) * 256 + b5) * 256 + b4) * 256 + b3) * 256 + b2) * 256 + b1
    local v
    if exp == 2047 then
      error('struct: not a finite double')
    elseif exp == 0 then
      v = math.ldexp(mant, -1074)
    else
      v = math.ldexp(mant + 2 ^ 52, exp - 1075)
    end
    -- Negated, not multiplied by -1: gopher-lua's product of -1 and 0 is
    -- 0, not -0.
    if b8 >= 128 then
      return -v
    end
    return v
  end
  struct = {
    pack = function(fmt, ...)
      local n, out = doubles(fmt), {}
      for k = 1, n do
        put(out, (select(k, ...)))
      end
      return table.concat(out)
    end,
    unpack = function(fmt, s, pos)
      local n = doubles(fmt)
      pos = pos or 1
      if #s < pos - 1 + 8 * n then
        error('struct: data string too short')
      end
      local v = {}
      for k = 1, n do
        v[k] = get(s, pos + 8 * (k - 1))
      end
      v[n + 1] = pos + 8 * n
      return unpack(v, 1, n + 1)
    end,
  }
end
