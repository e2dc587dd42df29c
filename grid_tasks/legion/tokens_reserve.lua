-- All-or-nothing: refresh KEEP tokens, release RELEASE tokens, acquire new claims.
-- ARGV[1] = prefix|ttl_ms|owner|confirmed|force|nkeep|nrelease|nclaims|
-- ARGV[2] = NUL-terminated fields: the keep ids, the release ids, then
--           id, resource, start, end, procs, at(end) per claim
--           (one struct.unpack call splits them all: no pattern matching per char)
-- Returns now_ms (an integer) or {reason, subject, index, peak, capacity}.
--
-- Cost matters here (issue 8): a reservation with nothing to read costs TIME, one
-- HMGET, one ZADD (timelines and expiry together), one HSET of the records and one
-- HSET of the bounds, and few tables.  Reads that usually find nothing are skipped
-- when a bound proves them empty (cap_key fields):
--   '|next'           a lower bound of every expiry entry in the index
--                     (removals keep it valid; this script lowers it)
--   '<resource>|end'  the latest end any claim of the resource has had
--   '|span'           the longest claim any resource has had (bounds timeline reads)
local ttl_text, owner, conf_text, force_text, nkeep, nrel, n_text = string.match(ARGV[1],
  '^[^|]*|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|([^|]*)|')
local ttl_ms = tonumber(ttl_text)
local confirmed, force = conf_text == '1', force_text == '1'
nkeep, nrel = tonumber(nkeep), tonumber(nrel)
local n = tonumber(n_text)
local total = nkeep + nrel + 6 * n
local f
if total <= 600 then
  f = {struct.unpack(string.rep('s', total), ARGV[2])}
else  -- in slices: unpack's results are pushed on a bounded stack
  f = {}
  local count, pos = 0, 1
  while count < total do
    local k = math.min(total - count, 600)
    local got = {struct.unpack(string.rep('s', k), ARGV[2], pos)}
    for j = 1, k do f[count + j] = got[j] end
    count, pos = count + k, got[k + 1]
  end
end
local base = nkeep + nrel  -- claim i's fields are f[base + 6 * i - 5 .. base + 6 * i]
local T

local kept = {}
if nkeep > 0 then
  T = tools()
  local values = redis.call('HMGET', claims_key, unpack(f, 1, nkeep))
  for i = 1, nkeep do
    local v = values[i]
    if not v then return {'gone', f[i], i, 0, 0} end
    local record = T.split(v)
    if not T.alive(record) then return {'expired', f[i], i, 0, 0} end
    kept[i] = record
  end
end
local released = {}
for i = nkeep + 1, base do released[f[i]] = true end

local fields = {'|next', '|span'}
for i = 1, n do
  local resource = f[base + 6 * i - 4]
  fields[2 * i + 1], fields[2 * i + 2] = resource, resource .. '|end'
end
local caps = redis.call('HMGET', cap_key, unpack(fields))
-- after the keep checks, so an expired token is reported as such
local next_expiry = tonumber(caps[1])
if not next_expiry or next_expiry <= now_ms then
  T = T or tools()
  if T.purge(64) < 64 then
    next_expiry = T.first_expiry() or math.huge
  else
    next_expiry = now_ms  -- a backlog is left: purge again next time
  end
end
local bounds = {}
if next_expiry ~= tonumber(caps[1]) then
  bounds[1], bounds[2] = '|next', format('%d', math.min(next_expiry, 2 ^ 53))
end

