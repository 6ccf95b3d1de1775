-- clock.lua: the scripts' clock. internal/scripts puts it before every
-- script that reads the time, and before the other shared files.

-- now_us returns the time in microseconds since the Unix epoch: ARGV[1]
-- when it is a positive number (a caller-supplied clock, such as the
-- simulator's), else Redis TIME. Since Redis 7 a script's TIME is frozen for
-- its whole run and scripts replicate by effects, so TIME is safe here.
-- Callers on Redis's clock send '0', which is compared as text before
-- anything is converted, and TIME's two fields convert in the arithmetic:
-- a call of tonumber costs a script as much again as the conversion.
local function now_us()
  if ARGV[1] ~= '0' then
    local t = tonumber(ARGV[1])
    if t ~= nil and t > 0 then
      return t
    end
  end
  local tm = redis.call('TIME')
  return tm[1] * 1000000 + tm[2]
end
