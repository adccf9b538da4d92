-- The dispatch: grant queued tickets in score order as long as capacity allows (and,
-- with preemption on, pause a long-running lease for an urgent ticket that found no
-- free slot). Work is skipped where it cannot grant anything: no walk of the queue
-- when no slot is free (or only slots long work may not use, and no open work waits).

local function open_waiting(C)
  if C.open == nil then
    C.open = tonumber(redis.call('HGET', C.K.stats, 'queued_open') or '0')
  end
  return C.open
end

local function is_quiet(C)
  if C.quiet == nil then
    C.quiet = redis.call('GET', C.K.quiet) == '1'
  end
  return C.quiet
end

-- May restricted work take a slot on `b` (below its long cap, or borrowing while open
-- work is quiet)? Returns may, borrowed.
local function restricted_fits(C, b)
  if b.lbusy < b.lcap then
    return true, false
  end
  if b.lbusy < b.lcap + b.borrow and open_waiting(C) <= 0 and is_quiet(C) then
    return true, true
  end
  return false, false
end

-- Among backends serving the model with a free slot this ticket may use and its owner
-- can call, the one that would finish its outstanding work soonest (ties: fewest in
-- flight). Returns the backend and whether the slot is borrowed from the reserve.
-- policy/routing.py is its Python twin, table-tested; a test holds the two equal.
local function pick_backend(C, t)
  local known = reach(C, t.owner)
  local best, best_load, best_busy, best_borrowed = nil, nil, nil, false
  for name, b in pairs(all_slots(C.S)) do
    if free_slots(b) > 0 and known[name] and name ~= t.avoid then
      local ok, borrowed = serves(b, t.model), false
      if ok and t.restricted then
        ok, borrowed = restricted_fits(C, b)
      end
      if ok then
        local rate = (b.speed > 0 and b.speed or 1) * b.weight
        local load = (b.work + t.predicted) / rate
        if best == nil or load < best_load or (load == best_load and b.busy < best_busy) then
          best, best_load, best_busy, best_borrowed = name, load, b.busy, borrowed
        end
      end
    end
  end
  return best, best_borrowed
end

-- Could any queued ticket get a slot now? False when no slot is free, or when only
-- slots long work may not use are free and no open work waits.
local function placeable(C)
  local any = false
  for _, b in pairs(all_slots(C.S)) do
    if free_slots(b) > 0 then
      any = true
      if b.lbusy < b.lcap + b.borrow then
        return true
      end
    end
  end
  return any and open_waiting(C) > 0
end

-- Do queued tickets go in arrival order now? Only with fifo_backlog on (0: off), while the
-- pool's queue (`qlen` tickets) holds more than fifo_backlog per slot of its backends that
-- are up, and only if every queued ticket is in K.arrivals (a replica without the setting
-- puts none there). Short work that would overtake long work gains nothing then: the pool
-- is past its capacity, and reordering a backlog only moves who waits it out.
local function arrival_order(C, qlen)
  if C.D.fifo_backlog <= 0 or qlen == 0 then
    return false
  end
  local slots = 0
  for _, b in pairs(all_slots(C.S)) do
    if not b.down then
      slots = slots + b.limit
    end
  end
  return qlen > C.D.fifo_backlog * slots and redis.call('ZCARD', C.K.arrivals) >= qlen
end

-- Which running lease should give its slot to ticket `t` (queue score `tscore`), which
-- found none free, and does the pause pay? policy/preemption.py is its twin and says the
-- rule in full: nothing while the queue holds more than `backlog` per slot (0: off); of the
-- leases on backends that serve its model and can resume, whose owner reported them
-- preemptible (K.progress) past the quantum, paused fewer than max_pauses times, that
-- `t` may overtake: only one expected to run at least `ratio` times longer than `t` (0: any),
-- whose resume costs (its re-read, times the streams that wait for it) no more than `t`
-- would wait for a slot, within its backend's re-read budget; of those, the one that
-- has run longest.
local function may_overtake(t, tscore, l, D)
  if t.pauses > 0 then
    return false  -- a continuation waits for a free slot (it is first in line by its age)
  end
  if l.tier ~= t.tier then
    return tscore < l.score  -- another tier: only a more urgent one (offsets are in the scores)
  end
  -- the starvation bound, counted from the lease's original arrival; within it, fresh
  -- work goes before work that ran past its quantum (least attained service first)
  return t.arrival <= l.arrival + D.max_slack + CLOCK_SLACK
