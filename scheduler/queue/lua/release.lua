-- Release a lease (its request finished) and dispatch into the freed slot.
-- KEYS[1]: pool base. ARGV: me, lease id, lease_ttl, owner_ttl, max_scan
-- Returns the grant/eviction messages for me.
local K = pool_keys(KEYS[1])
local me, lid = ARGV[1], ARGV[2]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_s()
heartbeat(K, me, owner_ttl, now)
drop_lease(K, lid)
return dispatch(K, me, lease_ttl, max_scan, now)
