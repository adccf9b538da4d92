-- One replica publishes its stats window for the cluster-wide view; windows of replicas
-- that stopped publishing drop out of the list when their TTL passes.
-- KEYS[1]: replicas (zset: replica -> expiry), KEYS[2]: this replica's window (string).
-- ARGV[1]: replica id, ARGV[2]: window (JSON), ARGV[3]: TTL (seconds).
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ttl = tonumber(ARGV[3])
redis.call('SET', KEYS[2], ARGV[2], 'PX', math.ceil(ttl * 1000))
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
redis.call('PEXPIRE', KEYS[1], math.ceil(ttl * 1000))
return 1
