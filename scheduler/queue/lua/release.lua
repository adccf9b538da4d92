-- Release a lease (its request finished) and dispatch into the freed slot.
-- KEYS[1]: pool base. ARGV: me, lease id, lease_ttl, owner_ttl, max_scan
-- Returns the grant/eviction messages for me.
local base = KEYS[1]
local me, lid = ARGV[1], ARGV[2]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_s()
heartbeat(base, me, owner_ttl, now)
-- only a lease that still exists holds a slot: releasing twice frees it once
drop_lease(base, lid)
return dispatch(base, me, lease_ttl, max_scan, now)
