-- Confirm tokens all at once into durable claims bound to a job.
-- ARGV: prefix, job, ids...  Returns {1, n} or {0, reason, id}.
-- Their expiry entries stay: the purge skips a record that is confirmed.
local T = tools()
local job = ARGV[2]
local ids = {}
for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
if #ids == 0 then return {1, 0} end
local values = redis.call('HMGET', claims_key, unpack(ids))
local records, size = {}, format('%d', #ids)
for i, id in ipairs(ids) do
  local v = values[i]
  if not v then return {0, 'gone', id} end
  local f = T.split(v)
  if not T.alive(f) then return {0, 'expired', id} end
  f[5], f[6], f[7], f[8] = '0', job, job, size
  records[#records + 1] = id
  records[#records + 1] = T.join(f)
end
T.purge(64)  -- after the checks, so an expired token is reported as such
redis.call('HSET', claims_key, unpack(records))
return {1, #ids}
