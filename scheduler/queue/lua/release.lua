-- Release a lease (its request finished) and dispatch into the freed slot.
-- KEYS[1]: pool base. ARGV: the dispatch arguments (dispatch_args), then the lease id and
-- its record as the owner holds it ('' when it has none: it is read here).
-- Returns the grant/eviction messages for me. With nothing queued this writes only the
-- lease and its backend's field, and reads only that field.
local C = context(KEYS[1])
local lid = ARGV[FIRST_ARG]
local known = ARGV[FIRST_ARG + 1]
if known == nil or known == '' then
  known = nil
end
if redis.call('ZCARD', C.K.queue) == 0 then
  drop_lease(C, lid, known)
  return finish(C, {})
end
C.now = now_s()
all_slots(C.S)
drop_lease(C, lid, known)
dispatch(C)
return finish(C, {})
