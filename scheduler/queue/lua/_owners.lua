-- Replicas (owners) as a script sees them: who is alive, which backends each can call,
-- and where a message for each goes. C, the script's context, remembers what it read.

local function context(base)
  local K = pool_keys(base)
  local D = dispatch_args()
  return {K = K, D = D, me = D.me, now = nil, mine = {}, alive = {}, reach = {}, S = slots(K)}
end

-- Is `owner`'s heartbeat current? The caller is alive: it is running this script.
local function owner_alive(C, owner)
  if owner == C.me then
    return true
  end
  local alive = C.alive[owner]
  if alive == nil then
    alive = tonumber(redis.call('ZSCORE', C.K.owners, owner) or '0') >= C.now
    C.alive[owner] = alive
  end
  return alive
end

-- `owner` can call the backends in `packed` ("b1|b2", as K.reach holds them).
local function known_reach(C, owner, packed)
  local known = {}
  for _, name in ipairs(fields(packed)) do
    if name ~= '' then
      known[name] = true
    end
  end
  C.reach[owner] = known
  return known
end

-- The backends `owner` can call (name -> true): those it registered (backend.lua). A
-- grant names only one of them, so replicas with different backend lists (a rolling
-- deploy) share a pool safely.
local function reach(C, owner)
  return C.reach[owner] or known_reach(C, owner, redis.call('HGET', C.K.reach, owner) or '')
end

-- A message for `owner`: mine come back in the reply, a live replica's go to its inbox,
-- and a dead one's nowhere (nothing would ever read them).
local function notify(C, owner, msg)
  if owner == C.me then
    C.mine[#C.mine + 1] = msg
  elseif owner_alive(C, owner) then
    redis.call('RPUSH', C.K.inbox(owner), msg)
  end
end

-- Prove `me` alive. The epoch marks this Redis's life: when it is missing, Redis
-- lost its data (restart without persistence) and replicas must queue their waiters again.
local function heartbeat(C)
  redis.call('ZADD', C.K.owners, C.now + C.D.owner_ttl, C.me)
  redis.call('SET', C.K.epoch, tostring(C.now), 'NX')
end

-- Leases whose owner stopped beating: each lapses once its owner's last heartbeat
-- (its score in K.owners, less owner_ttl) is older than a lease lives, and gives its slot
-- back. An owner that is not in K.owners (it never beat, or it was buried) holds nothing.
-- `flat`: K.lease as HGETALL returned it. Returns the leases left: id -> record.
local function lapse_leases(C, flat)
  local left, lapsed = {}, {}
  local cutoff = C.now - C.D.lease_ttl + C.D.owner_ttl
  for i = 1, #flat, 2 do
    local lid, record = flat[i], flat[i + 1]
    local owner = lease_owner(record)
    local gone = lapsed[owner]
    if gone == nil then
      gone = owner ~= C.me and tonumber(redis.call('ZSCORE', C.K.owners, owner) or '0') < cutoff
      lapsed[owner] = gone
    end
    if gone then
      drop_lease(C, lid, record)
    else
      left[lid] = record
    end
  end
  return left
end

-- Replicas whose heartbeat expired longer ago than a lease lives: their leases have
-- lapsed by then (lapse_leases runs first), and their inbox and backend list are deleted.
-- A replica that only looked dead comes back with its next heartbeat, which recreates
-- the leases it still holds and reports its lost tickets, to be queued again. Backends
-- no live replica can call and no lease holds are forgotten too.
local function bury_dead_owners(C)
  local dead = redis.call('ZRANGEBYSCORE', C.K.owners, '-inf', '(' .. (C.now - C.D.lease_ttl))
  local buried = 0
  for _, owner in ipairs(dead) do
    if owner ~= C.me then
      redis.call('DEL', C.K.inbox(owner))
      redis.call('HDEL', C.K.reach, owner)
      redis.call('ZREM', C.K.owners, owner)
      buried = buried + 1
    end
  end
  if buried > 0 then
    local known = {}
    local flat = redis.call('HGETALL', C.K.reach)
    for i = 2, #flat, 2 do
      for _, name in ipairs(fields(flat[i])) do
        known[name] = true
      end
    end
    for name, b in pairs(all_slots(C.S)) do
      if not known[name] and b.busy <= 0 then
        redis.call('HDEL', C.K.backends, name)
        C.S.recs[name], C.S.dirty[name] = nil, nil
      end
    end
  end
  return buried
end