-- Peak use of [s, e) by live claims on one resource, the claims being
-- acquired in this call included and the released ones left out.
-- A claim overlapping [s, e) ends after s and before e + span, span being the
-- longest claim any resource has held, so the range read of the timeline stays
-- proportional to the neighbourhood, not to the whole future.
local function stored(resource, s, e, span)
  T = T or tools()
  local head = resource .. '|'
  -- '}' sorts after '|': the upper bound takes every id of its second
  local upper = span and ('[' .. head .. at(e + span) .. '}') or ('[' .. resource .. '}')
  local found = redis.call('ZRANGEBYLEX', idx_key, '[' .. head .. at(s), upper)
  local into = {}
  if #found == 0 then return into end
  local cut, found_ids = #head + 15, {}
  for j, entry in ipairs(found) do found_ids[j] = string.sub(entry, cut) end
  local values = redis.call('HMGET', claims_key, unpack(found_ids))
  for j, v in ipairs(values) do
    if v and not released[found_ids[j]] then
      local record = T.split(v)
      if T.alive(record) then
        into[#into + 1] = {tonumber(record[2]), tonumber(record[3]), tonumber(record[4])}
      end
    end
  end
  return into
end

local function by_instant(a, b)
  -- ends sort before starts at the same instant: intervals are half-open
  if a[1] == b[1] then return a[2] < b[2] end
  return a[1] < b[1]
end

local function peak(claims, s, e)
  local events = {}
  for _, c in ipairs(claims) do
    if c[1] < e and c[2] > s then
      events[#events + 1] = {math.max(c[1], s), c[3]}
      events[#events + 1] = {math.min(c[2], e), -c[3]}
    end
  end
  table.sort(events, by_instant)
  local use, top = 0, 0
  for _, ev in ipairs(events) do
    use = use + ev[2]
    if use > top then top = use end
  end
  return top
end

local span = tonumber(caps[2])
local longest = span or 0
local starts, ends, procs, horizons = {}, {}, {}, {}
for i = 1, n do
  local o = base + 6 * i - 6
  local resource = f[o + 2]
  local s, e, p = tonumber(f[o + 3]), tonumber(f[o + 4]), tonumber(f[o + 5])
  local horizon = tonumber(caps[2 * i + 2])
  starts[i], ends[i], procs[i], horizons[i] = s, e, p, horizon or false
  if e - s > longest then longest = e - s end
  if force then
    -- mirrored durable claims carry chosen ids: never overwrite a different claim
    if redis.call('HEXISTS', claims_key, f[o + 1]) == 1 then
      return {'duplicate', f[o + 1], i, 0, 0}
    end
  else
    local cap = tonumber(caps[2 * i + 1])
    if not cap then return {'unknown', resource, i, 0, 0} end
    local near
    -- every stored claim of the resource ends by its horizon
    if not (horizon and horizon <= s) then near = stored(resource, s, e, span) end
    for j = 1, i - 1 do  -- this call's earlier claims on it: not in the index yet
      if f[base + 6 * j - 4] == resource then
        near = near or {}
        near[#near + 1] = {starts[j], ends[j], procs[j]}
      end
    end
    local top = near and peak(near, s, e) or 0
    if top + p > cap then return {'full', resource, i, top, cap} end
  end
end

if nrel > 0 then
  T = T or tools()
  T.release(f, nkeep + 1, base)
end

local expiry = now_ms + ttl_ms
local expiry_text = format('%d', expiry)
local records, index, expiring = {}, {}, {}
for i = 1, nkeep do
  local record = kept[i]
  if record[5] ~= '0' then
    record[5] = expiry_text
    expiring[#expiring + 1] = f[i]
    records[#records + 1] = f[i]
    records[#records + 1] = T.join(record)
  end
end
local tail = '|' .. (confirmed and '0' or expiry_text) .. '|' .. owner .. '|' .. owner
             .. '|' .. n_text
local latest = {}  -- resource -> the claim of this call ending last on it
for i = 1, n do
  local o = base + 6 * i - 6
  local id, resource = f[o + 1], f[o + 2]
  records[#records + 1] = id
  records[#records + 1] = resource .. '|' .. f[o + 3] .. '|' .. f[o + 4] .. '|' .. f[o + 5]
                          .. tail
  index[2 * i - 1], index[2 * i] = '0', resource .. '|' .. f[o + 6] .. '|' .. id
  if not confirmed then expiring[#expiring + 1] = id end
  local last = latest[resource]
  if not last or ends[i] > ends[last] then latest[resource] = i end
end
if #expiring > 0 then
  index[#index + 1] = '0'
  index[#index + 1] = '|' .. format('%d', expiry + 1e13) .. '|' .. table.concat(expiring, '|')
  if expiry < next_expiry then
    bounds[1], bounds[2] = '|next', expiry_text
  end
end
if #records > 0 then redis.call('HSET', claims_key, unpack(records)) end
if #index > 0 then redis.call('ZADD', idx_key, unpack(index)) end
if longest > (span or 0) then
  bounds[#bounds + 1] = '|span'
  bounds[#bounds + 1] = format('%.17g', longest)
end
for resource, i in pairs(latest) do
  if not horizons[i] or ends[i] > horizons[i] then
    bounds[#bounds + 1] = fields[2 * i + 2]  -- resource .. '|end', made for the HMGET
    bounds[#bounds + 1] = f[base + 6 * i - 2]
  end
end
if #bounds > 0 then redis.call('HSET', cap_key, unpack(bounds)) end
return now_ms
