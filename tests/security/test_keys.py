"""Self-signed keys and certificates, the trusted store."""

from __future__ import annotations

import datetime as dt
import stat

import pytest
from celery.security.certificate import Certificate, FSCertStore
from celery.security.key import PrivateKey
from cryptography.hazmat.primitives import hashes

from grid_tasks.security.errors import KeyMaterialError
from grid_tasks.security.keys import (
    check_key_matches,
    describe,
    init_keys,
    self_signed,
    store_certificates,
    trust,
)

NOW = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
SMALL = 2048  # fast enough for tests


def test_init_writes_private_key_certificate_and_store(tmp_path):
    paths = init_keys(tmp_path / "k", "host-a", now=NOW, days=10, key_size=SMALL)
    assert stat.S_IMODE(paths.key.stat().st_mode) == 0o600
    info = describe(paths.cert)
    assert "CN=host-a" in info.subject and info.subject == info.issuer  # self-signed
    assert info.not_after - NOW == dt.timedelta(days=10) and info.key_bits == SMALL
    assert [c.serial for c in store_certificates(paths.cert_store)] == [info.serial]
    check_key_matches(paths.key, paths.cert)
    assert paths.env()["GRID_TASKS_SIGNING_KEY"] == str(paths.key)


def test_celery_signs_with_the_key_and_verifies_with_the_store(tmp_path):
    now = dt.datetime.now(dt.timezone.utc)
    paths = init_keys(tmp_path, "signer", now=now, key_size=SMALL)
    key = PrivateKey(paths.key.read_text())
    cert = Certificate(paths.cert.read_text())
    signature = key.sign(b"payload", hashes.SHA256())
    store = FSCertStore(str(paths.cert_store))
    store[cert.get_id()].verify(b"payload", signature, hashes.SHA256())


def test_init_refuses_to_overwrite_without_force(tmp_path):
    first = init_keys(tmp_path, "a", now=NOW, key_size=SMALL)
    serial = describe(first.cert).serial
    with pytest.raises(KeyMaterialError, match="already exists"):
        init_keys(tmp_path, "a", now=NOW, key_size=SMALL)
    second = init_keys(tmp_path, "a", now=NOW, key_size=SMALL, force=True)
    assert describe(second.cert).serial != serial
    check_key_matches(second.key, second.cert)


def test_mismatched_key_and_bad_files_are_typed(tmp_path):
    a = init_keys(tmp_path / "a", "a", now=NOW, key_size=SMALL)
    b = init_keys(tmp_path / "b", "b", now=NOW, key_size=SMALL)
    with pytest.raises(KeyMaterialError, match="is not the key of"):
        check_key_matches(a.key, b.cert)
    (tmp_path / "junk.pem").write_text("hello")
    with pytest.raises(KeyMaterialError, match="not a PEM certificate"):
        describe(tmp_path / "junk.pem")
    with pytest.raises(KeyMaterialError):
        describe(tmp_path / "missing.pem")
    with pytest.raises(KeyMaterialError, match="no such certificate store"):
        store_certificates(tmp_path / "nostore")


def test_trust_adds_a_peer_once(tmp_path):
    a = init_keys(tmp_path / "a", "a", now=NOW, key_size=SMALL)
    b = init_keys(tmp_path / "b", "b", now=NOW, key_size=SMALL)
    added = trust(b.cert, a.cert_store)
    assert {c.serial for c in store_certificates(a.cert_store)} == \
        {describe(a.cert).serial, describe(b.cert).serial}
    assert describe(added).serial == describe(b.cert).serial
    with pytest.raises(KeyMaterialError, match="already trusted"):
        trust(b.cert, a.cert_store)


def test_tls_certificate_names_its_hosts():
    _, cert_pem = self_signed("redis", now=NOW, hosts=("127.0.0.1", "localhost"),
                              key_size=SMALL)
    from cryptography import x509

    cert = x509.load_pem_x509_certificate(cert_pem)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(i) for i in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert san.get_values_for_type(x509.DNSName) == ["localhost"]
    with pytest.raises(KeyMaterialError, match="positive"):
        self_signed("x", now=NOW, days=0)
