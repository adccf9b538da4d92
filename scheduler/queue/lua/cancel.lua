-- Take a ticket out of the queue (its client left, or its replica gave up on it).
-- KEYS[1]: pool base. ARGV: ticket id
-- Returns 1 if the ticket was still queued, 0 if it was already granted or gone.
local K = pool_keys(KEYS[1])
local tid = ARGV[1]
local packed = redis.call('HGET', K.tickets, tid)
if not packed then
  return 0
end
drop_ticket(K, tid, parse_ticket(packed), true)
if redis.call('ZCARD', K.queue) == 0 then
  redis.call('DEL', K.tenant_vfinish)  -- the queue is empty: no tenant is ahead of another
end
return 1
