-- A replica's periodic tick: prove it is alive, renew its leases, and dispatch
-- (so slots of a dead replica's expired leases go to queued work without traffic).
-- KEYS[1]: pool base. ARGV: me, lease_ttl, owner_ttl, max_scan, then pairs of
--   lease id, backend for every lease this replica holds.
-- A lease missing here (Redis restarted and lost it) is recreated with its slot,
-- so the busy count again matches the requests really running.
-- Returns {epoch, tickets granted so far in the pool, messages for me...}.
local base = KEYS[1]
local me = ARGV[1]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_s()
heartbeat(base, me, owner_ttl, now)
for i = 5, #ARGV, 2 do
  local lid, backend = ARGV[i], ARGV[i + 1]
  if redis.call('ZSCORE', base .. ':leases', lid) then
    redis.call('ZADD', base .. ':leases', now + lease_ttl, lid)
  else
    redis.call('ZADD', base .. ':leases', now + lease_ttl, lid)
    redis.call('HSET', base .. ':lease', lid, backend .. '|' .. me)
    redis.call('HINCRBY', base .. ':busy', backend, 1)
  end
end
local out = {redis.call('GET', base .. ':epoch'), redis.call('HGET', base .. ':stats', 'granted') or '0'}
for _, msg in ipairs(dispatch(base, me, lease_ttl, max_scan, now)) do
  out[#out + 1] = msg
end
return out
