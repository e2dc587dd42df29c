"""What Legion's brokers and the resource managers share (seed 003).

* :mod:`.collection` - every resource (RMs and nodes) with topology and live registry
  attributes, queried in MIL; who may use a resource; durable SQL reservations as claims;
* :mod:`.tokens` - reservation tokens in Redis: atomic Lua scripts (``tokens_*.lua``
  beside it), TTL from the server clock, confirm into durable claims, timeline scan
  (:mod:`.tokens_model` holds the pure parts);
* :mod:`.refusals` - an RM's refusal of a reservation, as it travels back to a broker.

Below both sides: the broker (:mod:`grid_tasks.broker`) plans and takes tokens, and a
resource manager (:mod:`grid_tasks.scheduling.grid_reservations`) checks them before it
starts a bound job, so neither imports the other to get at them.
"""
