-- Shared by every script (enqueue, release, cancel, heartbeat, backend). scripts.py
-- prepends it to each, so each script stays one atomic unit: sweep, then grant as
-- much as capacity allows (and, with preemption on, pause a long-running lease for
-- an urgent ticket that found no free slot).
--
-- Keys: pool_keys(KEYS[1]) names every key of a pool, once (keys.py builds the same
-- names; a test holds the two equal). Formats (records.py has the table; a test holds
-- the two equal):
--   ticket in K.tickets: owner|model|tenant|class|predicted|deadline|arrival|tier|avoid|restricted|pauses
--   lease in K.lease:    backend|owner|predicted|restricted|borrowed|class|score|pauses|tier|arrival; its id
--                        is also in K.owned(owner), so a replica can find grants it was never told of
--   grant message:       G|<ticket>|<backend>|<borrowed 0/1>
--   eviction message:    E|<ticket>|<reason>
--   lost message:        L|<ticket>|lost   (a waited-for ticket the queue no longer has)
--   pause message:       P|<lease>|<backend>  (its slot went to a more urgent ticket)

local function pool_keys(base)
  return {
    queue = base .. ':queue', tickets = base .. ':tickets',
    cap = base .. ':cap', busy = base .. ':busy', work = base .. ':work', weight = base .. ':weight',
    speed = base .. ':speed', lcap = base .. ':lcap', lbusy = base .. ':lbusy', borrow = base .. ':borrow',
    borrowed = base .. ':borrowed', quiet = base .. ':quiet', down = base .. ':down',
    leases = base .. ':leases', lease = base .. ':lease', owners = base .. ':owners',
    progress = base .. ':progress', resume = base .. ':resume',
    tenant_vfinish = base .. ':tenant:vfinish', tenant_queued = base .. ':tenant:queued',
    stats = base .. ':stats', epoch = base .. ':epoch',
    serves = function(model) return base .. ':serves:' .. model end,
    owned = function(owner) return base .. ':owned:' .. owner end,
    inbox = function(owner) return base .. ':inbox:' .. owner end,
  }
end

-- The arguments every dispatching script opens with (scripts.py: Scripts._common).
local function dispatch_args()
  return {me = ARGV[1], lease_ttl = tonumber(ARGV[2]), owner_ttl = tonumber(ARGV[3]),
          max_scan = tonumber(ARGV[4]), preempt = ARGV[5] == '1', quantum = tonumber(ARGV[6]),
          max_pauses = tonumber(ARGV[7]), preempt_after = tonumber(ARGV[8]), max_slack = tonumber(ARGV[9])}
end
local FIRST_ARG = 10  -- where each script's own arguments begin
-- Times in records are written with 14 digits: 0.1 ms on Redis's clock; this much slack
-- keeps a time read back from a record from looking later than the moment it was written.
local CLOCK_SLACK = 0.001

local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function fields(packed)
  local f = {}
  local i = 1
  for field in string.gmatch(packed .. '|', '([^|]*)|') do
    f[i] = field
    i = i + 1
  end
  return f
end

local function flag(b)
  return b and '1' or '0'
end

-- -- formats ---------------------------------------------------------------------------

local function pack_ticket(t)
  return table.concat({t.owner, t.model, t.tenant, t.class, t.predicted, t.deadline, t.arrival,
                       t.tier, t.avoid, flag(t.restricted), t.pauses}, '|')
end

local function parse_ticket(packed)
  local f = fields(packed)
  return {owner = f[1], model = f[2], tenant = f[3], class = f[4],
          predicted = tonumber(f[5]) or 0, deadline = tonumber(f[6]) or 0,
          arrival = tonumber(f[7]) or 0, tier = f[8], avoid = f[9] or '',
          restricted = f[10] == '1', pauses = tonumber(f[11]) or 0}
end

local function pack_lease(l)
  return table.concat({l.backend, l.owner, l.predicted, flag(l.restricted), flag(l.borrowed),
                       l.class, l.score, l.pauses, l.tier, l.arrival}, '|')
