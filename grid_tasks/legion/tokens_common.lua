-- Shared helpers, prepended to every token script (see tokens.py).
-- A claim is stored in the claims hash as
--   resource|start|end|procs|expiry_ms|owner|group|size
-- where expiry_ms 0 means confirmed (durable, never expires).  One sorted set, the
-- index, holds every timeline and every expiry, all at score 0 so that it is ordered
-- by member (one ZADD writes a whole reservation, whatever resources it spans):
--   <resource>|<E>|<id>   a claim on the resource's timeline, E = at(end)
--   |<X>|<id>|<id>|...    ids taken (or refreshed) together, expiring at X = xat(ms)
-- An expiry entry is only a hint: the record says whether the token is still
-- unconfirmed and expired, so confirm and release leave the entry to the purge.
-- Every script gets the key prefix first in ARGV[1].  The keys are derived, so the
-- scripts need a standalone Redis (not Redis Cluster).
--
-- Cost matters (issue 8): every closure, table and string is paid on each call, so
-- the preamble is minimal and the helpers are made by tools() only when a script
-- needs them (a plain reservation does not).  Numbers become text through '%d'
-- only: tostring (and '..' on a number) go through '%.14g', several times dearer.
local prefix = string.match(ARGV[1], '^[^|]*')
local claims_key, cap_key, idx_key = prefix .. ':claims', prefix .. ':cap', prefix .. ':idx'
local clock = redis.call('TIME')
local now_ms = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local format = string.format

-- Whole seconds, offset to exactly 13 digits, so the index orders a timeline by
-- end; reads filter exactly afterwards.  _at in tokens.py computes the same.
local function at(t)
  local n = math.floor(t) + 1e12
  if n < 1e12 then return '1000000000000' end
  if n > 9999999999999 then return '9999999999999' end
  return format('%d', n)
end

local tools_made
local function tools()
  if tools_made then return tools_made end
  local T = {}

  function T.split(value)
    local f = {}
    for part in string.gmatch(value, '([^|]*)|?') do
      f[#f + 1] = part
      if #f == 8 then break end
    end
    return f
  end

  function T.join(f)
    return table.concat(f, '|', 1, 8)
  end

  function T.alive(f)
    local x = tonumber(f[5])
    return x == 0 or x > now_ms
  end

  -- Expiry entries sort by server milliseconds, 14 digits (until the year 4800).
  function T.xat(ms)
    return format('%d', ms + 1e13)
  end

  -- One command over many arguments, in slices that unpack can take.
  function T.each_slice(command, key, list)
    local out = {}
    for first = 1, #list, 4000 do
      local got = redis.call(command, key, unpack(list, first, math.min(first + 3999, #list)))
      if type(got) == 'table' then
        for _, v in ipairs(got) do out[#out + 1] = v end
      end
    end
    return out
  end

  -- Remove tokens: distinct ids and their split records (parallel arrays).
  function T.drop(ids, records)
    if #ids == 0 then return end
    local members = {}
    for i, id in ipairs(ids) do
      local f = records[i]
      members[i] = f[1] .. '|' .. at(tonumber(f[3])) .. '|' .. id
    end
    T.each_slice('ZREM', idx_key, members)
    T.each_slice('HDEL', claims_key, ids)
  end

  -- Release the distinct ids among list[from..to] that still exist; returns how many.
  function T.release(list, from, to)
    local ids, seen = {}, {}
    for i = from, to do
      if not seen[list[i]] then
        seen[list[i]] = true
        ids[#ids + 1] = list[i]
      end
    end
    if #ids == 0 then return 0 end
    local values = redis.call('HMGET', claims_key, unpack(ids))
    local gone, records = {}, {}
    for i, id in ipairs(ids) do
      if values[i] then gone[#gone + 1], records[#records + 1] = id, T.split(values[i]) end
    end
    T.drop(gone, records)
    return #gone
  end

  -- Expired tokens are removed lazily, a bounded batch of expiry entries at a
  -- time, so no call pays for a long backlog.  Returns the entries handled and
  -- the tokens dropped.
  function T.purge(limit)
    local due = redis.call('ZRANGEBYLEX', idx_key, '[|', '(|' .. T.xat(now_ms + 1),
                           'LIMIT', 0, limit)
    if #due == 0 then return 0, 0 end
    local ids, seen = {}, {}
    for _, entry in ipairs(due) do
      for id in string.gmatch(string.sub(entry, 17), '[^|]+') do
        if not seen[id] then  -- refreshed tokens appear in several entries
          seen[id] = true
          ids[#ids + 1] = id
        end
      end
    end
    local gone, records = {}, {}
    -- HMGET answers nil as false: a token released since has no record
    local values = T.each_slice('HMGET', claims_key, ids)
    for i, id in ipairs(ids) do
      if values[i] then
        local f = T.split(values[i])
        if not T.alive(f) then
          gone[#gone + 1], records[#records + 1] = id, f
        end
      end
    end
    T.drop(gone, records)
    redis.call('ZREM', idx_key, unpack(due))
    return #due, #gone
  end

  -- The earliest expiry entry's time (ms), or nil when there is none.
  function T.first_expiry()
    local first = redis.call('ZRANGEBYLEX', idx_key, '[|', '(|:', 'LIMIT', 0, 1)
    if #first == 0 then return nil end
    return tonumber(string.sub(first[1], 2, 15)) - 1e13
  end

  tools_made = T
  return T
end
