-- A replica's requests are still running: push their entries' expiry forward, so a
-- replica that dies stops holding concurrency after at most one hold period.
-- KEYS: running zsets of one tenant (its own and its keys'). ARGV[1]: hold (seconds);
--   ARGV[2..]: request ids. Only entries already present are renewed (ZADD XX).
local t = redis.call('TIME')
local expiry = tonumber(t[1]) + tonumber(t[2]) / 1000000 + tonumber(ARGV[1])
for _, key in ipairs(KEYS) do
  for i = 2, #ARGV do
    redis.call('ZADD', key, 'XX', expiry, ARGV[i])
  end
  redis.call('PEXPIRE', key, math.ceil(tonumber(ARGV[1]) * 2000))
end
return 1