end

local function parse_lease(record)
  local f = fields(record)
  return {backend = f[1], owner = f[2], predicted = tonumber(f[3]) or 0,
          restricted = f[4] == '1', borrowed = f[5] == '1', class = f[6] or '',
          score = tonumber(f[7]) or 0, pauses = tonumber(f[8]) or 0, tier = f[9] or '',
          arrival = tonumber(f[10]) or 0}
end

local function grant_message(lid, l)
  return 'G|' .. lid .. '|' .. l.backend .. '|' .. flag(l.borrowed)
end

local function evict_message(tid, reason)
  return 'E|' .. tid .. '|' .. reason
end

local function lost_message(tid)
  return 'L|' .. tid .. '|lost'
end

local function pause_message(lid, backend)
  return 'P|' .. lid .. '|' .. backend
end

-- -- leases: the one place a slot is taken or given back -------------------------------

-- Record lease `lid` and count its slot (with its share of outstanding work) on its
-- backend. `expiry`: when it lapses unless renewed.
local function add_lease(K, lid, l, expiry)
  redis.call('HSET', K.lease, lid, pack_lease(l))
  redis.call('ZADD', K.leases, expiry, lid)
  redis.call('SADD', K.owned(l.owner), lid)
  redis.call('HINCRBY', K.busy, l.backend, 1)
  redis.call('HINCRBYFLOAT', K.work, l.backend, l.predicted)
  if l.restricted then
    redis.call('HINCRBY', K.lbusy, l.backend, 1)
  end
  if l.borrowed then
    redis.call('HINCRBY', K.borrowed, l.backend, 1)
  end
end

-- Give back the slot a lease holds. Only a lease that still exists holds one, so
-- dropping twice frees it once. Returns whether it existed.
local function drop_lease(K, lid)
  local record = redis.call('HGET', K.lease, lid)
  redis.call('ZREM', K.leases, lid)
  if not record then
    return false
  end
  local l = parse_lease(record)
  redis.call('HDEL', K.lease, lid)
  redis.call('HDEL', K.progress, lid)
  redis.call('SREM', K.owned(l.owner), lid)
  redis.call('HINCRBY', K.busy, l.backend, -1)
  redis.call('HINCRBYFLOAT', K.work, l.backend, -l.predicted)
  if l.restricted then
    redis.call('HINCRBY', K.lbusy, l.backend, -1)
  end
  if l.borrowed then
    redis.call('HINCRBY', K.borrowed, l.backend, -1)
  end
  return true
end

-- Expired leases (their owner stopped renewing) give their slot back.
local function sweep_leases(K, now)
  local dead = redis.call('ZRANGEBYSCORE', K.leases, '-inf', now)
  for _, lid in ipairs(dead) do
    drop_lease(K, lid)
  end
  return #dead
end

local function drop_ticket(K, tid, t)
  redis.call('ZREM', K.queue, tid)
  redis.call('HDEL', K.tickets, tid)
  if t then
    if redis.call('HINCRBY', K.tenant_queued, t.tenant, -1) <= 0 then
      redis.call('HDEL', K.tenant_queued, t.tenant)
    end
    if not t.restricted then
      redis.call('HINCRBY', K.stats, 'queued_open', -1)
    end
  end
end

local function num(hash, name, default)
  local v = hash[name]
  if v == nil then
    return default
  end
  return tonumber(v) or default
end

local function hash_table(key)
  local flat = redis.call('HGETALL', key)
  local out = {}
  for i = 1, #flat, 2 do
    out[flat[i]] = flat[i + 1]
  end
  return out
end

