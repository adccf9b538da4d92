-- A replica's periodic tick: prove it is alive (which renews its leases), sweep what
-- lapsed (leases of replicas that stopped beating, then those replicas themselves), and
-- dispatch (so freed slots go to queued work without traffic).
-- KEYS[1]: pool base. ARGV: the dispatch arguments (dispatch_args), then quiet (0/1: the
--   open class has had no recent arrivals), n (leases that follow), then for each of the
--   n leases this replica holds: lease id, its lease record, its progress (attained|prompt;
--   -1: not preemptible now); then the ids of the tickets this replica is waiting for.
-- A lease missing here (Redis restarted and lost it) is recreated with its slot,
-- so the busy count again matches the requests really running; its record is the one
-- the grant wrote (the grant message carries it whole), so a rebuilt lease keeps the
-- class, score, tier and arrival a pause decision reads. A lease of this
-- replica missing from its list is a grant it was never told of (the reply that
-- carried it was lost with its connection): it is told again, so the
-- waiter gets it, or the replica releases it. A waited-for ticket that is neither queued
-- nor granted was dropped while this replica looked dead (its heartbeat was late, and
-- another replica's dispatch met the ticket): it is reported lost, to be queued again.
-- Returns {epoch, tickets granted so far in the pool, messages for me...}.
local C = context(KEYS[1])
local K, D, me, a = C.K, C.D, C.me, FIRST_ARG
C.now = now_s()
heartbeat(C)
if ARGV[a] == '1' then
  redis.call('SET', K.quiet, '1', 'PX', math.floor(D.owner_ttl * 1000))
else
  redis.call('DEL', K.quiet)
end
all_slots(C.S)
local leases = lapse_leases(C, redis.call('HGETALL', K.lease))
bury_dead_owners(C)
local held = {}
local waiting_from = a + 2 + 3 * tonumber(ARGV[a + 1])
for i = a + 2, waiting_from - 1, 3 do
  local lid, attained = ARGV[i], parse_progress(ARGV[i + 2])
  held[lid] = true
  if not leases[lid] then
    local l = parse_lease(ARGV[i + 1])
    local record = pack_lease(l)
    add_lease(C, lid, l, record)
    leases[lid] = record
  end
  if attained >= 0 then
    redis.call('HSET', K.progress, lid, ARGV[i + 2])
  else
    redis.call('HDEL', K.progress, lid)
  end
end
local granted = 0
for _, b in pairs(C.S.recs) do
  granted = granted + b.granted
end
local out = {redis.call('GET', K.epoch), tostring(granted)}
for lid, record in pairs(leases) do
  if not held[lid] and lease_owner(record) == me then
    out[#out + 1] = grant_message(lid, record)
  end
end
for i = waiting_from, #ARGV do
  local tid = ARGV[i]
  if not leases[tid] and redis.call('HEXISTS', K.tickets, tid) == 0 then
    out[#out + 1] = lost_message(tid)
  end
end
dispatch(C)
return finish(C, out)
