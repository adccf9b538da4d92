-- Shared by every script that can free capacity or queue work (enqueue, release,
-- heartbeat, backend). It is prepended to those scripts by scripts.py, so each
-- script stays one atomic unit: sweep, then grant as much as capacity allows.
--
-- Ticket in P:tickets (fields joined by "|"):
--   owner|model|tenant|class|predicted|deadline|arrival|tier|avoid|restricted
--   avoid: a backend not to use (a retry after it failed); restricted: 1 for long or
--   batch work, which may hold only P:lcap[backend] slots of a backend (reservation).
-- Lease in P:lease: backend|owner|predicted|restricted|borrowed; its id is also in
--   P:owned:<owner>, so a replica can find grants it was never told of.
-- Grant message pushed to P:inbox:<owner>:  "G|<ticket>|<backend>|<borrowed 0/1>"
-- Eviction message:                        "E|<ticket>|<reason>"

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

local function parse_ticket(packed)
  local f = fields(packed)
  return {owner = f[1], model = f[2], tenant = f[3], class = f[4],
          predicted = tonumber(f[5]) or 0, deadline = tonumber(f[6]) or 0,
          arrival = tonumber(f[7]) or 0, tier = f[8], avoid = f[9] or '',
          restricted = f[10] == '1'}
end

-- The grant message of an existing lease (told again: a reply carrying it was lost).
local function grant_message(lid, record)
  local f = fields(record)
  return 'G|' .. lid .. '|' .. f[1] .. '|' .. f[5]
end

-- Give back the slot a lease holds, with its share of outstanding work.
local function drop_lease(base, lid)
  local info = redis.call('HGET', base .. ':lease', lid)
  redis.call('ZREM', base .. ':leases', lid)
  if not info then
    return false
  end
  redis.call('HDEL', base .. ':lease', lid)
  local f = fields(info)
  local backend = f[1]
  redis.call('SREM', base .. ':owned:' .. f[2], lid)
  redis.call('HINCRBY', base .. ':busy', backend, -1)
  redis.call('HINCRBYFLOAT', base .. ':work', backend, -(tonumber(f[3]) or 0))
  if f[4] == '1' then
    redis.call('HINCRBY', base .. ':lbusy', backend, -1)
  end
  if f[5] == '1' then
    redis.call('HINCRBY', base .. ':borrowed', backend, -1)
  end
  return true
end

-- Expired leases (their owner stopped renewing) give their slot back.
local function sweep_leases(base, now)
  local dead = redis.call('ZRANGEBYSCORE', base .. ':leases', '-inf', now)
  for _, lid in ipairs(dead) do
    drop_lease(base, lid)
  end
  return #dead
end

local function drop_ticket(base, tid, t)
  redis.call('ZREM', base .. ':queue', tid)
  redis.call('HDEL', base .. ':tickets', tid)
  if t then
    if redis.call('HINCRBY', base .. ':tenant:queued', t.tenant, -1) <= 0 then
      redis.call('HDEL', base .. ':tenant:queued', t.tenant)
    end
    if not t.restricted then
      redis.call('HINCRBY', base .. ':stats', 'queued_open', -1)
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
local function backend_states(base)
  local caps = hash_table(base .. ':cap')
  local busy = hash_table(base .. ':busy')
  local work = hash_table(base .. ':work')
  local speed = hash_table(base .. ':speed')
  local weight = hash_table(base .. ':weight')
  local lcap = hash_table(base .. ':lcap')
  local lbusy = hash_table(base .. ':lbusy')
  local borrow = hash_table(base .. ':borrow')
  local states, total = {}, 0
  for name, cap in pairs(caps) do
    if redis.call('SISMEMBER', base .. ':down', name) == 0 then
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
local function pick_backend(base, t, states, open_waiting, quiet)
  local best, best_load, best_busy, best_borrowed = nil, nil, nil, false
  for _, name in ipairs(redis.call('SMEMBERS', base .. ':serves:' .. t.model)) do
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

local function take_slot(base, states, backend, t, borrowed)
  local s = states[backend]
  s.free, s.busy, s.work = s.free - 1, s.busy + 1, s.work + t.predicted
  if s.free <= 0 then
    states[backend] = nil
  end
  redis.call('HINCRBY', base .. ':busy', backend, 1)
  redis.call('HINCRBYFLOAT', base .. ':work', backend, t.predicted)
  if t.restricted then
    s.lbusy = s.lbusy + 1
    redis.call('HINCRBY', base .. ':lbusy', backend, 1)
  end
  if borrowed then
    redis.call('HINCRBY', base .. ':borrowed', backend, 1)
  end
end

local function notify(base, me, mine, owner, msg)
  if owner == me then
    mine[#mine + 1] = msg
  else
    redis.call('RPUSH', base .. ':inbox:' .. owner, msg)
  end
end

-- Grant queued tickets in score order while capacity lasts. Grants for `me` are
-- returned (the caller delivers them without a round trip); others are pushed.
local function dispatch(base, me, lease_ttl, max_scan, now)
  sweep_leases(base, now)
  local mine = {}
  local states, total = backend_states(base)
  if total <= 0 then
    return mine
  end
  local open_waiting = tonumber(redis.call('HGET', base .. ':stats', 'queued_open') or '0')
  local quiet = redis.call('GET', base .. ':quiet') == '1'
  local owners_key = base .. ':owners'
  local owner_alive = {}
  local tids = redis.call('ZRANGE', base .. ':queue', 0, max_scan - 1)
  for _, tid in ipairs(tids) do
    if total <= 0 then
      break
    end
    local packed = redis.call('HGET', base .. ':tickets', tid)
    if not packed then
      redis.call('ZREM', base .. ':queue', tid)
    else
      local t = parse_ticket(packed)
      local alive = owner_alive[t.owner]
      if alive == nil then
        alive = tonumber(redis.call('ZSCORE', owners_key, t.owner) or '0') >= now
        owner_alive[t.owner] = alive
      end
      if not alive then
        -- its client connection died with its replica: nobody to answer, drop it
        drop_ticket(base, tid, t)
        if not t.restricted then
          open_waiting = open_waiting - 1
        end
      elseif t.deadline > 0 and t.deadline < now then
        drop_ticket(base, tid, t)
        if not t.restricted then
          open_waiting = open_waiting - 1
        end
        notify(base, me, mine, t.owner, 'E|' .. tid .. '|deadline')
      else
        local backend, borrowed = pick_backend(base, t, states, open_waiting, quiet)
        if backend then
          drop_ticket(base, tid, t)
          if not t.restricted then
            open_waiting = open_waiting - 1
          end
          take_slot(base, states, backend, t, borrowed)
          total = total - 1
          local restricted = t.restricted and '1' or '0'
          redis.call('ZADD', base .. ':leases', now + lease_ttl, tid)
          redis.call('HSET', base .. ':lease', tid, table.concat(
            {backend, t.owner, t.predicted, restricted, borrowed and '1' or '0'}, '|'))
          redis.call('SADD', base .. ':owned:' .. t.owner, tid)
          redis.call('HINCRBY', base .. ':stats', 'granted', 1)
          notify(base, me, mine, t.owner, 'G|' .. tid .. '|' .. backend .. '|' .. (borrowed and '1' or '0'))
        end
      end
    end
  end
  return mine
end

-- Prove `me` alive. The epoch marks this Redis's life: when it is missing, Redis
-- lost its data (restart without persistence) and replicas must queue their waiters again.
local function heartbeat(base, me, ttl, now)
  redis.call('ZADD', base .. ':owners', now + ttl, me)
  redis.call('SET', base .. ':epoch', tostring(now), 'NX')
end
