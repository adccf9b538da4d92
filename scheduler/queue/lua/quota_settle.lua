-- A request admitted by quota.lua has ended: it stops counting as running, and its
-- tokens reservation is replaced by the real count (the difference is added to each
-- tokens bucket, after it drained; a bucket never goes below empty).
-- KEYS: as quota.lua (per scope: bucket, running). ARGV[1]: request id; ARGV[2]: real
--   tokens minus reserved tokens; ARGV[3], ARGV[4]: tokens per minute of each scope (0: off).
-- Returns 1, or 0 if the request was not running (settled already, or its entry expired
-- while its replica was silent): then nothing changes, so settling twice is harmless.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id, delta = ARGV[1], tonumber(ARGV[2])
if redis.call('ZREM', KEYS[2], id) == 0 then
  return 0
end
redis.call('ZREM', KEYS[4], id)
for s = 1, 2 do
  local tpm = tonumber(ARGV[2 + s])
  if tpm > 0 and delta ~= 0 then
    local bucket = KEYS[2 * s - 1]
    local held = redis.call('HMGET', bucket, 't', 'ta')
    local level = tonumber(held[1]) or 0
    local elapsed = math.max(0, now - (tonumber(held[2]) or now))
    level = math.max(0, level - elapsed * tpm / 60.0 + delta)
    redis.call('HSET', bucket, 't', level, 'ta', now)
    redis.call('PEXPIRE', bucket, math.ceil(61000 * math.max(1, level / tpm)))
  end
end
return 1
