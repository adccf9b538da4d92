-- Register or update one backend of the pool: its limit, health, routing weight,
-- measured decode speed, the share long work may hold, whether it can resume a paused
-- generation, and its models (rewritten each time: a backend that stops serving a
-- model stops being eligible for it); note that this replica can call it; then
-- dispatch (new or restored capacity goes to queued work at once).
-- KEYS[1]: pool base. ARGV: the dispatch arguments (dispatch_args), then backend, limit,
--   down (0/1), weight, speed (tokens/s, 0: unknown), long_cap (slots restricted work
--   may hold), borrow (extra slots it may borrow while open work is quiet), resume (0/1),
--   what a resume costs it (its cost record: tpot|prefill|hit|block), then the models it serves.
local C = context(KEYS[1])
local K, a = C.K, FIRST_ARG
local name = ARGV[a]
C.now = now_s()
heartbeat(C)
all_slots(C.S)
local b = slot(C.S, name)
b.limit, b.down, b.weight = tonumber(ARGV[a + 1]), ARGV[a + 2] == '1', tonumber(ARGV[a + 3])
if tonumber(ARGV[a + 4]) > 0 then
  b.speed = tonumber(ARGV[a + 4])
end
b.lcap, b.borrow, b.resume = tonumber(ARGV[a + 5]), tonumber(ARGV[a + 6]), ARGV[a + 7] == '1'
redis.call('HSET', K.costs, name, ARGV[a + 8])
local models = {''}
for i = a + 9, #ARGV do
  models[#models + 1] = ARGV[i]
end
b.models = table.concat(models, '|') .. '|'
touch(C.S, name)
if not reach(C, C.me)[name] then
  local known = redis.call('HGET', K.reach, C.me)
  redis.call('HSET', K.reach, C.me, known and (known .. '|' .. name) or name)
  C.reach[C.me][name] = true
end
dispatch(C)
return finish(C, {})
