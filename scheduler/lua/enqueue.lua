-- Enqueue one ticket and dispatch at once (one round trip on the request path).
-- KEYS[1]: pool base "<prefix>:{<pool>}" (routes the call to the pool's slot)
-- ARGV: me, ticket, model, tenant, class, predicted, timeout_s, tier, slack_s,
--       max_queue, max_tenant_queue, lease_ttl, owner_ttl, max_scan
-- Returns {status, queue_len, msg...}: status 1 = queued (grants for me follow),
--   -1 = pool queue full, -2 = tenant queue full.
local base = KEYS[1]
local me, tid, model, tenant, class = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5]
local predicted, timeout, tier, slack = ARGV[6], tonumber(ARGV[7]), ARGV[8], tonumber(ARGV[9])
local max_queue, max_tenant = tonumber(ARGV[10]), tonumber(ARGV[11])
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])

local now = now_s()
heartbeat(base, me, owner_ttl, now)
local qlen = redis.call('ZCARD', base .. ':queue')
if max_queue > 0 and qlen >= max_queue then
  return {-1, qlen}
end
if max_tenant > 0 then
  local tq = tonumber(redis.call('HGET', base .. ':tenant:queued', tenant) or '0')
  if tq >= max_tenant then
    return {-2, qlen}
  end
end
local deadline = 0
if timeout > 0 then
  deadline = now + timeout
end
local packed = table.concat({me, model, tenant, class, predicted, deadline, now, tier}, '|')
if redis.call('HSET', base .. ':tickets', tid, packed) == 1 then
  redis.call('HINCRBY', base .. ':tenant:queued', tenant, 1)
end
redis.call('ZADD', base .. ':queue', now + slack, tid)
local out = {1, qlen + 1}
for _, msg in ipairs(dispatch(base, me, lease_ttl, max_scan, now)) do
  out[#out + 1] = msg
end
return out
