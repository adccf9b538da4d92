-- Keys created through the admin API. Only a key's SHA-256 is stored, with its record
-- (id, tenant, tier, admin, quotas: JSON written by scheduler/keystore.py).
-- KEYS[1]: hash (sha256 -> record), KEYS[2]: ids (id -> sha256), KEYS[3]: version.
-- ARGV: 'create', id, sha256, record  |  'revoke', id
-- Returns the new version (replicas reload their copy when it changes), or 0 when
-- nothing changed (create: the id or hash exists; revoke: no such id).
if ARGV[1] == 'create' then
  if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 1 or redis.call('HEXISTS', KEYS[1], ARGV[3]) == 1 then
    return 0
  end
  redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
  redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
  return redis.call('INCR', KEYS[3])
end
local digest = redis.call('HGET', KEYS[2], ARGV[2])
if not digest then
  return 0
end
redis.call('HDEL', KEYS[1], digest)
redis.call('HDEL', KEYS[2], ARGV[2])
return redis.call('INCR', KEYS[3])
