-- sync_reset: forgets keys of the hybrid limiter (sync.lua): their buckets
-- read as full again, and every instance that held allowance for them, or
-- owed them what its failure policy admitted, forgets it at its next
-- message, which finds its ledger gone and the reset recorded.
--
-- KEYS[2i-1]  global bucket of key i (a hash: see bucket.lua); a closed
--             part (its field t a marker) is left as it is.
-- KEYS[2i]    its Optimistic allowances, deleted.
-- ARGV[1]     now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]     how long the reset is recorded, in milliseconds: the ledger
--             TTL, after which a ledger it removed would have lapsed.
-- Reply:      the number of buckets reset.
local now = now_us()
local keep = int_arg(2)
local n = 0
for i = 1, #KEYS / 2 do
  local bkey = KEYS[2 * i - 1]
  local raw = redis.call('HGET', bkey, 't')
  if not (raw and string.byte(raw, 1) == 109) then -- 'm': a marker
    redis.call('DEL', bkey, KEYS[2 * i])
    -- z: when the bucket was reset (sync.lua), in the scripts' clock.
    redis.call('HSET', bkey, 'z', string.format('%d', now))
    redis.call('PEXPIRE', bkey, keep)
    n = n + 1
  end
end
return n
