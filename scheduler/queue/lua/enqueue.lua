-- Enqueue one ticket and dispatch at once (one round trip on the request path).
-- KEYS[1]: pool base "<prefix>:{<pool>}:q<layout>" (the tag routes the call to the pool's slot)
-- ARGV: the dispatch arguments (dispatch_args), then ticket, model, tenant, class,
--       predicted, timeout_s, tier, slack_s, tier_offset_s, cost_s, max_slack_s,
--       max_queue, max_tenant_queue, avoid, restricted, age_s (how long ago the request
--       arrived: 0 for a new one; a paused request's continuation keeps its arrival), pauses,
--       reach (the backends I registered, "b1|b2", as K.reach holds them; '': read them there)
-- Returns {status, queue_len, msg...}: status 1 = queued (grants for me follow),
--   -1 = pool queue full, -2 = tenant queue full.
--
-- A ticket that would be first in line and finds a slot is granted without being
-- queued (the common, uncontended case: no queue writes, no walk). Every other ticket
-- is queued, then the dispatch walks the queue.
--
-- Idempotent: a client retrying this call after its reply was lost (the connection
-- died under it) gets the same answer. A ticket already granted is granted again in
-- the reply (same lease, no second slot); one already queued stays as it is.
--
-- The score is arrival + min(max_slack, slack + fairness lead) + tier offset, so a
-- ticket is never overtaken by one that arrived more than max_slack (plus the tier
-- gap) after it. The fairness lead is how far this tenant's virtual finish time runs
-- ahead of the slowest other tenant with queued work: a tenant that floods the pool
-- queues behind tenants that don't, and a tenant alone keeps plain short-first order.
local C = context(KEYS[1])
local K, D, me = C.K, C.D, C.me
local a = FIRST_ARG
local tid, model, tenant, class = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
local predicted, timeout, tier = tonumber(ARGV[a + 4]) or 0, tonumber(ARGV[a + 5]), ARGV[a + 6]
local slack, tier_offset, cost = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9])
local max_slack, max_queue, max_tenant = tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11]), tonumber(ARGV[a + 12])
local avoid, restricted = ARGV[a + 13], ARGV[a + 14] == '1'
local pauses = tonumber(ARGV[a + 16]) or 0
if (ARGV[a + 17] or '') ~= '' then
  known_reach(C, me, ARGV[a + 17])
end

C.now = now_s()
local now = C.now
local arrival = now - math.max(0, tonumber(ARGV[a + 15]) or 0)
local qlen = redis.call('ZCARD', K.queue)

local function granted_before()
  local lease = redis.call('HGET', K.lease, tid)
  return lease and {1, qlen, grant_message(tid, lease)}
end

if qlen > 0 and redis.call('HEXISTS', K.tickets, tid) == 1 then
  heartbeat(C)
  dispatch(C)
  return finish(C, {1, qlen})
end
if max_tenant > 0 and qlen > 0 then
  local tq = tonumber(redis.call('HGET', K.tenant_queued, tenant) or '0')
  if tq >= max_tenant then
    return granted_before() or {-2, qlen}
  end
end

-- fairness: virtual finish times of the tenants with queued work (none: alone)
local vkey = K.tenant_vfinish
local floor, mine = nil, 0
if qlen > 0 then
  local others, names = redis.call('HGETALL', K.tenant_queued), {tenant}
  for i = 1, #others, 2 do
    if others[i] ~= tenant and tonumber(others[i + 1]) > 0 then
      names[#names + 1] = others[i]
    end
  end
  local finishes = redis.call('HMGET', vkey, unpack(names))
  for i = 2, #names do
    local f = tonumber(finishes[i] or '0')
    if floor == nil or f < floor then
      floor = f
    end
  end
  mine = tonumber(finishes[1] or '0')
end
local lead = 0
if floor ~= nil then
  if mine < floor then
    mine = floor -- an idle tenant banks no credit
  end
  lead = mine - floor
else
  mine = 0 -- alone: nothing to be fair to
end
local score = arrival + math.min(max_slack, slack + lead) + tier_offset

if max_queue > 0 and qlen >= max_queue then
  -- full: shed the least urgent queued ticket if this one is more urgent
  local worst = redis.call('ZRANGE', K.queue, -1, -1, 'WITHSCORES')
  if #worst == 0 or tonumber(worst[2]) <= score then
    return granted_before() or {-1, qlen}
  end
  local victim = worst[1]
  local packed = redis.call('HGET', K.tickets, victim)
  if packed then
    local t = parse_ticket(packed)
    drop_ticket(K, victim, t, D.fifo_backlog > 0)
    notify(C, t.owner, evict_message(victim, 'shed'))
  else
    redis.call('ZREM', K.queue, victim)
  end
  qlen = qlen - 1
end

local deadline = 0
if timeout > 0 then
  deadline = now + timeout
end
local t = {owner = me, model = model, tenant = tenant, class = class, predicted = predicted,
           deadline = deadline, arrival = arrival, tier = tier, avoid = avoid, restricted = restricted,
           pauses = pauses}

-- first in line: granted at once if a slot is free (the queue before it has had its
-- dispatch, so nothing queued could take the slot it leaves)
local first = qlen == 0
if not first and not arrival_order(C, qlen) then  -- (in arrival order, the queue goes first)
  local head = redis.call('ZRANGE', K.queue, 0, 0, 'WITHSCORES')
  first = #head == 0 or score < tonumber(head[2])
end
if first then
  local backend, borrowed = pick_backend(C, t)
  if backend then
    local lease = lease_of(t, score, backend, borrowed)
    local record = pack_lease(lease)
    if redis.call('HSETNX', K.lease, tid, record) == 0 then
      return granted_before()  -- a retried call: the first grant stands
    end
    if qlen > 0 then
      redis.call('HSET', vkey, tenant, tostring(mine + cost))
    end
    grant(C, tid, lease, record)
    if qlen > 0 and D.preempt and resumable(C) then
      dispatch(C)  -- queued work may be old enough to pause a running lease by now
    end
    return finish(C, {1, qlen})
  end
end

local done = granted_before()
if done then
  return done
end
heartbeat(C)
redis.call('HSET', vkey, tenant, tostring(mine + cost))
if redis.call('HSET', K.tickets, tid, pack_ticket(t)) == 1 then
  redis.call('HINCRBY', K.tenant_queued, tenant, 1)
  if not restricted then
    redis.call('HINCRBY', K.stats, 'queued_open', 1)
  end
end
redis.call('ZADD', K.queue, score, tid)
if D.fifo_backlog > 0 then
  redis.call('ZADD', K.arrivals, arrival + tier_offset, tid)  -- its place in arrival order (tiers kept)
end
qlen = qlen + 1
dispatch(C)
return finish(C, {1, qlen})
