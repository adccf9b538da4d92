-- Release a lease (its request finished) and dispatch into the freed slot.
-- KEYS[1]: pool base. ARGV: the dispatch arguments (dispatch_args), then the lease id.
-- Returns the grant/eviction messages for me.
local K = pool_keys(KEYS[1])
local D = dispatch_args()
local lid = ARGV[FIRST_ARG]
local now = now_s()
heartbeat(K, D.me, D.owner_ttl, now)
drop_lease(K, lid)
return dispatch(K, D, now)
