"""Which nodes of one RM are silent, asked of Redis in one script call.

Every iteration of an RM needs its nodes' liveness, and only the silent ones change
anything (they get no new work).  :meth:`NodeRegistry.states` sent one key per node
(an ``MGET``) and decoded every heartbeat here; at 100 nodes per RM that read was,
after the node rows, the largest part of an iteration's per-node cost.  The script below
takes the RM's node names as one argument and returns only the nodes without a live
heartbeat, so what this process sends and decodes no longer grows with the nodes.
"""

from __future__ import annotations

from typing import Any

from grid_tasks.node.redis_errors import connectivity
from grid_tasks.states import NodeState

#: ARGV: the key prefix (``grid_tasks``), the RM, its node names one a line.  Returns
#: name, status pairs (status '' without a registration) for every node whose heartbeat
#: is missing or not JSON (a foreign value: absent for :meth:`NodeRegistry.states` too;
#: the heartbeats' own JSON objects are known by their first byte, '{', and only other
#: values are decoded).  The heartbeats are read 1,000 keys an MGET (Lua's stack bounds
#: ``unpack``); ~1 us of Redis per node, where the client-side MGET cost ~10 us here.
#: The keys are named from the arguments: every key of one RM, one server.
SILENT_SCRIPT = """
local alive = ARGV[1] .. ':alive:' .. ARGV[2] .. ':'
local node = ARGV[1] .. ':node:' .. ARGV[2] .. ':'
local names = {}
for name in string.gmatch(ARGV[3], '[^\\n]+') do names[#names + 1] = name end
local out = {}
for first = 1, #names, 1000 do
  local keys = {}
  for i = first, math.min(first + 999, #names) do keys[#keys + 1] = alive .. names[i] end
  local beats = redis.call('MGET', unpack(keys))
  for k, beat in ipairs(beats) do
    if not beat or (string.byte(beat, 1) ~= 123 and not pcall(cjson.decode, beat)) then
      local name = names[first + k - 1]
      out[#out + 1] = name
      out[#out + 1] = redis.call('HGET', node .. name, 'status') or ''
    end
  end
end
return out
"""


def silent_nodes(client: Any, prefix: str, rm: str, names: str) -> dict[str, NodeState]:
    """Of ``rm``'s nodes ``names`` (one a line), those without a live heartbeat: Down if
    the daemon said goodbye, else Unknown (as :func:`~grid_tasks.node.registry.node_state`
    says of a node without a heartbeat)."""
    with connectivity(client):
        found = client.register_script(SILENT_SCRIPT)(keys=[], args=[prefix, rm, names])
    down = NodeState.DOWN.value.encode()
    return {found[i].decode(): NodeState.DOWN if found[i + 1] == down else NodeState.UNKNOWN
            for i in range(0, len(found), 2)}
