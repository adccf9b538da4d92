-- Shared by every script (scripts.py prepends _common, _slots, _owners and _dispatch to
-- each, so each script stays one atomic unit): the pool's key names, the arguments
-- every dispatching script opens with, and the record formats.
--
-- Keys: pool_keys(KEYS[1]) names every key of a pool, once (keys.py builds the same
-- names; a test holds the two equal). Formats (records.py has the table; a test holds
-- the two equal):
--   ticket in K.tickets:   owner|model|tenant|class|predicted|deadline|arrival|tier|avoid|restricted|pauses
--   lease in K.lease:      backend|owner|predicted|restricted|borrowed|class|score|pauses|tier|arrival (the
--                          owner is in it, so a replica can find grants it was never told of)
--   backend in K.backends: limit|down|weight|speed|lcap|borrow|resume|busy|work|lbusy|borrowed|granted|model...
--   owner in K.reach:      backend|backend|...  (the backends that replica can call)
--   grant message:         G|<ticket>|<lease record>  (the whole record: the owner keeps it, and
--                          its heartbeat writes it back if Redis loses it)
--   eviction message:      E|<ticket>|<reason>
--   lost message:          L|<ticket>|lost   (a waited-for ticket the queue no longer has)
--   pause message:         P|<lease>|<backend>|wait=<s>,cost=<s>  (its slot went to a more urgent ticket)
--   progress in K.progress: attained|prompt   (output tokens so far; the prompt's tokens)
--   cost in K.costs:       tpot|prefill|hit|block|base  (what a resume costs a backend)
--   budget in K.budget:    level|since       (re-read seconds left; when)

local function pool_keys(base)
  return {
    queue = base .. ':queue', arrivals = base .. ':arrivals', tickets = base .. ':tickets',
    backends = base .. ':backends',
    reach = base .. ':reach', quiet = base .. ':quiet',
    lease = base .. ':lease', owners = base .. ':owners',
    progress = base .. ':progress', costs = base .. ':costs', budget = base .. ':budget',
    tenant_vfinish = base .. ':tenant:vfinish', tenant_queued = base .. ':tenant:queued',
    stats = base .. ':stats', epoch = base .. ':epoch',
    inbox = function(owner) return base .. ':inbox:' .. owner end,
  }
end

-- The arguments every dispatching script opens with (scripts.py: Scripts._common).
local function dispatch_args()
  return {me = ARGV[1], lease_ttl = tonumber(ARGV[2]), owner_ttl = tonumber(ARGV[3]),
          max_scan = tonumber(ARGV[4]), preempt = ARGV[5] == '1', quantum = tonumber(ARGV[6]),
          max_pauses = tonumber(ARGV[7]), preempt_after = tonumber(ARGV[8]), max_slack = tonumber(ARGV[9]),
          ratio = tonumber(ARGV[10]), backlog = tonumber(ARGV[11]), budget = tonumber(ARGV[12]),
          window = tonumber(ARGV[13]), fifo_backlog = tonumber(ARGV[14])}
end
local FIRST_ARG = 15  -- where each script's own arguments begin
-- Times in records are written with 14 digits: 0.1 ms on Redis's clock; this much slack
-- keeps a time read back from a record from looking later than the moment it was written.
local CLOCK_SLACK = 0.001

local function now_s()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end

local function fields(packed)
  local f = {}
  local i = 1
  for field in string.gmatch(packed .. '|', '([^|]*)|') do
    f[i] = field
    i = i + 1
  end
  return f
end

local function flag(b)
  return b and '1' or '0'
end

-- -- formats ---------------------------------------------------------------------------

local function pack_ticket(t)
  return table.concat({t.owner, t.model, t.tenant, t.class, t.predicted, t.deadline, t.arrival,
                       t.tier, t.avoid, flag(t.restricted), t.pauses}, '|')
end

local function parse_ticket(packed)
  local f = fields(packed)
  return {owner = f[1], model = f[2], tenant = f[3], class = f[4],
          predicted = tonumber(f[5]) or 0, deadline = tonumber(f[6]) or 0,
          arrival = tonumber(f[7]) or 0, tier = f[8], avoid = f[9] or '',
          restricted = f[10] == '1', pauses = tonumber(f[11]) or 0}
end

-- The lease a grant of ticket `t` (parse_ticket; `score`: its queue score) makes: the one
-- place a lease is built, by every script that grants. The heartbeat writes back what
-- the owner replica kept of it (the record in the grant message), field for field.
local function lease_of(t, score, backend, borrowed)
  return {backend = backend, owner = t.owner, predicted = t.predicted, restricted = t.restricted,
          borrowed = borrowed, class = t.class, score = score, pauses = t.pauses, tier = t.tier,
          arrival = t.arrival}
end

local function pack_lease(l)
  return table.concat({l.backend, l.owner, l.predicted, flag(l.restricted), flag(l.borrowed),
                       l.class, l.score, l.pauses, l.tier, l.arrival}, '|')
end

-- The owner named in a lease record, without parsing the rest.
local function lease_owner(record)
  return string.match(record, '^[^|]*|([^|]*)') or ''
end

local function parse_lease(record)
  local f = fields(record)
  return {backend = f[1], owner = f[2], predicted = tonumber(f[3]) or 0,
          restricted = f[4] == '1', borrowed = f[5] == '1', class = f[6] or '',
          score = tonumber(f[7]) or 0, pauses = tonumber(f[8]) or 0, tier = f[9] or '',
          arrival = tonumber(f[10]) or 0}
end

-- A backend's state: what the registry sets (limit .. resume, models) and what the
-- scripts count (busy .. granted), one field of one hash, so a dispatch reads the
-- whole pool with one HGETALL and a grant writes one field.
-- `models` is kept as written, between bars ("|m1|m2|"): serves() looks a model up in it.
local BACKEND = '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)(.*)$'

local function parse_backend(packed)
  local f1, f2, f3, f4, f5, f6, f7, f8, f9, f10, f11, f12, rest = string.match(packed or '', BACKEND)
  if f1 == nil then
    return {limit = 0, down = false, weight = 1, speed = 0, lcap = 0, borrow = 0, resume = false, busy = 0,
            work = 0, lbusy = 0, borrowed = 0, granted = 0, models = '|'}
  end
  local limit = tonumber(f1) or 0
  return {limit = limit, down = f2 == '1', weight = tonumber(f3) or 1, speed = tonumber(f4) or 0,
          lcap = tonumber(f5) or limit, borrow = tonumber(f6) or 0, resume = f7 == '1', busy = tonumber(f8) or 0,
          work = tonumber(f9) or 0, lbusy = tonumber(f10) or 0, borrowed = tonumber(f11) or 0,
          granted = tonumber(f12) or 0, models = rest .. '|'}
end

local function serves(b, model)
  return string.find(b.models, '|' .. model .. '|', 1, true) ~= nil
end

local function pack_backend(b)
  return table.concat({b.limit, flag(b.down), b.weight, b.speed, b.lcap, b.borrow, flag(b.resume), b.busy,
                       b.work, b.lbusy, b.borrowed, b.granted}, '|') .. string.sub(b.models, 1, -2)
end

-- `record`: the lease as pack_lease wrote it (its backend comes first)
local function grant_message(lid, record)
  return 'G|' .. lid .. '|' .. record
end

local function evict_message(tid, reason)
  return 'E|' .. tid .. '|' .. reason
end

local function lost_message(tid)
  return 'L|' .. tid .. '|lost'
end

local function pause_message(lid, backend, wait_s, cost_s)
  return 'P|' .. lid .. '|' .. backend .. '|' .. string.format('wait=%.3f,cost=%.3f', wait_s, cost_s)
end

-- attained, prompt (a bare count, as older replicas wrote it: prompt 0)
local function parse_progress(packed)
  local f = fields(packed)
  return tonumber(f[1]) or 0, tonumber(f[2]) or 0
end

-- What a resume costs a backend (types.ResumeCost; its defaults where none was written).
local function parse_cost(packed)
  if not packed then
    return {tpot = 0.05, prefill = 0.0025, hit = 0, block = 16, base = 0}
  end
  local f = fields(packed)
  return {tpot = tonumber(f[1]) or 0.05, prefill = tonumber(f[2]) or 0.0025, hit = tonumber(f[3]) or 0,
          block = tonumber(f[4]) or 16, base = tonumber(f[5]) or 0}
end
