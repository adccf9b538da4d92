-- Register or update one backend of the pool: its limit, health, routing weight,
-- measured decode speed, the share long work may hold, and its models; then
-- dispatch (new or restored capacity goes to queued work at once).
-- KEYS[1]: pool base. ARGV: me, lease_ttl, owner_ttl, max_scan, backend, limit,
--   down (0/1), weight, speed (tokens/s, 0: unknown), long_cap (slots restricted work
--   may hold), borrow (extra slots it may borrow while open work is quiet), then the
--   models it serves.
local base = KEYS[1]
local me = ARGV[1]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local name, limit, down = ARGV[5], ARGV[6], ARGV[7]
local now = now_s()
heartbeat(base, me, owner_ttl, now)
redis.call('HSET', base .. ':cap', name, limit)
redis.call('HSET', base .. ':weight', name, ARGV[8])
if tonumber(ARGV[9]) > 0 then
  redis.call('HSET', base .. ':speed', name, ARGV[9])
end
redis.call('HSET', base .. ':lcap', name, ARGV[10])
redis.call('HSET', base .. ':borrow', name, ARGV[11])
if down == '1' then
  redis.call('SADD', base .. ':down', name)
else
  redis.call('SREM', base .. ':down', name)
end
for i = 12, #ARGV do
  redis.call('SADD', base .. ':serves:' .. ARGV[i], name)
end
return dispatch(base, me, lease_ttl, max_scan, now)
