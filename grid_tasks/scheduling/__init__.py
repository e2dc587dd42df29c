"""Live Maui scheduling: one iteration per resource manager over the SQL state.

* :func:`grid_tasks.effects.trigger_iteration` (submission, completion,
  cancellation, node change) sets the RM's *dirty* flag and enqueues
  ``grid_tasks.scheduling.tasks.iterate`` unless one is already queued;
* the task takes a non-blocking Redis lock (one iteration per RM at a time) and
  runs while ``GETDEL dirty`` returns a value, so triggers arriving during a run
  fold into ONE more run; after releasing it re-triggers if a flag slipped in;
* beat also fires it every ``RMPOLLINTERVAL`` of the RM's ``maui.cfg``;
* node changes fire it at once: a node daemon triggers it when it registers, says
  goodbye (Down) or beats again after its heartbeat expired; a node that just goes
  silent is noticed by :mod:`grid_tasks.scheduling.nodes` (beat runs its watch
  every heartbeat TTL), and its jobs then follow the node failure policy.

The pure loader :func:`~grid_tasks.scheduling.state.load_scheduler` is what the
operator CLI uses for showstart / showbf / diagnose.

The RM side of the metascheduler protocol (estimate, reserve, release, ...) is one
interface, :class:`~grid_tasks.scheduling.rm_backend.RMBackend`, implemented by the
native Maui RM (:mod:`.native_rm` over :mod:`.rm_service`) and by a Slurm cluster
(:mod:`.slurm_rm`), picked per RM from the topology (:mod:`.rm_kinds`) and served as
Celery tasks by :mod:`.rm_tasks`, which the broker calls by name only.

A Slurm RM's GRAM jobs take the same interface's job side: its gatekeeper stores and
submits them (:mod:`.slurm_jobs`), and one follower per RM (:mod:`.slurm_watch`, in
the workers serving its gatekeeper queue) records their states, exit codes and output
(:mod:`.slurm_follow`); no Maui iteration runs for a Slurm RM.
"""

from __future__ import annotations
