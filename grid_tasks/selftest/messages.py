"""Attacks by message: forged launches into a node's queue, a user's remote-control
shutdown, a submit signed with a key no gatekeeper trusts (issue 20, findings 1 and 3)."""

from __future__ import annotations

import socket
import time
from typing import TYPE_CHECKING

from grid_tasks.gram.door import SUBMIT
from grid_tasks.gram.tasks import LAUNCH
from grid_tasks.node.registry import NodeRegistry
from grid_tasks.node.tasks import NODE_CHECK
from grid_tasks.security.roles import Role
from grid_tasks.selftest.forge import launch_body, push, sealed, task_body
from grid_tasks.selftest.rows import Attack

if TYPE_CHECKING:
    from grid_tasks.selftest.target import Target

RM, NODE = "rmA", "node1"
QUEUE = f"node.{RM}.{NODE}"


class _ForgedLaunch(Attack):
    """A launch of ``touch MARKER`` for a job that does not exist, pushed raw into
    ``node.rmA.node1``; refused if the refusal is counted and the marker never appears."""

    kind = ""  # the refusal kind the node must count
    signer: Role | None = None  # None: unsigned
    body_task = LAUNCH  # the task the signed body names

    def perform(self, target: "Target") -> tuple[bool, str]:
        marker = target.marker(self.name)
        settings = target.fg.settings
        body = launch_body(settings, target.forged_job_id(), marker,
                           rm=RM, node=NODE, task=self.body_task)
        before = target.refusals(QUEUE)  # this node's own: others refuse things too
        if self.signer is None:
            push(settings.broker_url, QUEUE, LAUNCH, body, signed=False)
        else:
            message = sealed(target.fg.keys.for_role(self.signer), body)
            push(settings.broker_url, QUEUE, LAUNCH, message, signed=True)
        counted = target.await_refusal(self.kind, before, also=marker.exists, queue=QUEUE)
        time.sleep(0.3)  # a launch that got through would have touched it by now
        if marker.exists():
            return False, f"the launch RAN: {marker.name} created"
        if not counted:
            return False, f"no {self.kind!r} refusal counted in time (marker absent)"
        return True, f"refused ({self.kind!r} counted); marker absent"


class UnsignedLaunch(_ForgedLaunch):
    name = "unsigned-launch"
    expected = "refused: unsigned; no process started"
    kind = "unsigned"


class UserSignedLaunch(_ForgedLaunch):
    name = "user-signed-launch"
    expected = "refused: role (users may not launch); no process started"
    kind, signer = "role", Role.USER


class NodeSignedLaunch(_ForgedLaunch):
    name = "node-signed-launch"
    expected = "refused: role (nodes may not launch); no process started"
    kind, signer = "role", Role.NODE


class RenamedLaunch(_ForgedLaunch):
    name = "re-headed-launch"
    expected = "refused: task_mismatch (a scheduler's node check re-headed as a launch)"
    kind, signer, body_task = "task_mismatch", Role.SCHEDULER, NODE_CHECK


class UserShutdown(Attack):
    name = "user-shutdown"
    expected = ("refused: control (users may not send remote control); scheduler and node "
                "live on, node keeps beating")

    def perform(self, target: "Target") -> tuple[bool, str]:
        fg = target.fg
        daemon = fg.nodes[NODE]
        before = target.refusals()
        host = socket.gethostname()
        # this process holds the user key: its control messages are user-signed.  A lean
        # node daemon has no mailbox at all (grid_tasks.node.worker_config): the
        # scheduler worker's is the one that must refuse (and count) it.
        fg.grid.app.control.broadcast("shutdown", destination=[f"{NODE}.{RM}@{host}",
                                                               f"scheduler@{host}"])
        counted = target.await_refusal("control", before)
        refused_at = time.time()
        registry = NodeRegistry.from_url(fg.settings.redis_url, fg.settings.heartbeat_ttl)
        deadline = time.monotonic() + fg.heartbeat_ttl + 2
        beating = False
        while time.monotonic() < deadline and not beating:
            beat = registry.status(RM, NODE).last_heartbeat
            beating = beat is not None and beat > refused_at + fg.heartbeat
            time.sleep(0.1)
        alive = daemon.alive() and (fg.scheduler is None or fg.scheduler.alive())
        happened = (f"{'control refusal counted' if counted else 'no control refusal counted'}"
                    f"; scheduler and {NODE} {'alive' if alive else 'not both alive'}, "
                    f"{'heartbeating' if beating else 'NO fresh heartbeat'}")
        return counted and alive and beating, happened


class UntrustedSubmit(Attack):
    name = "untrusted-submit"
    expected = "refused: unknown_signer; nothing stored in SQL"

    def perform(self, target: "Target") -> tuple[bool, str]:
        settings = target.fg.settings
        jobs = target.job_count()
        body = task_body(SUBMIT, {"rm": RM, "rsl": "&(executable=/bin/true)",
                                  "creds": {}, "idempotency_key": None, "extra_env": None,
                                  "variables": None, "source": "<selftest>"})
        before = target.refusals()
        push(settings.broker_url, f"gram.{RM}", SUBMIT, sealed(target.untrusted, body),
             signed=True)
        counted = target.await_refusal("unknown_signer", before,
                                       also=lambda: target.job_count() != jobs)
        time.sleep(0.3)
        stored = target.job_count() - jobs
        if stored:
            return False, f"{stored} job(s) STORED for the untrusted signer"
        if not counted:
            return False, "no 'unknown_signer' refusal counted in time (nothing stored)"
        return True, "refused ('unknown_signer' counted); no job stored"
