-- Enqueue one ticket and dispatch at once (one round trip on the request path).
-- KEYS[1]: pool base "<prefix>:{<pool>}" (routes the call to the pool's slot)
-- ARGV: the dispatch arguments (dispatch_args), then ticket, model, tenant, class,
--       predicted, timeout_s, tier, slack_s, tier_offset_s, cost_s, max_slack_s,
--       max_queue, max_tenant_queue, avoid, restricted, age_s (how long ago the request
--       arrived: 0 for a new one; a paused request's continuation keeps its arrival), pauses
-- Returns {status, queue_len, msg...}: status 1 = queued (grants for me follow),
--   -1 = pool queue full, -2 = tenant queue full.
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
local K = pool_keys(KEYS[1])
local D = dispatch_args()
local a = FIRST_ARG
local me = D.me
local tid, model, tenant, class = ARGV[a], ARGV[a + 1], ARGV[a + 2], ARGV[a + 3]
local predicted, timeout, tier = ARGV[a + 4], tonumber(ARGV[a + 5]), ARGV[a + 6]
local slack, tier_offset, cost = tonumber(ARGV[a + 7]), tonumber(ARGV[a + 8]), tonumber(ARGV[a + 9])
local max_slack, max_queue, max_tenant = tonumber(ARGV[a + 10]), tonumber(ARGV[a + 11]), tonumber(ARGV[a + 12])
local avoid, restricted = ARGV[a + 13], ARGV[a + 14]
local pauses = tonumber(ARGV[a + 16]) or 0

local now = now_s()
local arrival = now - math.max(0, tonumber(ARGV[a + 15]) or 0)
heartbeat(K, me, D.owner_ttl, now)
local lease = redis.call('HGET', K.lease, tid)
if lease then
  return {1, redis.call('ZCARD', K.queue), grant_message(tid, parse_lease(lease))}
end
if redis.call('HEXISTS', K.tickets, tid) == 1 then
  local out = {1, redis.call('ZCARD', K.queue)}
  for _, msg in ipairs(dispatch(K, D, now)) do
    out[#out + 1] = msg
  end
  return out
end
local queued_key = K.tenant_queued
if max_tenant > 0 then
  local tq = tonumber(redis.call('HGET', queued_key, tenant) or '0')
  if tq >= max_tenant then
    return {-2, redis.call('ZCARD', K.queue)}
  end
end

-- fairness: virtual finish times of the tenants with queued work
local vkey = K.tenant_vfinish
local floor = nil
local queued = redis.call('HGETALL', queued_key)
for i = 1, #queued, 2 do
  if queued[i] ~= tenant and tonumber(queued[i + 1]) > 0 then
    local f = tonumber(redis.call('HGET', vkey, queued[i]) or '0')
    if floor == nil or f < floor then
      floor = f
    end
  end
end
local mine = tonumber(redis.call('HGET', vkey, tenant) or '0')
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

local qlen = redis.call('ZCARD', K.queue)
if max_queue > 0 and qlen >= max_queue then
  -- full: shed the least urgent queued ticket if this one is more urgent
  local worst = redis.call('ZRANGE', K.queue, -1, -1, 'WITHSCORES')
  if #worst == 0 or tonumber(worst[2]) <= score then
    return {-1, qlen}
  end
  local victim = worst[1]
  local packed = redis.call('HGET', K.tickets, victim)
  if packed then
    local t = parse_ticket(packed)
    drop_ticket(K, victim, t)
    redis.call('RPUSH', K.inbox(t.owner), evict_message(victim, 'shed'))
  else
    redis.call('ZREM', K.queue, victim)
  end
  qlen = qlen - 1
end

redis.call('HSET', vkey, tenant, tostring(mine + cost))
local deadline = 0
if timeout > 0 then
  deadline = now + timeout
end
local packed = pack_ticket({owner = me, model = model, tenant = tenant, class = class, predicted = predicted,
                            deadline = deadline, arrival = arrival, tier = tier, avoid = avoid,
                            restricted = restricted == '1', pauses = pauses})
if redis.call('HSET', K.tickets, tid, packed) == 1 then
  redis.call('HINCRBY', queued_key, tenant, 1)
  if restricted ~= '1' then
    redis.call('HINCRBY', K.stats, 'queued_open', 1)
  end
end
redis.call('ZADD', K.queue, score, tid)
local out = {1, qlen + 1}
for _, msg in ipairs(dispatch(K, D, now)) do
  out[#out + 1] = msg
end
return out
