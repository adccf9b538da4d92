-- Quota admission: check every limit of a request's two scopes (its tenant, its key),
-- then charge them all, or none. Requests and tokens per minute are leaky buckets that
-- drain at limit / 60 per second; concurrency counts the scope's running requests.
-- KEYS: per scope (tenant, then key): its bucket hash (r: requests held, t: tokens held,
--   ra, ta: server time each was last brought up to date), its running zset (request id -> expiry).
-- ARGV[1]: request id; ARGV[2]: tokens to reserve (settled by quota_settle.lua);
--   ARGV[3]: seconds a running entry lives unless renewed; then per scope:
--   requests per minute, tokens per minute, concurrent (0: that limit is off).
-- Returns {allowed 1/0/-1 (-1: the reservation exceeds the tokens limit itself),
--   failed scope (1 tenant, 2 key, 0 none), failed limit (requests|tokens|concurrent|''),
--   retry after (ms), then per scope: requests limit, remaining, reset (ms),
--   tokens limit, remaining, reset (ms), running}.
-- An id already running in the tenant's set (the reply of an earlier call was lost) is
-- answered as admitted without charging again.
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local id, cost, hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local WINDOW = 60.0

local scopes = {}
for s = 1, 2 do
  local a = 4 + (s - 1) * 3
  local sc = {bucket = KEYS[2 * s - 1], running = KEYS[2 * s], rpm = tonumber(ARGV[a]),
              tpm = tonumber(ARGV[a + 1]), conc = tonumber(ARGV[a + 2])}
  local held = redis.call('HMGET', sc.bucket, 'r', 'ra', 't', 'ta')
  sc.r = tonumber(held[1]) or 0
  sc.t = tonumber(held[3]) or 0
  if sc.rpm > 0 then sc.r = math.max(0, sc.r - math.max(0, now - (tonumber(held[2]) or now)) * sc.rpm / WINDOW) end
  if sc.tpm > 0 then sc.t = math.max(0, sc.t - math.max(0, now - (tonumber(held[4]) or now)) * sc.tpm / WINDOW) end
  redis.call('ZREMRANGEBYSCORE', sc.running, '-inf', now)
  sc.n = redis.call('ZCARD', sc.running)
  scopes[s] = sc
end

local again = redis.call('ZSCORE', scopes[1].running, id) ~= false
local allowed, failed, which, retry = 1, 0, '', 0
if not again then
  for s = 1, 2 do
    local sc = scopes[s]
    if sc.tpm > 0 and cost > sc.tpm then
      allowed, failed, which, retry = -1, s, 'tokens', 0
      break
    end
    local wait, what = 0, ''
    if sc.rpm > 0 and sc.r + 1 > sc.rpm then
      wait, what = (sc.r + 1 - sc.rpm) * WINDOW / sc.rpm, 'requests'
    end
    if sc.tpm > 0 and sc.t + cost > sc.tpm then
      local w = (sc.t + cost - sc.tpm) * WINDOW / sc.tpm
      if w > wait then wait, what = w, 'tokens' end
    end
    if sc.conc > 0 and sc.n + 1 > sc.conc and what == '' then
      wait, what = 1, 'concurrent'  -- a running request ends when it ends: ask again soon
    end
    if what ~= '' and (allowed == 1 or wait > retry / 1000) then
      allowed, failed, which, retry = 0, s, what, math.ceil(wait * 1000)
    end
  end
end

if allowed == 1 and not again then
  for s = 1, 2 do
    local sc = scopes[s]
    if sc.rpm > 0 then sc.r = sc.r + 1 end
    if sc.tpm > 0 then sc.t = sc.t + cost end
    redis.call('HSET', sc.bucket, 'r', sc.r, 'ra', now, 't', sc.t, 'ta', now)
    -- idle, a bucket empties within a window (more, when tokens ran into debt)
    redis.call('PEXPIRE', sc.bucket, math.ceil((WINDOW + 1) * 1000 * math.max(1, sc.t / math.max(1, sc.tpm))))
    redis.call('ZADD', sc.running, now + hold, id)
    redis.call('PEXPIRE', sc.running, math.ceil(hold * 2000))
    sc.n = sc.n + 1
  end
end

local out = {allowed, failed, which, retry}
for s = 1, 2 do
  local sc = scopes[s]
  local rreset = sc.rpm > 0 and math.ceil(sc.r * WINDOW / sc.rpm * 1000) or 0
  local treset = sc.tpm > 0 and math.ceil(sc.t * WINDOW / sc.tpm * 1000) or 0
  out[#out + 1] = sc.rpm
  out[#out + 1] = math.max(0, math.floor(sc.rpm - sc.r))
  out[#out + 1] = rreset
  out[#out + 1] = sc.tpm
  out[#out + 1] = math.max(0, math.floor(sc.tpm - sc.t))
  out[#out + 1] = treset
  out[#out + 1] = sc.n
end
return out
