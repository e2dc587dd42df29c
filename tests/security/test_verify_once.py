"""A signed message's RSA signature is checked once per process, keyed by its exact bytes.

A worker decodes each task message twice (its consumer, then its pool, with the same
bytes); the second decode reuses the first verification (bench_gram --signing).  What
must not change: other bytes (a tampered copy, another message) are verified on their
own; a refusal is never remembered; each decode returns fresh objects."""

from __future__ import annotations

import base64
import datetime as dt
from pathlib import Path

import pytest
from celery.exceptions import SecurityError
from celery.security.certificate import Certificate
from celery.security.key import PrivateKey

from grid_tasks.security.role_keys import GridKeys, ensure_grid_keys
from grid_tasks.security.roles import Role
from grid_tasks.security.signing import SIGNER_KEY, SignedSerializer
from grid_tasks.security.trust import TrustStore


@pytest.fixture(scope="module")
def grid_keys(tmp_path_factory) -> GridKeys:
    return ensure_grid_keys(tmp_path_factory.mktemp("keys"), "alice",
                            now=dt.datetime.now(dt.timezone.utc))


def _serializer(keys: GridKeys, role: Role) -> SignedSerializer:
    signing = keys.signing(role)
    return SignedSerializer(PrivateKey(Path(signing.key).read_bytes()),
                            Certificate(Path(signing.cert).read_text()),
                            TrustStore(Path(signing.cert_store)))


@pytest.fixture
def verifications(monkeypatch) -> list[bytes]:
    """Every RSA signature check made (the real check runs; this only counts it)."""
    seen: list[bytes] = []
    real = Certificate.verify

    def counting(self, data, signature, digest):
        seen.append(signature)
        return real(self, data, signature, digest)

    monkeypatch.setattr(Certificate, "verify", counting)
    return seen


def _body(path: str) -> tuple:
    return ([path], {"mode": "x"}, {"grid_task": "tests.touch", "callbacks": None})


def test_the_second_decode_of_the_same_bytes_does_not_verify_again(grid_keys, verifications):
    user, worker = _serializer(grid_keys, Role.USER), _serializer(grid_keys, Role.SCHEDULER)
    sealed = user.serialize(_body("/tmp/a"))
    first, second = worker.deserialize(sealed), worker.deserialize(sealed)
    assert len(verifications) == 1
    assert first == second and first[2][SIGNER_KEY]["roles"] == ["user"]
    assert first[0] is not second[0] and first[2] is not second[2]  # fresh objects
    worker.deserialize(user.serialize(_body("/tmp/b")))  # another message: its own check
    assert len(verifications) == 2


def test_tampered_bytes_are_refused_after_the_original_was_verified(grid_keys, verifications):
    user, worker = _serializer(grid_keys, Role.USER), _serializer(grid_keys, Role.SCHEDULER)
    sealed = user.serialize(_body("/tmp/aaaa"))
    worker.deserialize(sealed)
    raw = base64.b64decode(sealed)
    tampered = base64.b64encode(raw.replace(b"/tmp/aaaa", b"/tmp/bbbb"))
    for _ in range(2):  # a refusal is not remembered as anything: checked each time
        with pytest.raises(SecurityError):
            worker.deserialize(tampered)
    assert len(verifications) == 3


def test_an_untrusted_signer_is_refused_every_time(grid_keys, tmp_path, verifications):
    stranger_keys = ensure_grid_keys(tmp_path / "other", "mallory",
                                     now=dt.datetime.now(dt.timezone.utc))
    sealed = _serializer(stranger_keys, Role.USER).serialize(_body("/tmp/c"))
    worker = _serializer(grid_keys, Role.SCHEDULER)
    for _ in range(2):
        with pytest.raises(SecurityError, match="unknown signer"):
            worker.deserialize(sealed)
