-- Release a lease (its request finished) and dispatch into the freed slot.
-- KEYS[1]: pool base. ARGV: the dispatch arguments (dispatch_args), then the lease id.
-- Returns the grant/eviction messages for me. With nothing queued this reads and
-- writes only the lease and its backend's field.
local C = context(KEYS[1])
local lid = ARGV[FIRST_ARG]
if redis.call('ZCARD', C.K.queue) == 0 then
  drop_lease(C, lid)
  return finish(C, {})
end
C.now = now_s()
all_slots(C.S)
drop_lease(C, lid)
dispatch(C)
return finish(C, {})
