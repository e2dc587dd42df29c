"""The Lua scripts of node heartbeats: one command per beat, however many keys it sets.

A beat sets the node's alive key (with its TTL: a silent node turns Unknown by itself)
and the time in its registration hash.  Each is one script call - one command and one
round trip - where the MULTI of three commands it replaced cost five; they run on
every node every interval.  :mod:`grid_tasks.node.registry` calls them.
"""

from __future__ import annotations

#: A heartbeat: KEYS alive key, node hash; ARGV payload, TTL (ms), time.  Returns
#: whether the node was alive all along: the alive key existed before (SET ... GET
#: answers its old value) and no unanswered beat found it missing meanwhile.
HEARTBEAT_SCRIPT = """
local old = redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'GET')
redis.call('HSET', KEYS[2], 'last_heartbeat', ARGV[3])
if redis.call('HDEL', KEYS[2], 'revived') == 1 then return 0 end
if old then return 1 end
return 0
"""
#: An unanswered heartbeat (:mod:`grid_tasks.node.quiet_beat`), as
#: :data:`HEARTBEAT_SCRIPT`; nobody hears its answer, so an alive key it finds missing
#: is noted in the node hash, for the next answered beat to report.
QUIET_HEARTBEAT_SCRIPT = """
if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2], 'GET') then
  redis.call('HSET', KEYS[2], 'last_heartbeat', ARGV[3])
else
  redis.call('HSET', KEYS[2], 'last_heartbeat', ARGV[3], 'revived', '1')
end
"""
#: :data:`HEARTBEAT_SCRIPT` for many nodes: KEYS alive key and node hash of each node in
#: turn; ARGV TTL (ms), time, then each node's payload.  Returns the (1-based) numbers
#: of the nodes whose alive key did not exist before.
HEARTBEAT_MANY_SCRIPT = """
local revived = {}
for i = 1, #KEYS, 2 do
  local n = (i + 1) / 2
  if not redis.call('SET', KEYS[i], ARGV[2 + n], 'PX', ARGV[1], 'GET') then
    revived[#revived + 1] = n
  end
  redis.call('HSET', KEYS[i + 1], 'last_heartbeat', ARGV[2])
end
return revived
"""