-- The state of every live backend with a free slot: name -> {free, busy, work, ...}.
local function backend_states(K)
  local caps = hash_table(K.cap)
  local busy = hash_table(K.busy)
  local work = hash_table(K.work)
  local speed = hash_table(K.speed)
  local weight = hash_table(K.weight)
  local lcap = hash_table(K.lcap)
  local lbusy = hash_table(K.lbusy)
  local borrow = hash_table(K.borrow)
  local states, total = {}, 0
  for name, cap in pairs(caps) do
    if redis.call('SISMEMBER', K.down, name) == 0 then
      local limit = tonumber(cap)
      local b = num(busy, name, 0)
      if limit - b > 0 then
        states[name] = {
          free = limit - b, busy = b, work = num(work, name, 0),
          rate = num(speed, name, 1) * num(weight, name, 1),
          lcap = num(lcap, name, limit), lbusy = num(lbusy, name, 0), borrow = num(borrow, name, 0),
        }
        total = total + limit - b
      end
    end
  end
  return states, total
end

-- Among backends serving the model with a free slot this ticket may use, the one
-- that would finish its outstanding work soonest (ties: fewest in flight).
-- Returns the backend and whether the slot is borrowed from the reserve.
-- policy/routing.py is its Python twin, table-tested; a test holds the two equal.
local function pick_backend(K, t, states, open_waiting, quiet)
  local best, best_load, best_busy, best_borrowed = nil, nil, nil, false
  for _, name in ipairs(redis.call('SMEMBERS', K.serves(t.model))) do
    local s = states[name]
    if s and name ~= t.avoid then
      local ok, borrowed = true, false
      if t.restricted and s.lbusy >= s.lcap then
        -- work-conserving: borrow a reserved slot only while no open work waits or is expected
        ok = open_waiting <= 0 and quiet and s.lbusy < s.lcap + s.borrow
        borrowed = ok
      end
      if ok then
        local load = (s.work + t.predicted) / s.rate
        if best == nil or load < best_load or (load == best_load and s.busy < best_busy) then
          best, best_load, best_busy, best_borrowed = name, load, s.busy, borrowed
        end
      end
    end
  end
  return best, best_borrowed
end

-- The dispatch's own copy of a backend's state, after it took one slot.
local function took_slot(states, backend, t)
  local s = states[backend]
  s.free, s.busy, s.work = s.free - 1, s.busy + 1, s.work + t.predicted
  if s.free <= 0 then
    states[backend] = nil
  end
  if t.restricted then
    s.lbusy = s.lbusy + 1
  end
end

