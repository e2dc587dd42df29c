"""Self-signed RSA keys and certificates for message signing and Redis TLS.

There is no certificate authority: each host makes its own key pair with
:func:`init_keys` (``grid-tasks keys init``) and every host's certificate store
holds the certificates of all the signers it trusts (``grid-tasks keys trust``).
Celery identifies a signer by its certificate's issuer and serial number, so
every certificate gets a fresh random serial.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from grid_tasks.private_files import private_dir
from grid_tasks.security.config import CERT_FILE, KEY_FILE, STORE_DIR
from grid_tasks.security.errors import KeyMaterialError

DEFAULT_DAYS = 365
DEFAULT_KEY_SIZE = 3072


@dataclass(frozen=True)
class KeyPaths:
    """Where :func:`init_keys` put the key, the certificate and the trusted store."""

    key: Path
    cert: Path
    cert_store: Path

    def env(self) -> dict[str, str]:
        """The ``GRID_TASKS_SIGNING*`` variables that use these files."""
        return {"GRID_TASKS_SIGNING": "1", "GRID_TASKS_SIGNING_KEY": str(self.key),
                "GRID_TASKS_SIGNING_CERT": str(self.cert),
                "GRID_TASKS_SIGNING_CERT_STORE": str(self.cert_store)}


@dataclass(frozen=True)
class CertInfo:
    """What ``grid-tasks keys show`` prints about one certificate."""

    path: Path
    subject: str
    issuer: str
    serial: int
    not_before: dt.datetime
    not_after: dt.datetime
    fingerprint_sha256: str
    key_bits: int
    hosts: tuple[str, ...]

    def expired(self, now: dt.datetime) -> bool:
        return not self.not_before <= now < self.not_after

    def to_dict(self, now: dt.datetime) -> dict[str, object]:
        return {"path": str(self.path), "subject": self.subject, "issuer": self.issuer,
                "serial": str(self.serial), "not_before": self.not_before.isoformat(),
                "not_after": self.not_after.isoformat(), "expired": self.expired(now),
                "sha256": self.fingerprint_sha256, "key_bits": self.key_bits,
                "hosts": list(self.hosts)}


def self_signed(common_name: str, *, now: dt.datetime, days: int = DEFAULT_DAYS,
                hosts: tuple[str, ...] = (), key_size: int = DEFAULT_KEY_SIZE,
                organization: str = "grid_tasks", unit: str | None = None) -> tuple[bytes, bytes]:
    """A new RSA key and a self-signed certificate for it: ``(key_pem, cert_pem)``.

    ``hosts`` (DNS names or IP addresses) go into the subject alternative name,
    which TLS clients check; signing certificates need none.
    """
    if days <= 0:
        raise KeyMaterialError(f"certificate lifetime must be positive, not {days} days")
    key = rsa.generate_private_key(public_exponent=65537, key_size=key_size)
    parts = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization)]
    if unit:  # the role: /O=grid_tasks/OU=user/CN=alice
        parts.append(x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, unit))
    name = x509.Name([*parts, x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    builder = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
               .public_key(key.public_key()).serial_number(x509.random_serial_number())
               .not_valid_before(now - dt.timedelta(minutes=5))  # tolerate clock skew
               .not_valid_after(now + dt.timedelta(days=days))
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True))
    if hosts:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(h) for h in hosts]), critical=False)
    cert = builder.sign(key, hashes.SHA256())
    key_pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


def _general_name(host: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(host))
    except ValueError:
        return x509.DNSName(host)


def init_keys(directory: Path, common_name: str, *, now: dt.datetime,
              days: int = DEFAULT_DAYS, hosts: tuple[str, ...] = (),
              key_size: int = DEFAULT_KEY_SIZE, force: bool = False) -> KeyPaths:
    """Write ``worker.key`` (mode 0600), ``worker.pem`` and ``certs/worker.pem`` in ``directory``.

    Refuses to overwrite an existing key unless ``force``: replacing a key
    silently would make every peer that trusts the old certificate refuse us.
    """
    paths = KeyPaths(directory / KEY_FILE, directory / CERT_FILE, directory / STORE_DIR)
    if paths.key.exists() and not force:
        raise KeyMaterialError(f"{paths.key} already exists: use --force to replace it "
                               "(peers must then trust the new certificate)")
    key_pem, cert_pem = self_signed(common_name, now=now, days=days, hosts=hosts,
                                    key_size=key_size)
    try:
        private_dir(directory)  # holds the private key
        paths.cert_store.mkdir(exist_ok=True)
        _write_private(paths.key, key_pem)
        paths.cert.write_bytes(cert_pem)
        (paths.cert_store / CERT_FILE).write_bytes(cert_pem)
    except OSError as exc:
        raise KeyMaterialError(f"cannot write keys into {directory}: {exc.strerror}") from None
    return paths


def _write_private(path: Path, data: bytes) -> None:
    if path.exists():
        path.unlink()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def trust(cert: Path, store: Path, name: str | None = None) -> Path:
    """Copy a peer's certificate into the trusted ``store``; the new file's path."""
    info = describe(cert)
    for existing in store_certificates(store):
        if (existing.issuer, existing.serial) == (info.issuer, info.serial):
            raise KeyMaterialError(f"{cert}: already trusted as {existing.path}")
    store.mkdir(parents=True, exist_ok=True)
    target = store / (name or f"{info.serial:x}.pem")
    if target.exists():
        raise KeyMaterialError(f"{target} exists: choose another --name")
    shutil.copyfile(cert, target)
    return target


def describe(path: Path) -> CertInfo:
    """Read a PEM certificate; :class:`KeyMaterialError` if it is missing or not one."""
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except OSError as exc:
        raise KeyMaterialError(f"{path}: {exc.strerror or exc}") from None
    except ValueError:
        raise KeyMaterialError(f"{path}: not a PEM certificate") from None
    public = cert.public_key()
    bits = public.key_size if isinstance(public, rsa.RSAPublicKey) else 0
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        hosts = tuple(str(v) for v in san.get_values_for_type(x509.DNSName)) + tuple(
            str(v) for v in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        hosts = ()
    return CertInfo(path, cert.subject.rfc4514_string(), cert.issuer.rfc4514_string(),
                    cert.serial_number, cert.not_valid_before_utc, cert.not_valid_after_utc,
                    cert.fingerprint(hashes.SHA256()).hex(":"), bits, hosts)


def store_certificates(store: Path) -> list[CertInfo]:
    """Every certificate of a trusted store directory (each file must be one)."""
    if not store.is_dir():
        raise KeyMaterialError(f"{store}: no such certificate store directory")
    return [describe(p) for p in sorted(store.iterdir()) if p.is_file()]


def check_key_matches(key: Path, cert: Path) -> None:
    """Raise :class:`KeyMaterialError` unless ``key`` is the private half of ``cert``."""
    describe(cert)  # a typed error for a missing or malformed certificate
    try:
        private = serialization.load_pem_private_key(key.read_bytes(), password=None)
    except OSError as exc:
        raise KeyMaterialError(f"{key}: {exc.strerror or exc}") from None
    except (ValueError, TypeError):
        raise KeyMaterialError(f"{key}: not an unencrypted PEM private key") from None
    public = x509.load_pem_x509_certificate(cert.read_bytes()).public_key()
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if private.public_key().public_bytes(*fmt) != public.public_bytes(*fmt):
        raise KeyMaterialError(f"{key} is not the key of {cert}")
