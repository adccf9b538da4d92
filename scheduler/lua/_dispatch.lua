-- Shared by every script that can free capacity or queue work (enqueue, release,
-- heartbeat, backend). It is prepended to those scripts by scripts.py, so each
-- script stays one atomic unit: sweep, then grant as much as capacity allows.
--
-- Ticket layout in P:tickets (fields joined by "|"):
--   owner|model|tenant|class|predicted_tokens|deadline|arrival|tier
-- Grant message pushed to P:inbox:<owner>:  "G|<ticket>|<backend>"
-- Eviction message:                        "E|<ticket>|<reason>"

local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function parse_ticket(packed)
  local f = {}
  local i = 1
  for field in string.gmatch(packed .. '|', '([^|]*)|') do
    f[i] = field
    i = i + 1
  end
  return {owner = f[1], model = f[2], tenant = f[3], class = f[4],
          predicted = tonumber(f[5]), deadline = tonumber(f[6]),
          arrival = tonumber(f[7]), tier = f[8]}
end

-- Expired leases (their owner stopped renewing) give their slot back.
local function sweep_leases(base, now)
  local dead = redis.call('ZRANGEBYSCORE', base .. ':leases', '-inf', now)
  for _, lid in ipairs(dead) do
    local info = redis.call('HGET', base .. ':lease', lid)
    redis.call('ZREM', base .. ':leases', lid)
    redis.call('HDEL', base .. ':lease', lid)
    if info then
      local backend = string.match(info, '^([^|]*)')
      redis.call('HINCRBY', base .. ':busy', backend, -1)
    end
  end
  return #dead
end

local function drop_ticket(base, tid, tenant)
  redis.call('ZREM', base .. ':queue', tid)
  redis.call('HDEL', base .. ':tickets', tid)
  if tenant and redis.call('HINCRBY', base .. ':tenant:queued', tenant, -1) <= 0 then
    redis.call('HDEL', base .. ':tenant:queued', tenant)
  end
end

-- Free slots of every live backend: name -> free count; and the total.
local function free_slots(base)
  local caps = redis.call('HGETALL', base .. ':cap')
  local free, total = {}, 0
  for i = 1, #caps, 2 do
    local name = caps[i]
    if redis.call('SISMEMBER', base .. ':down', name) == 0 then
      local busy = tonumber(redis.call('HGET', base .. ':busy', name) or '0')
      local n = tonumber(caps[i + 1]) - busy
      if n > 0 then
        free[name] = n
        total = total + n
      end
    end
  end
  return free, total
end

-- The backend for a model with the most free share of its limit (ties: first seen).
local function pick_backend(base, model, free)
  local best, best_free = nil, 0
  for _, name in ipairs(redis.call('SMEMBERS', base .. ':serves:' .. model)) do
    local n = free[name]
    if n and n > best_free then
      best, best_free = name, n
    end
  end
  return best
end

-- Grant queued tickets in score order while capacity lasts. Grants for `me` are
-- returned (the caller delivers them without a round trip); others are pushed.
local function dispatch(base, me, lease_ttl, max_scan, now)
  sweep_leases(base, now)
  local mine = {}
  local free, total = free_slots(base)
  if total <= 0 then
    return mine
  end
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
        drop_ticket(base, tid, t.tenant)
      elseif t.deadline > 0 and t.deadline < now then
        drop_ticket(base, tid, t.tenant)
        local msg = 'E|' .. tid .. '|deadline'
        if t.owner == me then
          mine[#mine + 1] = msg
        else
          redis.call('RPUSH', base .. ':inbox:' .. t.owner, msg)
        end
      else
        local backend = pick_backend(base, t.model, free)
        if backend then
          drop_ticket(base, tid, t.tenant)
          free[backend] = free[backend] - 1
          if free[backend] <= 0 then
            free[backend] = nil
          end
          total = total - 1
          redis.call('HINCRBY', base .. ':busy', backend, 1)
          redis.call('ZADD', base .. ':leases', now + lease_ttl, tid)
          redis.call('HSET', base .. ':lease', tid, backend .. '|' .. t.owner)
          redis.call('HINCRBY', base .. ':stats', 'granted', 1)
          local msg = 'G|' .. tid .. '|' .. backend
          if t.owner == me then
            mine[#mine + 1] = msg
          else
            redis.call('RPUSH', base .. ':inbox:' .. t.owner, msg)
          end
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
