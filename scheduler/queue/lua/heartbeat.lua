-- A replica's periodic tick: prove it is alive, renew its leases, and dispatch
-- (so slots of a dead replica's expired leases go to queued work without traffic).
-- KEYS[1]: pool base. ARGV: me, lease_ttl, owner_ttl, max_scan, quiet (0/1: the open
--   class has had no recent arrivals), then for every lease this replica holds:
--   lease id, its lease record (backend|owner|predicted|restricted|borrowed).
-- A lease missing here (Redis restarted and lost it) is recreated with its slot,
-- so the busy count again matches the requests really running. A lease of this
-- replica missing from its list is a grant it was never told of (the reply that
-- carried it was lost with its connection): it is renewed and told again, so the
-- waiter gets it, or the replica releases it.
-- Returns {epoch, tickets granted so far in the pool, messages for me...}.
local base = KEYS[1]
local me = ARGV[1]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_s()
heartbeat(base, me, owner_ttl, now)
if ARGV[5] == '1' then
  redis.call('SET', base .. ':quiet', '1', 'PX', math.floor(owner_ttl * 1000))
else
  redis.call('DEL', base .. ':quiet')
end
local held = {}
for i = 6, #ARGV, 2 do
  local lid, record = ARGV[i], ARGV[i + 1]
  held[lid] = true
  if not redis.call('ZSCORE', base .. ':leases', lid) then
    local f = fields(record)
    redis.call('HSET', base .. ':lease', lid, record)
    redis.call('HINCRBY', base .. ':busy', f[1], 1)
    redis.call('HINCRBYFLOAT', base .. ':work', f[1], tonumber(f[3]) or 0)
    if f[4] == '1' then
      redis.call('HINCRBY', base .. ':lbusy', f[1], 1)
    end
    if f[5] == '1' then
      redis.call('HINCRBY', base .. ':borrowed', f[1], 1)
    end
    redis.call('SADD', base .. ':owned:' .. me, lid)
  end
  redis.call('ZADD', base .. ':leases', now + lease_ttl, lid)
end
local out = {redis.call('GET', base .. ':epoch'), redis.call('HGET', base .. ':stats', 'granted') or '0'}
for _, lid in ipairs(redis.call('SMEMBERS', base .. ':owned:' .. me)) do
  if not held[lid] then
    local record = redis.call('HGET', base .. ':lease', lid)
    if record then
      redis.call('ZADD', base .. ':leases', now + lease_ttl, lid)
      out[#out + 1] = grant_message(lid, record)
    else
      redis.call('SREM', base .. ':owned:' .. me, lid)
    end
  end
end
for _, msg in ipairs(dispatch(base, me, lease_ttl, max_scan, now)) do
  out[#out + 1] = msg
end
return out
