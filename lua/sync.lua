-- sync: one reconcile round of the hybrid limiter for a batch of keys that
-- one Redis node serves. Each key has one global bucket and, per instance, a
-- ledger that makes every message idempotent: a message is applied only if
-- its sequence number is above the ledger's, and it carries absolute totals,
-- never deltas, so a retried, duplicated or late message cannot count twice.
--
-- Two modes share the bucket and the ledger:
--   reserve: value = tokens the instance wants to have been granted in
--     all. Above the ledger's total, the difference is granted from the
--     bucket as far as it holds tokens; below it, the difference is returned.
--     First the ledger's total is raised to base + owed whatever the
--     bucket holds: owed is the cost the instance admitted without a
--     grant (its failure policy's, while Redis could not be asked), on top
--     of the grants it holds (base), which a failover may have lost.
--     It is taken from the bucket as of age ago, when the first of it was
--     admitted (a bucket full meanwhile takes it out of refill it could
--     not hold), and into debt if need be, so what was admitted is paid
--     for once, and no more.
--   optimistic: value = tokens the instance has admitted in all. What is
--     above the ledger's total is debited from the bucket, which may go into
--     debt at most one burst (or the budget, if more) deep, so
--     over-admission is paid back by later denials instead of forgotten.
--     Of value's increase, owed is debited as of age ago, as in reserve
--     mode, and into debt as deep as it goes.
--     The reply also carries the allowance the instance may admit before
--     its next message. With an overshoot budget (ARGV per key, >= 0) the
--     allowances of all instances, each recorded in a hash until it
--     lapses, never add up to more than what the bucket
--     holds plus the budget; without one (-1) the allowance is everything
--     the bucket holds. An instance keeps spending what it holds until the
--     reply arrives, and may never get the reply, so its recorded allowance
--     is never below what it held when it sent the message (`held`), which
--     the invariant above always leaves room for.
--
-- A bucket that a reshard closed (reshard.lua) holds instead a marker
-- "m<shards>.<generation>" naming the key's current layout: a message to it
-- changes nothing and its reply names the layout, where the instance moves
-- its allowance and its next messages.
--
-- The bucket is a GCRA theoretical arrival time: a float of microseconds
-- stored with 17 significant digits, since one token is period / rate
-- microseconds, rarely a whole number. Whole tokens are counted with a
-- tolerance of 1e-6 token against float rounding.
--
-- On a cluster the call carries the keys of several slots that one master
-- serves (the flagged variant, scripts.SyncCluster, declares
-- allow-cross-slot-keys): it declares one key, which routes it to that
-- master, and names every key in ARGV. A key whose slot the node does not
-- serve (the slot moved) is answered "elsewhere" and nothing is written
-- for it; its instance sends the message again, to the new master.
--
-- KEYS[1]     the first message's bucket (ARGV[7]), which routes the call.
-- ARGV[1]     now in microseconds, or 0 to read Redis TIME.
-- ARGV[2]     ledger TTL in milliseconds, an integer.
-- ARGV[3]     mode: "reserve" or "optimistic".
-- ARGV[4]     this instance's id.
-- ARGV[5]     allowance lifetime in microseconds.
-- ARGV[6]     the wire version, "3" (scripts.SyncVersion): the shape of this
--             header, the messages, the reply and the ledgers. A call of
--             any other version (the first had no version: its ARGV[6] is a
--             bucket's name) is answered with an error, and nothing is
--             written.
-- Then, from ARGV[7], k arguments for each key i: k = 2 in reserve mode,
-- which records no allowances, 3 in optimistic mode (scripts.SyncMode's
-- KeyArgs):
-- ARGV[k(i-1)+7] global bucket of key i: a hash (see bucket.lua) holding
--             the bucket (t), its expiry (x) and, per instance, its ledger
--             (lb:<id>): four doubles (packed.lua): the last applied
--             sequence number, the epoch (first sequence number) of the
--             instance's state for the key that wrote it, the tokens granted
--             (reserve) or debited (optimistic) in all, and when it was
--             written, in Unix seconds. (Versions 1 and 2 wrote the same as
--             text, "seq epoch total at", under l:<id>: this version neither
--             reads nor writes those but prunes them when stale, and they
--             never see these.) A ledger unwritten for the ledger TTL is
--             stale: the first message of an instance new to the key
--             deletes the stale ledgers of the others once the hash holds
--             more than a few.
--             The key lives until its bucket is full again and every
--             ledger in it stale.
-- ARGV[3i+5]  optimistic mode: allowances of key i (used with a budget):
--             hash from instance id to "allowance lapse_us"; in the
--             bucket's slot.
-- ARGV[ki+6]  the message of key i: eleven integers, each a little-endian
--             double (packed.lua), 88 bytes (one argument rather than
--             eleven: Redis turns every argument into a Lua string, which
--             costs more than unpacking this one):
--             rate (tokens per period), period (us), burst (tokens),
--             seq (this message's sequence number: increasing per instance),
--             epoch (the first sequence number of the instance's state for
--                    this key; a new epoch starts a new total),
--             base (what the instance holds grants for: the total as it
--                   last heard it, or less after a hand-back that got no
--                   reply; the total when the ledger is missing, say after
--                   it expired, or belongs to an older epoch),
--             value (see the modes),
--             budget (optimistic mode: overshoot budget in tokens, or -1),
--             held (optimistic mode: allowance the instance held unspent when
--                   it sent the message; -1 when it is closing and wants
--                   none),
--             owed (tokens the instance admitted while Redis could not be
--                   asked, not yet acknowledged; see the modes),
--             age (microseconds since the first of owed was admitted).
-- Reply: a flat array, nine integers per key:
--             total (the ledger's total after this message),
--             remaining (whole tokens left in the bucket; 0 in debt),
--             retry_us (time until one token is available; 0 if one is),
--             reset_us (time until the bucket is full),
--             allowance (optimistic mode: tokens the instance may admit beyond
--                        value before its next message; reserve mode: 0),
--             shards, generation (the layout a marker names; 0, 0 when the
--                        bucket is open),
--             seq (the ledger's sequence number as the message found it;
--                  0 without one. Above the message's own, the message
--                  was not applied: an earlier run of this instance, under
--                  the same id, numbered past it, its clock ahead),
--             status (0; 1 when the key was reset since the instance's
--                    ledger was written, sync_reset.lua: the message was not
--                    applied, and the instance forgets what it holds and
--                    owes for the key; 2 when this node does not serve the
--                    key's slot: elsewhere, every other field 0).
if ARGV[6] ~= '3' then
  return redis.error_reply('sync: wire version ' .. tostring(ARGV[6]) .. ' unknown; this script reads version 3')
end
local now = now_us()
local now_ms = floor_div(now, 1000)
local now_s = floor_div(now, 1000000)
local ledger_ttl = int_arg(2)
local mode = ARGV[3]
if mode ~= 'reserve' and mode ~= 'optimistic' then
  return redis.error_reply('sync: unknown mode ' .. tostring(mode))
end
local reserve = mode == 'reserve'
local stride = reserve and 2 or 3 -- ARGV a key
local id = ARGV[4]
local lifetime = int_arg(5)
local lfield = 'lb:' .. id
-- The HSET of a message (its key and ledger set for each), made once a
-- call at its largest size: a table of sixteen made for each message
-- costs Redis about 0.2 us.
local hset = {'HSET', false, lfield, false, false, false, false, false,
  false, false, false, false, false, false, false, false}
local reply = {}
-- The text of each limit the call's messages state, by the 24 bytes that
-- state it: the calls of a round carry few limits, each for many keys.
local limits = {}

-- Fields (the bucket, its expiry, ledgers) a bucket may hold before a
-- newcomer looks for stale ledgers.
local prune_above = 16

-- share returns this instance's allowance under a budget, recording it:
-- what the bucket holds plus the budget, less the live allowances of the
-- other instances, at most an equal share among the instances that asked
-- within an allowance's life (granted or not), and nothing once the bucket
-- is empty; but never below what it holds.
local function share(akey, remaining, budget, held)
  local others, holders = 0, 1
  local all = redis.call('HGETALL', akey)
  for k = 1, #all, 2 do
    if all[k] ~= id then
      local a, lapse = string.match(all[k + 1], '^(%d+) (%d+)$')
      if tonumber(lapse) > now then
        others = others + tonumber(a)
        holders = holders + 1
      else
        redis.call('HDEL', akey, all[k])
      end
    end
  end
  local pool = remaining + budget
  local room = math.max(0, pool - others)
  local grant = 0
  if remaining > 0 then
    grant = math.min(room, ceil_div(pool, holders))
  end
  grant = math.max(grant, math.min(held, room))
  -- Recorded even at 0: a holder asking in vain still counts among those
  -- the pool is shared by, so the others' next shares make room for it.
  redis.call('HSET', akey, id, string.format('%.0f %.0f', grant, now + lifetime))
  redis.call('PEXPIRE', akey, ttl_ms(lifetime))
  return grant
end

-- available returns the whole tokens a bucket at tat holds now, within a
-- tolerance of 1e-6 token against float rounding.
local function available(tat, tolerance, interval)
  return math.floor((tolerance - (tat - now)) / interval + 1e-6)
end

-- recorded returns the allowance recorded for this instance, for a message
-- that repeats one already applied.
local function recorded(akey)
  local v = redis.call('HGET', akey, id)
  if not v then return 0 end
  local a, lapse = string.match(v, '^(%d+) (%d+)$')
  if tonumber(lapse) <= now then return 0 end
  return tonumber(a)
end

-- prune deletes the stale ledgers of bkey, this version's and the text
-- ones of versions 1 and 2, if it holds more than a few. A ledger whose
-- time cannot be read is stale.
local function prune(bkey)
  if redis.call('HLEN', bkey) <= prune_above then return end
  local all = redis.call('HGETALL', bkey)
  for k = 1, #all, 2 do
    local field, v = all[k], all[k + 1]
    local ledger, at = false, nil
    if string.sub(field, 1, 3) == 'lb:' then
      ledger = true
      if #v == 32 then at = select(4, struct.unpack('<dddd', v)) end
    elseif string.sub(field, 1, 2) == 'l:' then
      ledger, at = true, tonumber(string.match(v, ' (%d+)$'))
    end
    if ledger and (at == nil or at * 1000 + ledger_ttl < now_ms) then
      redis.call('HDEL', bkey, field)
    end
  end
end

-- parse returns the eleven integers of message m, ARGV[at], or raises a
-- script error.
local function parse(m, at)
  if not m or #m ~= 88 then
    error('ARGV[' .. at .. '] is not a message: ' .. tostring(m and #m) .. ' bytes, want 88')
  end
  local rate, period, burst, seq, epoch, base, value, budget, held, owed, age = struct.unpack('<ddddddddddd', m)
  -- Each field finite and at least its least value: 1 for rate and
  -- period, -1 for budget and held, else 0. The sum is NaN or infinite
  -- when a field is.
  local least = math.min(rate - 1, period - 1, burst, seq, epoch, base, value, budget + 1, held + 1, owed, age)
  local sum = rate + period + burst + seq + epoch + base + value + budget + held + owed + age
  if not (least >= 0 and sum < math.huge) then
    error('ARGV[' .. at .. '] is not a message: a field out of range')
  end
  return rate, period, burst, seq, epoch, base, value, budget, held, owed, age
end

-- The bucket of the message at hand, kept in these variables, which the
-- functions below share and open() sets for each message (a Lua table of
-- a dozen fields costs Redis about 0.25 us to make, a message):
--   tat        its time (0 for an absent bucket), so that one not ahead of
--              now says since when the bucket has been full;
--   tat_read, tat_raw   the time as read, and its text;
--   f_text, g_text      fields f and g as read, or false;
--   kept       the stretches (stretches()), or false until read;
--   edge       see stretches(), or nil;
--   changed    whether kept or edge changed, so f and g are written;
--   s1, g1, text1, s2, g2, text2   the stretches read from f and from g
--              and the text of each, "s g", which stretches_text writes
--              again without formatting them: a number read back formats
--              as the text it came from.
local tat, tat_read, tat_raw, f_text, g_text, kept, edge, changed
local s1, g1, text1, s2, g2, text2
-- The table that holds kept once read, made once a call and emptied for
-- each message: making one for each message and growing it to four
-- stretches costs the message about 0.5 us.
local kept_table = {}

-- open sets the bucket's variables for a message that read raw, f and g
-- (field t, or false for a bucket a reshard closed, and fields f and g).
local function open(raw, f, g)
  tat = tonumber(raw) or 0
  tat_read, tat_raw, f_text, g_text = tat, raw, f, g
  kept, edge, changed = false, nil, false
  s1, g1, text1, s2, g2, text2 = nil, nil, nil, nil, nil, nil
end

-- now_text returns the text of now, formatted once a call.
local now_str
local function now_text()
  if not now_str then now_str = num_text(now) end
  return now_str
end

-- text_of returns the text of x, a time: read rather than formatted when it
-- is now or the bucket's time as read.
local function text_of(x)
  if x == now then
    return now_text()
  elseif x == tat_read and tat_raw then
    return tat_raw
  end
  return num_text(x)
end

-- stretches returns the full stretches whose refill, which the full
-- bucket could not hold, no charge has used yet, start and end in turn, in
-- time order: they pay for tokens admitted then and reported late. With
-- them goes the edge, the end of the last stretch recorded or used:
-- refill before it is recorded or spent (nil when none is known). It
-- reads them the first time from fields f, "s1 g1" or "e s1 g1" (or "e"
-- alone), and g, "s2 g2" (empty when there is no second stretch), the
-- earlier stretch in either; the edge not written is the later stretch's
-- end. Each field stays short enough for Redis to keep the hash compact.
-- (string.find and string.sub split them in about two thirds of the time
-- string.match takes.)
local function stretches()
  if kept then
    return kept
  end
  kept = kept_table
  for k = #kept, 1, -1 do
    kept[k] = nil
  end
  if not f_text then
    return kept
  end
  local p = string.find(f_text, ' ', 1, true)
  if not p then
    edge = tonumber(f_text)
    return kept
  end
  local q = string.find(f_text, ' ', p + 1, true)
  if q then
    edge = tonumber(string.sub(f_text, 1, p - 1))
    text1 = string.sub(f_text, p + 1)
    s1, g1 = tonumber(string.sub(f_text, p + 1, q - 1)), tonumber(string.sub(f_text, q + 1))
  else
    text1 = f_text
    s1, g1 = tonumber(string.sub(f_text, 1, p - 1)), tonumber(string.sub(f_text, p + 1))
  end
  local r = nil
  if g_text then
    r = string.find(g_text, ' ', 1, true)
  end
  if r then
    text2 = g_text
    s2, g2 = tonumber(string.sub(g_text, 1, r - 1)), tonumber(string.sub(g_text, r + 1))
    -- Each field keeps its stretch until the stretch goes
    -- (stretches_text), so either may hold the later one.
    if s1 < s2 then
      kept[1], kept[2], kept[3], kept[4] = s1, g1, s2, g2
    else
      kept[1], kept[2], kept[3], kept[4] = s2, g2, s1, g1
    end
  else
    kept[1], kept[2] = s1, g1
  end
  if not edge then
    edge = kept[#kept]
  end
  return kept
end

-- ahead returns the bucket's time, never before now: the time it holds its
-- burst again, now for a full bucket.
local function ahead()
  return math.max(tat, now)
end

-- since_full returns since when a bucket full now has held refill that no
-- stretch records and no charge has used: its time, or the edge if later
-- (a return moves its time back, over refill recorded or spent).
local function since_full()
  stretches()
  if edge and edge > tat then
    return edge
  end
  return tat
end

-- Stretches a bucket keeps: when there are more, the earliest goes if it
-- ended a ledger's life ago (it pays only for costs first admitted before
-- then, by an instance cut off from Redis since), else the shortest (the
-- earliest of equals). A fallback's debt after an outage is paid from the
-- outage's stretch, which the short stretches between the grants that
-- follow it do not push out.
local keep_stretches = 2
local stale_before = now - ledger_ttl * 1000

-- trim drops stretches while there are more than a bucket keeps, moving
-- the later ones down itself (two table.remove calls cost more than the
-- rest of trim).
local function trim(f)
  local n = #f
  while n > 2 * keep_stretches do
    local drop = 1
    if f[2] >= stale_before then
      for k = 3, n - 1, 2 do
        if f[k + 1] - f[k] < f[drop + 1] - f[drop] then
          drop = k
        end
      end
    end
    for k = drop, n - 2 do
      f[k] = f[k + 2]
    end
    f[n], f[n - 1] = nil, nil
    n = n - 2
  end
end

-- record adds the full stretch from s to g, whose refill no charge has
-- used, to the bucket's, and moves the edge to g.
local function record(s, g)
  local f = stretches()
  changed = true
  if not edge or g > edge then
    edge = g
  end
  if g > s then
    f[#f + 1], f[#f + 2] = s, g
    trim(f)
  end
end

-- pair_text returns the text of the stretch from s to g: as it was read
-- when it is a stretch the bucket held, else made.
local function pair_text(s, g)
  if s == s1 and g == g1 then
    return text1
  elseif s == s2 and g == g2 then
    return text2
  end
  return text_of(s) .. ' ' .. text_of(g)
end

-- stretches_text returns the text of fields f and g. A stretch stays in
-- the field it was read from while the bucket keeps it, so that a message
-- that records one stretch and drops another, as a top-up of a full bucket
-- does, rewrites one field, not both (each field an HSET writes costs
-- Redis about 0.4 us). A lone stretch is f's, where a reader looks first.
local function stretches_text()
  local f = kept
  local n = #f
  if n == 0 then
    return text_of(edge), ''
  end
  local ftext, gtext = nil, ''
  if n == 2 then
    ftext = pair_text(f[1], f[2])
  elseif (f[1] == s2 and f[2] == g2) or (f[3] == s1 and f[4] == g1) then
    ftext, gtext = pair_text(f[3], f[4]), pair_text(f[1], f[2])
  else
    ftext, gtext = pair_text(f[1], f[2]), pair_text(f[3], f[4])
  end
  if edge ~= f[n] then
    ftext = text_of(edge) .. ' ' .. ftext
  end
  return ftext, gtext
end

-- relimit converts the bucket to the message's limit when the limit it was
-- written under, old ("rate period burst"), differs: it keeps the tokens
-- the bucket holds now (or its debt), cut to the new burst, and refills at
-- the new rate from now on. A full bucket stays full, as an absent one
-- does. It returns the text to store as the bucket's limit, or nil when it
-- is stored already.
local function relimit(old, limit, interval, burst)
  if old == limit then return nil end
  local r0, p0, b0 = string.match(old or '', '^(%d+) (%d+) (%d+)$')
  if r0 and tat > now then
    local held = tonumber(b0) - (tat - now) * tonumber(r0) / tonumber(p0)
    tat = later(now, (burst - math.min(held, burst)) * interval)
  end
  return limit
end

-- take charges n tokens now (a grant, a report), recording the full
-- stretch it ends.
local function take(n, interval)
  if n <= 0 then return end
  if tat <= now then
    record(since_full(), now)
  end
  tat = later(ahead(), n * interval)
end

-- owe charges n tokens admitted since since, before now: as if all at its
-- start, so never more than they took. They come out of the refill of
-- the recorded stretches after since, the earliest first, then, for a
-- bucket full now, out of the refill it could not hold since (what it
-- held before since is recorded, for reports of earlier costs); the rest
-- is taken now, into debt if need be.
local function owe(n, since, interval)
  local d = n * interval
  local f, k = stretches(), 1
  while d > 0 and k < #f do
    if since < f[k + 1] then
      changed = true
      if since > f[k] then
        -- What it held before since stays, for reports of earlier costs.
        table.insert(f, k + 1, since)
        table.insert(f, k + 2, since)
        k = k + 2
      end
      local t = later(f[k], d)
      if t < f[k + 1] then
        f[k], d = t, 0
      else
        d = t - f[k + 1]
        table.remove(f, k)
        table.remove(f, k)
      end
    else
      k = k + 2
    end
  end
  trim(f)
  if d <= 0 then
    return
  end
  if tat <= now then
    local full = since_full()
    local from = math.max(full, since)
    record(full, from)
    tat = later(from, d)
    -- The refill spent: a return that moves the time back does not
    -- free it again.
    edge = math.max(edge, math.min(tat, now))
  else
    tat = later(tat, d)
  end
end

-- elsewhere reports whether err, the error of a command on a key, says
-- that this node does not serve the key's slot (a cluster moved it);
-- any other error is raised.
local function elsewhere(err)
  if string.find(err, 'WRONGTYPE', 1, true) then error(err) end
  return true
end

local keys = (#ARGV - 6) / stride
if keys < 1 or keys % 1 ~= 0 or KEYS[1] ~= ARGV[7] then
  return redis.error_reply('sync: want KEYS[1] = ARGV[7] and ' .. stride .. ' ARGV a key in ' .. mode .. ' mode')
end
for i = 1, keys do repeat -- once; break is the next key
  local at = stride * (i - 1) + 7 -- the key's first ARGV
  local bkey, msg = ARGV[at], ARGV[at + stride - 1]
  local akey = not reserve and ARGV[at + 1] or nil
  local rate, period, burst, seq, epoch, base, value, budget, held, owed, age = parse(msg, at + stride - 1)
  local interval = period / rate
  local tolerance = burst * interval
  local r = 9 * (i - 1)
  local got = redis.pcall('HMGET', bkey, 't', lfield, 'x', 'f', 'L', 'z', 'g')
  if got.err and elsewhere(got.err) then
    for f = 1, 8 do reply[r + f] = 0 end
    reply[r + 9] = 2
    break
  end
  local raw, l, x = got[1], got[2], got[3]
  local moved_s, moved_gen = 0, 0
  if raw and string.byte(raw, 1) == 109 then -- 'm'
    local s, g = string.match(raw, '^m(%d+)%.(%d+)$')
    moved_s, moved_gen = tonumber(s), tonumber(g)
  end
  open(moved_s == 0 and raw, got[4], got[7])
  local limit_text = nil
  if moved_s == 0 then
    local stated = string.sub(msg, 1, 24)
    local text = limits[stated]
    if not text then
      text = string.format('%d %d %d', rate, period, burst)
      limits[stated] = text
    end
    limit_text = relimit(got[5], text, interval, burst)
  end

  local lseq, total = 0, base
  local otext = nil -- field o, when an Optimistic message owed
  if l then
    local s, e, n = struct.unpack('<ddd', l)
    lseq = s
    if e == epoch then total = n end
  end
  -- A key reset (sync_reset.lua) since this instance's ledger was written:
  -- what it holds or owes under the old state is forgotten, not applied.
  local reset = not l and got[6] and tonumber(got[6]) + ledger_ttl * 1000 > now
    and (base > 0 or held > 0 or owed > 0)
  local fresh = seq > lseq and moved_s == 0 and not reset
  if fresh then
    if reserve and base + owed > total then
      owe(base + owed - total, now - age, interval)
      total = base + owed
    end
    if reserve and value < total then
      -- Tokens handed back: the bucket holds them again, a full one
      -- having been full since then.
      tat = later(ahead(), -(total - value) * interval)
      total = value
    elseif reserve and value > total then
      local grant = math.min(value - total, math.max(available(ahead(), tolerance, interval), 0))
      take(grant, interval)
      total = total + grant
    elseif not reserve and value > total then
      local back = math.min(owed, value - total)
      if back > 0 then
        owe(back, now - age, interval)
      end
      take(value - total - back, interval)
      -- The overdraft of admissions is kept as deep as admissions can go:
      -- a burst, or the budget when that is more; forgiven past it, a
      -- budget above one burst was handed out again once a burst had
      -- refilled. What was owed (admitted by the failure policy, or
      -- charged after the fact) is a debt below that, never forgiven:
      -- field o holds when the owed costs alone would be repaid, and the
      -- overdraft is kept as deep from there.
      local deepest = now + tolerance + math.max(tolerance, budget * interval)
      if back > 0 or tat > deepest then
        local o = math.max(tonumber(redis.call('HGET', bkey, 'o')) or 0, now)
        if back > 0 then
          o = o + back * interval
          otext = num_text(o)
        end
        tat = math.min(tat, deepest + (o - now))
      end
      total = value
    end
    if not l then prune(bkey) end
    -- The command, called with its first n.
    local w = hset
    w[2], w[4] = bkey, struct.pack('<dddd', seq, epoch, total, now_s)
    local n = 4
    local t = tat_text(tat, raw)
    if t then
      w[5], w[6], n = 't', t, 6
    end
    if otext then
      w[n + 1], w[n + 2], n = 'o', otext, n + 2
    end
    if changed then
      local ftext, gtext = stretches_text()
      if ftext ~= f_text then
        w[n + 1], w[n + 2], n = 'f', ftext, n + 2
      end
      if gtext ~= (g_text or '') then
        w[n + 1], w[n + 2], n = 'g', gtext, n + 2
      end
    end
    if limit_text and (t or raw) then
      w[n + 1], w[n + 2], n = 'L', limit_text, n + 2
    end
    local until_ms = extend(x, now_ms + math.max(ledger_ttl, ttl_ms(ahead() - now)), floor_div(ledger_ttl, 2))
    if until_ms then
      w[n + 1], w[n + 2], n = 'x', string.format('%d', until_ms), n + 2
    end
    redis.call(unpack(w, 1, n))
    if until_ms then
      -- Relative: now may be the caller's clock (ARGV[1]), not Redis's.
      redis.call('PEXPIRE', bkey, until_ms - now_ms)
    end
  end
  local full_at = ahead()
  local remaining = math.max(0, available(full_at, tolerance, interval))
  if moved_s > 0 then remaining = 0 end
  local allowance = 0
  if not reserve then
    if budget < 0 then
      allowance = remaining
    elseif fresh and held < 0 then
      redis.call('HDEL', akey, id)
    elseif fresh then
      allowance = share(akey, remaining, budget, held)
    else
      allowance = recorded(akey)
    end
  end
  local retry = 0
  if remaining < 1 and moved_s == 0 then retry = math.ceil(full_at - tolerance + interval - now) end
  reply[r + 1] = total
  reply[r + 2] = remaining
  reply[r + 3] = retry
  reply[r + 4] = math.ceil(full_at - now)
  reply[r + 5] = allowance
  reply[r + 6] = moved_s
  reply[r + 7] = moved_gen
  reply[r + 8] = lseq
  reply[r + 9] = reset and 1 or 0
until true end
return reply
