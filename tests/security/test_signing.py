"""Message signing with a real worker: signed tasks run, anything unsigned is refused.

The worker is a subprocess (``celery -A tests.security.signing_app worker``);
the client runs here.  Celery installs the ``auth`` serializer process-wide,
so the ``kombu_registry`` fixture puts kombu's registry back afterwards.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import kombu
import pytest
import redis
from celery.security.certificate import Certificate
from celery.security.key import PrivateKey
from celery.security.serialization import SecureSerializer
from kombu.serialization import registry

from grid_tasks.celery_app import create_app
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.keys import KeyPaths, init_keys
TOUCH = "tests.security.signing_app.touch"  # defined there; not imported here: it builds an app

REPO_ROOT = Path(__file__).resolve().parents[2]
QUEUE = "signed"


@pytest.fixture
def kombu_registry() -> Iterator[None]:
    saved = {name: getattr(registry, name) for name in
             ("_encoders", "_decoders", "_disabled_content_types", "type_to_name",
              "name_to_type")}
    saved = {k: v.copy() for k, v in saved.items()}
    defaults = (registry._default_encode, registry._default_content_type,
                registry._default_content_encoding)
    yield
    for name, value in saved.items():
        setattr(registry, name, value)
    (registry._default_encode, registry._default_content_type,
     registry._default_content_encoding) = defaults


def _keys(directory: Path) -> KeyPaths:
    return init_keys(directory, directory.name, now=dt.datetime.now(dt.timezone.utc),
                     key_size=2048)


@pytest.fixture
def signed_worker(settings, tmp_path) -> Iterator[tuple]:
    """A worker subprocess that accepts only messages signed by a trusted key."""
    keys = _keys(tmp_path / "keys")
    signed = settings.replace(signing=SigningSettings(True, keys.key, keys.cert,
                                                      keys.cert_store))
    env = {k: v for k, v in os.environ.items() if not k.startswith("GRID_TASKS_")}
    env.update(signed.to_env(), PYTHONPATH=str(REPO_ROOT), PYTHONUNBUFFERED="1")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tests.security.signing_app", "worker",
             "-Q", QUEUE, "-P", "solo", "-l", "INFO", "--without-gossip", "--without-mingle",
             "--without-heartbeat"], cwd=REPO_ROOT, env=env, stdout=out,
            stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield signed, keys, log
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode is not None


def _publish_raw(settings, body: bytes | dict, content_type: str | None, task_id: str,
                 serializer: str | None = None) -> None:
    """A task message in Celery's protocol 2, published straight through kombu."""
    headers = {"lang": "py", "task": TOUCH, "id": task_id, "root_id": task_id,
               "parent_id": None, "group": None, "retries": 0, "eta": None,
               "expires": None, "argsrepr": "", "kwargsrepr": "", "origin": "forger"}
    with kombu.Connection(settings.broker_url) as conn:
        producer = conn.Producer()
        options = ({"serializer": serializer} if serializer else
                   {"content_type": content_type, "content_encoding": "utf-8"})
        producer.publish(body, routing_key=QUEUE, exchange="", headers=headers,
                         delivery_mode=2, **options)


def _forged_with(keys: KeyPaths, payload: list) -> bytes:
    """``payload`` signed by ``keys`` (a key the worker does not trust)."""
    forger = SecureSerializer(PrivateKey(keys.key.read_text()),
                              Certificate(keys.cert.read_text()), None)
    sealed = forger.serialize(payload)
    return sealed.encode() if isinstance(sealed, str) else sealed


def test_signed_tasks_run_and_unsigned_messages_are_refused(
        signed_worker, settings, celery_app_factory, kombu_registry, tmp_path):
    signed, keys, log = signed_worker
    client = create_app(signed, main="signing_client")
    try:
        first = tmp_path / "signed-1"
        res = client.send_task(TOUCH, args=[str(first), "one"], queue=QUEUE)
        assert res.get(timeout=60) == "one" and first.read_text() == "one"

        victims = {name: tmp_path / name for name in
                   ("plain-app", "raw-json", "untrusted-key", "tampered")}
        # 1. an ordinary app without the key (JSON messages)
        plain = celery_app_factory(settings)
        plain.send_task(TOUCH, args=[str(victims["plain-app"]), "x"], queue=QUEUE)
        # 2. a raw kombu message in JSON
        _publish_raw(settings, [[str(victims["raw-json"]), "x"], {}, {}], None,
                     str(uuid.uuid4()), serializer="json")
        # 3. signed by a key whose certificate the worker does not trust
        other = _keys(tmp_path / "other")
        payload = [[str(victims["untrusted-key"]), "x"], {}, {}]
        _publish_raw(settings, _forged_with(other, payload), "application/data",
                     str(uuid.uuid4()))
        # 4. signed by the trusted key, then the body changed in transit
        sealed = _forged_with(keys, [[str(tmp_path / "tamper0"), "x"], {}, {}])
        tampered = _retarget(sealed, "tamper0", "tampered")
        _publish_raw(settings, tampered, "application/data", str(uuid.uuid4()))

        last = tmp_path / "signed-2"
        res = client.send_task(TOUCH, args=[str(last), "two"], queue=QUEUE)
        assert res.get(timeout=60) == "two"  # FIFO: every refused message came first
    finally:
        client.close()
    for name, path in victims.items():
        assert not path.exists(), f"{name}: an unsigned or forged message ran"
    assert not (tmp_path / "tamper0").exists()
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        assert broker.llen(QUEUE) == 0  # refused, not left to be redelivered
    finally:
        broker.close()
    text = log.read_text(errors="replace")
    assert text.count("succeeded") == 2, text[-3000:]


def _retarget(sealed: bytes, old: str, new: str) -> bytes:
    """Change the signed body without re-signing (what an attacker on the wire could do)."""
    import base64

    raw = base64.b64decode(sealed)
    assert old.encode() in raw
    return base64.b64encode(raw.replace(old.encode(), new.encode()))


def test_grid_node_daemon_with_signing_runs_only_signed_node_checks(
        node_worker, settings, celery_app_factory, kombu_registry, tmp_path):
    """The real ``grid-tasks worker --rm --node`` daemon, switched on by the environment."""
    from grid_tasks.node.tasks import NODE_CHECK, check_options

    keys = _keys(tmp_path / "keys")
    signed = settings.replace(signing=SigningSettings(True, keys.key, keys.cert,
                                                      keys.cert_store))
    node_worker("rmA", "node1", **signed.signing.to_env())
    unsigned_client = celery_app_factory(settings)
    client = create_app(signed, main="signing_client")
    try:
        first = client.send_task(NODE_CHECK, **check_options("rmA", "node1"))
        assert first.get(timeout=30)["served_by"]["node"] == "node1"
        refused = unsigned_client.send_task(NODE_CHECK, **check_options("rmA", "node1"))
        last = client.send_task(NODE_CHECK, **check_options("rmA", "node1"))
        assert last.get(timeout=30)["served_by"]["node"] == "node1"
        # The unsigned check was consumed before the last one and never ran: its sender
        # was told so (the refusal is its failure), instead of waiting for ever.
        outcome = unsigned_client.AsyncResult(refused.id)
        assert outcome.state == "FAILURE" and "untrusted content" in str(outcome.result)
    finally:
        client.close()
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        assert broker.llen("node.rmA.node1") == 0
    finally:
        broker.close()
