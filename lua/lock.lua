-- lock: a lock one holder at a time may take, such as the one a hybrid
-- key's reshard holds (package sync) so that one instance at a time moves
-- the key. A holder that dies leaves it to lapse.
--
-- KEYS[1]  the lock, a string key holding its holder's name.
-- ARGV[1]  now in microseconds, or 0 to read Redis TIME (unused: the lock
--          lapses on Redis's own clock).
-- ARGV[2]  the holder's name.
-- ARGV[3]  how long the lock lasts, in milliseconds; 0 releases it.
-- Reply:   1 if the lock was taken (or released), 0 if another holds it
--          (or the caller did not).
local key, holder, ms = KEYS[1], ARGV[2], int_arg(3)
if ms == 0 then
  if redis.call('GET', key) == holder then
    redis.call('DEL', key)
    return 1
  end
  return 0
end
if redis.call('SET', key, holder, 'NX', 'PX', ms) then return 1 end
return 0
