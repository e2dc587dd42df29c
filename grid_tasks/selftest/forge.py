"""Forged task messages, exactly as an attacker with broker access would push them.

Celery signs only a message's body (``auth`` serializer); the headers, including
the task name, are whatever the sender writes.  These helpers build protocol-2 task
messages by hand - unsigned, or sealed with any key pair - and publish them straight
into a queue, bypassing every client-side check.  Used by ``selftest --security``
and by the tests of signing on live workers.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import kombu
from celery.security.certificate import Certificate
from celery.security.key import PrivateKey
from celery.security.serialization import SecureSerializer

from grid_tasks.gram import keys as gram_keys
from grid_tasks.gram.launch import LaunchRequest
from grid_tasks.gram.tasks import LAUNCH
from grid_tasks.security.connections import redis_client
from grid_tasks.security.keys import KeyPaths
from grid_tasks.security.signing import TASK_KEY


def sealed(paths: KeyPaths, body: list[Any]) -> bytes:
    """``body`` signed with the key pair ``paths``, exactly as a Celery sender would."""
    signer = SecureSerializer(PrivateKey(paths.key.read_text()),
                              Certificate(paths.cert.read_text()), None)
    out = signer.serialize(body)
    return out.encode() if isinstance(out, str) else out


def push(broker_url: str, queue: str, task: str, body: bytes | list[Any], *,
         signed: bool) -> str:
    """Publish a protocol-2 task message for ``task`` straight into ``queue``; its id."""
    task_id = str(uuid.uuid4())
    headers = {"lang": "py", "task": task, "id": task_id, "root_id": task_id,
               "parent_id": None, "group": None, "retries": 0, "eta": None, "expires": None,
               "argsrepr": "", "kwargsrepr": "", "origin": "attacker"}
    options = ({"content_type": "application/data", "content_encoding": "utf-8"} if signed
               else {"serializer": "json"})
    with kombu.Connection(broker_url) as conn:
        conn.Producer().publish(body, routing_key=queue, exchange="", headers=headers,
                                delivery_mode=2, **options)
    return task_id


def task_body(task: str, kwargs: dict[str, Any]) -> list[Any]:
    """A task body ``[args, kwargs, embed]`` naming ``task`` in its (signed) embed."""
    return [[], kwargs, {TASK_KEY: task}]


def launch_body(settings: Any, job_id: int, marker: Path, *, rm: str = "rmA",
                node: str = "node1", task: str = LAUNCH) -> list[Any]:
    """A launch of ``touch marker`` on ``rm``/``node`` for job ``job_id``, with a valid
    launch token in Redis (so only the message's trust decides whether it runs)."""
    token = f"tok{job_id}"
    client = redis_client(settings, settings.redis_url)
    try:
        client.set(gram_keys.token_key(job_id), token)
    finally:
        client.close()
    req = LaunchRequest(job_id=job_id, rm=rm, node=node, token=token,
                        executable="/usr/bin/touch", arguments=[str(marker)], tasks=1,
                        rank_offset=0, size=1, nodes=1, job_type="single")
    return task_body(task, {"rm": rm, "node": node, "on_node": True,
                            "request": req.to_dict()})