end

-- expected output tokens still to come: the prediction less what was made, never below
-- half of what was made (-1: not reported)
local function remaining(predicted, attained)
  local made = math.max(0, attained)
  return math.max(predicted - made, made / 2, 0)
end

-- seconds of prefill a continuation costs: one prefill's overhead, and its tokens (prompt
-- plus output, less the full cache blocks the prefix cache is expected to hold)
local function resume_cost_s(l, cost)
  local tokens = l.prompt + math.max(0, l.attained)
  local cached = 0
  if cost.block > 0 then
    cached = cost.hit * cost.block * math.floor(tokens / cost.block)
  end
  return cost.base + (tokens - cached) * cost.prefill
end

-- a backend's re-read budget now: refilled at `budget` seconds per second, at most
-- budget * window; never spent: full
local function budget_now(C, name)
  local cap = C.D.budget * C.D.window
  local packed = redis.call('HGET', C.K.budget, name)
  if not packed then
    return cap
  end
  local f = fields(packed)
  local level, since = tonumber(f[1]) or cap, tonumber(f[2]) or C.now
  return math.min(cap, level + math.max(0, C.now - since) * C.D.budget)
end

local REFUSALS = {'none', 'short', 'cost', 'budget'}

-- Returns the lease id, its lease and the decision ({why, wait, cost, budget}).
local function pick_victim(C, t, tscore)
  local D, K = C.D, C.K
  local pool, slots, any = {}, 0, false
  local known = reach(C, t.owner)
  for name, b in pairs(all_slots(C.S)) do
    if name ~= t.avoid and b.resume and not b.down and known[name] and serves(b, t.model) then
      pool[name] = {b = b}
      slots = slots + b.limit
      any = true
    end
  end
  if not any then
    return nil, nil, {why = 'none'}
  end
  if D.backlog > 0 and redis.call('ZCARD', K.queue) > D.backlog * slots then
    return nil, nil, {why = 'backlog'}
  end
  local progress = {}
  local flat = redis.call('HGETALL', K.progress)
  for i = 1, #flat, 2 do
    progress[flat[i]] = flat[i + 1]
  end
  local leases, wait = {}, nil
  flat = redis.call('HGETALL', K.lease)
  for i = 1, #flat, 2 do
    local lid = flat[i]
    local reported = progress[lid]
    progress[lid] = nil
    local l = parse_lease(flat[i + 1])
    local p = pool[l.backend]
    if p then
      if p.cost == nil then
        p.cost = parse_cost(redis.call('HGET', K.costs, l.backend))
      end
      l.id, l.attained, l.prompt = lid, -1, 0
      if reported then
        l.attained, l.prompt = parse_progress(reported)
      end
      local w = remaining(l.predicted, l.attained) * p.cost.tpot
      if wait == nil or w < wait then
        wait = w
      end
      leases[#leases + 1] = l
    end
  end
  for lid in pairs(progress) do
    redis.call('HDEL', K.progress, lid)  -- reported after its release: forget it
  end
  if wait == nil then
    return nil, nil, {why = 'none'}
  end
  local best, best_cost, why = nil, 0, 1
  for _, l in ipairs(leases) do
    if l.attained > D.quantum and l.pauses < D.max_pauses and may_overtake(t, tscore, l, D) then
      local p = pool[l.backend]
      if remaining(l.predicted, l.attained) < D.ratio * t.predicted then
        why = math.max(why, 2)
      else
        local cost = resume_cost_s(l, p.cost)
        if wait < cost * math.max(1, p.b.busy) then
          why = math.max(why, 3)
        else
          if p.budget == nil then
            p.budget = budget_now(C, l.backend)
          end
          if p.budget < cost then
            why = math.max(why, 4)
          elseif best == nil or l.attained > best.attained then
            best, best_cost = l, cost
          end
        end
      end
    end
  end
  if best == nil then
    return nil, nil, {why = REFUSALS[why]}
  end
  return best.id, best, {why = 'pause', wait = wait, cost = best_cost, budget = pool[best.backend].budget}
end

-- Grant ticket `tid` the lease `l` (lease_of): record it, count its slot, tell its owner.
-- `record`: pack_lease(l) when the caller already wrote it (HSETNX); nil: written here.
local function grant(C, tid, l, record)
  local written = record ~= nil
  record = record or pack_lease(l)
  add_lease(C, tid, l, record, written)
  local b = slot(C.S, l.backend)
  b.granted = b.granted + 1
  notify(C, l.owner, grant_message(tid, record))
end

local function resumable(C)
  for _, b in pairs(all_slots(C.S)) do
    if b.resume then
      return true
    end
  end
  return false
end

-- Grant queued tickets in score order (in arrival order while arrival_order holds) while
-- capacity lasts. Grants for `me` are
-- returned (the caller delivers them without a round trip); others are pushed. With
-- preemption on, the first fresh ticket of the short or medium class that finds no free
-- slot (after waiting preempt_after seconds) may take a running lease's slot, once per call.
local function dispatch(C)
  local D, K, now = C.D, C.K, C.now
  -- a pool none of whose backends can resume pauses nothing: no walk of a full queue for it
  local may_preempt = D.preempt and resumable(C)
  if not may_preempt and not placeable(C) then
    return
  end
  local arrivals = D.fifo_backlog > 0  -- queued tickets are in K.arrivals too
  local fifo = arrivals and arrival_order(C, redis.call('ZCARD', K.queue))
  local queued = redis.call('ZRANGE', fifo and K.arrivals or K.queue, 0, D.max_scan - 1, 'WITHSCORES')
  local left = #queued / 2
  for i = 1, #queued, 2 do
    if not may_preempt and not placeable(C) then
      break
    end
    local tid, score = queued[i], tonumber(queued[i + 1])
    if fifo then
      score = tonumber(redis.call('ZSCORE', K.queue, tid))  -- its place in the score order
    end
    local packed = score and redis.call('HGET', K.tickets, tid)
    if not packed then
      redis.call('ZREM', K.queue, tid)
      if arrivals then
        redis.call('ZREM', K.arrivals, tid)
      end
      left = left - 1
    else
      local t = parse_ticket(packed)
      local gone = false
      if not owner_alive(C, t.owner) then
        -- its client connection died with its replica: nobody to answer, drop it
        gone = true
      elseif t.deadline > 0 and t.deadline < now then
        gone = true
        notify(C, t.owner, evict_message(tid, 'deadline'))
      else
        local backend, borrowed = pick_backend(C, t)
        if not backend and may_preempt and t.pauses == 0 and t.class ~= 'long'
            and now - t.arrival >= D.preempt_after - CLOCK_SLACK then
          may_preempt = false  -- one try per call bounds the script's work
          local victim, vl, d = pick_victim(C, t, score)
          if victim then
            drop_lease(C, victim)
            redis.call('HINCRBY', K.stats, 'paused', 1)
            redis.call('HSET', K.budget, vl.backend, string.format('%.6f|%.4f', d.budget - d.cost, now))
            notify(C, vl.owner, pause_message(victim, vl.backend, d.wait, d.cost))
            backend = vl.backend
          else
            redis.call('HINCRBY', K.stats, 'unpaused_' .. d.why, 1)
          end
        end
        if backend then
          gone = true
          grant(C, tid, lease_of(t, score, backend, borrowed))
        end
      end
      if gone then
        drop_ticket(K, tid, t, arrivals)
        left = left - 1
        if not t.restricted and C.open ~= nil then
          C.open = C.open - 1
        end
      end
    end
  end
  if #queued > 0 and left == 0 and #queued / 2 < D.max_scan then
    redis.call('DEL', K.tenant_vfinish)  -- the queue is empty: no tenant is ahead of another
  end
end

-- The end of every dispatching script: write back the backends it changed.
local function finish(C, out)
  flush(C.S)
  for _, msg in ipairs(C.mine) do
    out[#out + 1] = msg
  end
  return out
end
