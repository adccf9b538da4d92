-- Release a lease (its request finished) and dispatch into the freed slot.
-- KEYS[1]: pool base. ARGV: me, lease id, lease_ttl, owner_ttl, max_scan
-- Returns the grant/eviction messages for me.
local base = KEYS[1]
local me, lid = ARGV[1], ARGV[2]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_s()
heartbeat(base, me, owner_ttl, now)
local info = redis.call('HGET', base .. ':lease', lid)
if info then
  redis.call('ZREM', base .. ':leases', lid)
  redis.call('HDEL', base .. ':lease', lid)
  local backend = string.match(info, '^([^|]*)')
  -- only a lease that still existed held a slot: never decrement twice
  redis.call('HINCRBY', base .. ':busy', backend, -1)
end
return dispatch(base, me, lease_ttl, max_scan, now)
