-- sync: one reconcile round of the hybrid limiter for a batch of keys that
-- share one hash slot. Each key has one global bucket and, per instance, a
-- ledger that makes every message idempotent: a message is applied only if
-- its sequence number is above the ledger's, and it carries absolute totals,
-- never deltas, so a retried, duplicated or late message cannot count twice.
--
-- Two modes share the bucket and the ledger:
--   reserve ("r"): value = tokens the instance wants to have been granted in
--     all. Above the ledger's total, the difference is granted from the
--     bucket as far as it holds tokens; below it, the difference is returned.
--   report ("o"): value = tokens the instance has admitted in all. What is
--     above the ledger's total is debited from the bucket, which may go into
--     debt at most one burst deep, so over-admission is paid back by later
--     denials instead of forgotten.
--
-- The bucket is a GCRA theoretical arrival time: a float of microseconds
-- stored with 17 significant digits, since one token is period / rate
-- microseconds, rarely a whole number. Whole tokens are counted with a
-- tolerance of 1e-6 token against float rounding.
--
-- KEYS[2i-1]  global bucket of key i: string, the GCRA theoretical arrival
--             time in microseconds of Redis TIME; absent means a full bucket.
-- KEYS[2i]    ledger of key i for this instance: string "seq epoch total":
--             the last applied sequence number, the epoch (first sequence
--             number) of the instance's state for the key that wrote it, and
--             the tokens granted (reserve) or debited (report) in all.
-- ARGV[1]     now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]     ledger TTL in milliseconds.
-- ARGV[3]     mode: "r" or "o".
-- ARGV[4+7(i-1) ..] per key, seven integers:
--             rate (tokens per period), period (us), burst (tokens),
--             seq (this message's sequence number: increasing per instance),
--             epoch (the first sequence number of the instance's state for
--                    this key; a new epoch starts a new total),
--             base (the total as the instance last heard it; the total when
--                   the ledger is missing, say after it expired, or belongs
--                   to an older epoch),
--             value (see the modes).
-- Reply: a flat array, four integers per key:
--             total (the ledger's total after this message),
--             remaining (whole tokens left in the bucket; 0 in debt),
--             retry_us (time until one token is available; 0 if one is),
--             reset_us (time until the bucket is full).
local now = now_us()
local ledger_ttl = int_arg(2)
local reserve = ARGV[3] == 'r'
local reply = {}
for i = 1, #KEYS / 2 do
  local bkey, lkey = KEYS[2 * i - 1], KEYS[2 * i]
  local a = 4 + 7 * (i - 1)
  local rate, period, burst = int_arg(a), int_arg(a + 1), int_arg(a + 2)
  local seq, epoch = int_arg(a + 3), int_arg(a + 4)
  local base, value = int_arg(a + 5), int_arg(a + 6)
  local interval = period / rate
  local tolerance = burst * interval
  local tat = tonumber(redis.call('GET', bkey)) or now
  if tat < now then tat = now end
  local function available()
    return math.floor((tolerance - (tat - now)) / interval + 1e-6)
  end

  local lseq, total = 0, base
  local l = redis.call('GET', lkey)
  if l then
    local s, e, n = string.match(l, '^(%d+) (%d+) (%d+)$')
    lseq = tonumber(s)
    if tonumber(e) == epoch then total = tonumber(n) end
  end
  if seq > lseq then
    if reserve and value < total then
      tat = math.max(now, tat - (total - value) * interval)
      total = value
    elseif reserve and value > total then
      local grant = math.min(value - total, math.max(available(), 0))
      tat = tat + grant * interval
      total = total + grant
    elseif not reserve and value > total then
      tat = math.min(tat + (value - total) * interval, now + 2 * tolerance)
      total = value
    end
    redis.call('SET', lkey, string.format('%.0f %.0f %.0f', seq, epoch, total), 'PX', ledger_ttl)
    if tat > now then
      redis.call('SET', bkey, string.format('%.17g', tat), 'PX', ttl_ms(tat - now))
    else
      redis.call('DEL', bkey)
    end
  end
  local remaining = math.max(0, available())
  local retry = 0
  if remaining < 1 then retry = math.ceil(tat - tolerance + interval - now) end
  reply[4 * i - 3] = total
  reply[4 * i - 2] = remaining
  reply[4 * i - 1] = retry
  reply[4 * i] = math.ceil(tat - now)
end
return reply
