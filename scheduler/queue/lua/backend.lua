-- Register or update one backend of the pool: its limit, health, routing weight,
-- measured decode speed, the share long work may hold, whether it can resume a paused
-- generation, and its models; then dispatch (new or restored capacity goes to queued
-- work at once).
-- KEYS[1]: pool base. ARGV: the dispatch arguments (dispatch_args), then backend, limit,
--   down (0/1), weight, speed (tokens/s, 0: unknown), long_cap (slots restricted work
--   may hold), borrow (extra slots it may borrow while open work is quiet), resume (0/1),
--   then the models it serves.
local K = pool_keys(KEYS[1])
local D = dispatch_args()
local a = FIRST_ARG
local name, limit, down = ARGV[a], ARGV[a + 1], ARGV[a + 2]
local now = now_s()
heartbeat(K, D.me, D.owner_ttl, now)
redis.call('HSET', K.cap, name, limit)
redis.call('HSET', K.weight, name, ARGV[a + 3])
if tonumber(ARGV[a + 4]) > 0 then
  redis.call('HSET', K.speed, name, ARGV[a + 4])
end
redis.call('HSET', K.lcap, name, ARGV[a + 5])
redis.call('HSET', K.borrow, name, ARGV[a + 6])
if down == '1' then
  redis.call('SADD', K.down, name)
else
  redis.call('SREM', K.down, name)
end
if ARGV[a + 7] == '1' then
  redis.call('SADD', K.resume, name)
else
  redis.call('SREM', K.resume, name)
end
for i = a + 8, #ARGV do
  redis.call('SADD', K.serves(ARGV[i]), name)
end
return dispatch(K, D, now)