local function notify(K, me, mine, owner, msg)
  if owner == me then
    mine[#mine + 1] = msg
  else
    redis.call('RPUSH', K.inbox(owner), msg)
  end
end

-- Which running lease should give its slot to ticket `t` (queue score `tscore`), which
-- found none free? Among the leases on backends that serve its model and can resume,
-- whose owner reported them preemptible (K.progress: attained output tokens), the one
-- that has run longest past the quantum, paused fewer than max_pauses times, and that
-- `t` may overtake. policy/preemption.py is its twin and says the rule in full.
local function may_overtake(t, tscore, l, attained, D)
  if t.pauses > 0 then
    return false  -- a continuation waits for a free slot (it is first in line by its age)
  end
  if l.tier ~= t.tier then
    return tscore < l.score  -- another tier: only a more urgent one (offsets are in the scores)
  end
  -- the starvation bound, counted from the lease's original arrival; within it, fresh
  -- work goes before work that ran past its quantum (least attained service first)
  return t.arrival <= l.arrival + D.max_slack + CLOCK_SLACK
end

local function pick_victim(K, t, tscore, D)
  local eligible = {}
  for _, name in ipairs(redis.call('SMEMBERS', K.serves(t.model))) do
    if name ~= t.avoid and redis.call('SISMEMBER', K.resume, name) == 1
        and redis.call('SISMEMBER', K.down, name) == 0 then
      eligible[name] = true
    end
  end
  local best, best_attained, best_lease = nil, nil, nil
  local progress = redis.call('HGETALL', K.progress)
  for i = 1, #progress, 2 do
    local lid, attained = progress[i], tonumber(progress[i + 1]) or 0
    if attained > D.quantum and (best == nil or attained > best_attained) then
      local record = redis.call('HGET', K.lease, lid)
      if not record then
        redis.call('HDEL', K.progress, lid)  -- reported after its release: forget it
      else
        local l = parse_lease(record)
        if eligible[l.backend] and l.pauses < D.max_pauses and may_overtake(t, tscore, l, attained, D) then
          best, best_attained, best_lease = lid, attained, l
        end
      end
    end
  end
  return best, best_lease
end

local function grant(K, D, mine, tid, t, score, backend, borrowed, now)
  local lease = {backend = backend, owner = t.owner, predicted = t.predicted, restricted = t.restricted,
                 borrowed = borrowed, class = t.class, score = score, pauses = t.pauses, tier = t.tier,
                 arrival = t.arrival}
  add_lease(K, tid, lease, now + D.lease_ttl)
  redis.call('HINCRBY', K.stats, 'granted', 1)
  notify(K, D.me, mine, t.owner, grant_message(tid, lease))
end

-- Grant queued tickets in score order while capacity lasts. Grants for `me` are
-- returned (the caller delivers them without a round trip); others are pushed. With
-- preemption on, the first fresh ticket of the short or medium class that finds no free
-- slot (after waiting preempt_after seconds) may take a running lease's slot, once per call.
local function dispatch(K, D, now)
  sweep_leases(K, now)
  local mine = {}
  local states, total = backend_states(K)
  -- a pool none of whose backends can resume pauses nothing: no walk of a full queue for it
  local may_preempt = D.preempt and redis.call('SCARD', K.resume) > 0
  if total <= 0 and not may_preempt then
    return mine
  end
  local open_waiting = tonumber(redis.call('HGET', K.stats, 'queued_open') or '0')
  local quiet = redis.call('GET', K.quiet) == '1'
  local owner_alive = {}
  local queued = redis.call('ZRANGE', K.queue, 0, D.max_scan - 1, 'WITHSCORES')
  for i = 1, #queued, 2 do
    if total <= 0 and not may_preempt then
      break
    end
    local tid, score = queued[i], tonumber(queued[i + 1])
    local packed = redis.call('HGET', K.tickets, tid)
    if not packed then
      redis.call('ZREM', K.queue, tid)
    else
      local t = parse_ticket(packed)
      local alive = owner_alive[t.owner]
      if alive == nil then
        alive = tonumber(redis.call('ZSCORE', K.owners, t.owner) or '0') >= now
        owner_alive[t.owner] = alive
      end
      if not alive then
        -- its client connection died with its replica: nobody to answer, drop it
        drop_ticket(K, tid, t)
        if not t.restricted then
          open_waiting = open_waiting - 1
        end
      elseif t.deadline > 0 and t.deadline < now then
        drop_ticket(K, tid, t)
        if not t.restricted then
          open_waiting = open_waiting - 1
        end
        notify(K, D.me, mine, t.owner, evict_message(tid, 'deadline'))
      else
        local backend, borrowed = nil, false
        if total > 0 then
          backend, borrowed = pick_backend(K, t, states, open_waiting, quiet)
        end
        if backend then
          took_slot(states, backend, t)
          total = total - 1
        elseif may_preempt and t.pauses == 0 and t.class ~= 'long'
            and now - t.arrival >= D.preempt_after - CLOCK_SLACK then
          may_preempt = false  -- one try per call bounds the script's work
          local victim, vl = pick_victim(K, t, score, D)
          if victim then
            drop_lease(K, victim)
            redis.call('HINCRBY', K.stats, 'paused', 1)
            notify(K, D.me, mine, vl.owner, pause_message(victim, vl.backend))
            backend = vl.backend
          end
        end
        if backend then
          drop_ticket(K, tid, t)
          if not t.restricted then
            open_waiting = open_waiting - 1
          end
          grant(K, D, mine, tid, t, score, backend, borrowed, now)
        end
      end
    end
  end
  return mine
end

-- Prove `me` alive. The epoch marks this Redis's life: when it is missing, Redis
-- lost its data (restart without persistence) and replicas must queue their waiters again.
local function heartbeat(K, me, ttl, now)
  redis.call('ZADD', K.owners, now + ttl, me)
  redis.call('SET', K.epoch, tostring(now), 'NX')
end
