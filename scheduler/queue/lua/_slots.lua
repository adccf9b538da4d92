-- The pool's backends as one script sees them, and the one place a slot is taken or
-- given back. A script reads K.backends once (all of it for a dispatch, one field when
-- a release finds the queue empty), changes its own copy, and writes back only the
-- backends it changed, with one HSET, when it ends (flush).

local function slots(K)
  return {K = K, recs = {}, all = false, dirty = {}}
end

-- One backend's state (a backend with no record yet reads as limit 0).
local function slot(S, name)
  local b = S.recs[name]
  if b == nil then
    local packed = nil
    if not S.all then
      packed = redis.call('HGET', S.K.backends, name)
    end
    b = parse_backend(packed or '')
    S.recs[name] = b
  end
  return b
end

-- Every backend's state: name -> state.
local function all_slots(S)
  if not S.all then
    local flat = redis.call('HGETALL', S.K.backends)
    for i = 1, #flat, 2 do
      if S.recs[flat[i]] == nil then
        S.recs[flat[i]] = parse_backend(flat[i + 1])
      end
    end
    S.all = true
  end
  return S.recs
end

local function touch(S, name)
  S.dirty[name] = true
end

local function flush(S)
  local args = {}
  for name in pairs(S.dirty) do
    args[#args + 1] = name
    args[#args + 1] = pack_backend(S.recs[name])
  end
  if #args > 0 then
    redis.call('HSET', S.K.backends, unpack(args))
  end
  S.dirty = {}
end

local function free_slots(b)
  if b.down then
    return 0
  end
  return b.limit - b.busy
end

-- Count lease `l`'s slot (and its share of outstanding work) on its backend.
local function count_lease(S, l, sign)
  local b = slot(S, l.backend)
  b.busy = b.busy + sign
  b.work = b.work + sign * l.predicted
  if l.restricted then
    b.lbusy = b.lbusy + sign
  end
  if l.borrowed then
    b.borrowed = b.borrowed + sign
  end
  touch(S, l.backend)
  return b
end

-- Record lease `lid` (`l`, packed as `record`) and count its slot. `written`: the caller
-- already wrote the record (HSETNX). A lease lives until it is released, or until its
-- owner's heartbeat is older than a lease lives (lapse_leases): the owner renews all its
-- leases at once by beating, so no lease has an expiry of its own.
local function add_lease(C, lid, l, record, written)
  if not written then
    redis.call('HSET', C.K.lease, lid, record)
  end
  count_lease(C.S, l, 1)
end

-- Give back the slot a lease holds. Only a lease that still exists holds one, so
-- dropping twice frees it once. `known`: its record as the caller holds it (the owner
-- keeps the one its grant carried, and no script rewrites a lease): then it is not read
-- back, and whether the lease still existed is what HDEL says. Returns the lease it was, or nil.
local function drop_lease(C, lid, known)
  local record = known
  if record then
    if redis.call('HDEL', C.K.lease, lid) == 0 then
      record = nil
    end
  else
    record = redis.call('HGET', C.K.lease, lid)
    if record then
      redis.call('HDEL', C.K.lease, lid)
    end
  end
  if not record then
    return nil
  end
  local l = parse_lease(record)
  if count_lease(C.S, l, -1).resume then
    redis.call('HDEL', C.K.progress, lid)  -- only leases on such backends report progress
  end
  return l
end

-- `arrivals`: the ticket may be in K.arrivals too (kept while fifo_backlog is on).
local function drop_ticket(K, tid, t, arrivals)
  redis.call('ZREM', K.queue, tid)
  if arrivals then
    redis.call('ZREM', K.arrivals, tid)
  end
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
