-- Register or update one backend of the pool: its limit, health, routing weight,
-- measured decode speed, the share long work may hold, and its models; then
-- dispatch (new or restored capacity goes to queued work at once).
-- KEYS[1]: pool base. ARGV: me, lease_ttl, owner_ttl, max_scan, backend, limit,
--   down (0/1), weight, speed (tokens/s, 0: unknown), long_cap (slots restricted work
--   may hold), borrow (extra slots it may borrow while open work is quiet), then the
--   models it serves.
local K = pool_keys(KEYS[1])
local me = ARGV[1]
local lease_ttl, owner_ttl, max_scan = tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4])
local name, limit, down = ARGV[5], ARGV[6], ARGV[7]
local now = now_s()
heartbeat(K, me, owner_ttl, now)
redis.call('HSET', K.cap, name, limit)
redis.call('HSET', K.weight, name, ARGV[8])
if tonumber(ARGV[9]) > 0 then
  redis.call('HSET', K.speed, name, ARGV[9])
end
redis.call('HSET', K.lcap, name, ARGV[10])
redis.call('HSET', K.borrow, name, ARGV[11])
if down == '1' then
  redis.call('SADD', K.down, name)
else
  redis.call('SREM', K.down, name)
end
for i = 12, #ARGV do
  redis.call('SADD', K.serves(ARGV[i]), name)
end
return dispatch(K, me, lease_ttl, max_scan, now)
