"""The Legion-style broker: collection, planner, enactor and reservation tokens.

* :mod:`.collection` - every resource (RMs and nodes) with topology and live registry
  attributes, queried in MIL (QueryCollection); ``allow_users``/``allow_groups``/
  ``allow_hosts`` restrict who may use a resource; durable SQL reservations as claims;
* :mod:`.planner` - pure: ordered candidate schedules and difference sets;
* :mod:`.tokens` - reservation tokens in Redis: atomic Lua scripts (``tokens_*.lua``
  beside it), TTL from the server clock, confirm into durable claims, timeline scan;
* :mod:`.enactor` - walks candidate schedules, takes tokens as difference sets,
  confirms through the RMs (which may veto) or moves on;
* :mod:`.live` - the live broker over the RMs' tasks: :mod:`.placement` (which RMs may
  hold each component), :mod:`.estimates`/:mod:`.remote` (parallel estimate calls),
  :mod:`.holds` (``reserve`` per placement as the enactor's confirm hook),
  :mod:`.coreservation` (the result); :mod:`.grid_jobs` co-reserves then submits a
  DUROC job (``Grid.job_request``); :mod:`.gridres`/:mod:`.gridcli` are the grid-level
  ``showstart``/``setres``/``showres``/``releaseres``.

The RMs' side (:mod:`grid_tasks.scheduling.rm_tasks`, native or Slurm alike) is never
imported here: the broker sends its tasks by name (:mod:`.remote`).
"""
