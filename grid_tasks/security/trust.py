"""The trusted signers of a host, each with its subject and roles.

A certificate store is a directory.  Certificates in its ``user/``, ``scheduler/``,
``node/`` and ``operator/`` folders are trusted in that role (see :mod:`grid_tasks.security.roles`);
one certificate may sit in several.  A certificate directly in the store (the layout
of ``grid-tasks keys init`` before roles existed) is trusted in every role: putting
it there is the operator's explicit choice.

Celery names a signer by its certificate's issuer and serial number
(``Certificate.get_id()``); :class:`TrustStore` maps that name to a :class:`Signer`
carrying the subject in the slash form Globus uses for distinguished names
(``/O=grid_tasks/OU=user/CN=alice``), which the grid map maps to local accounts.
An expired certificate is left out with a warning instead of stopping the worker:
its signer is refused like an unknown one.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path

from celery.security.certificate import Certificate
from cryptography import x509
from cryptography.x509.oid import NameOID

from grid_tasks.security.errors import KeyMaterialError
from grid_tasks.security.roles import ALL_ROLES, Role

log = logging.getLogger(__name__)

_SHORT = {NameOID.COUNTRY_NAME: "C", NameOID.STATE_OR_PROVINCE_NAME: "ST",
          NameOID.LOCALITY_NAME: "L", NameOID.ORGANIZATION_NAME: "O",
          NameOID.ORGANIZATIONAL_UNIT_NAME: "OU", NameOID.COMMON_NAME: "CN",
          NameOID.DOMAIN_COMPONENT: "DC", NameOID.EMAIL_ADDRESS: "emailAddress"}


def slash_subject(name: x509.Name) -> str:
    """A distinguished name in Globus's slash form, most significant part first."""
    parts = []
    for attr in name:
        key = _SHORT.get(attr.oid, attr.oid.dotted_string)
        parts.append(f"/{key}={attr.value}")
    return "".join(parts)


@dataclass(frozen=True)
class Signer:
    """A verified signer: its subject, roles and Celery id."""

    subject: str
    roles: frozenset[Role]
    cert_id: str

    def to_embed(self) -> dict[str, object]:
        """The form carried in a decoded task message (JSON-ready)."""
        return {"subject": self.subject, "roles": sorted(r.value for r in self.roles)}


class TrustStore:
    """Every trusted certificate of a store directory, by Celery signer id."""

    def __init__(self, root: Path, *, now: dt.datetime | None = None) -> None:
        if not root.is_dir():
            raise KeyMaterialError(f"{root}: no such certificate store directory; make "
                                   "keys with `grid-tasks keys init`")
        self.root = root
        self._certs: dict[str, Certificate] = {}
        self._signers: dict[str, Signer] = {}
        moment = now or dt.datetime.now(dt.timezone.utc)
        for path, roles in _store_files(root):
            self._add(path, roles, moment)

    def _add(self, path: Path, roles: frozenset[Role], now: dt.datetime) -> None:
        try:
            cert = Certificate(path.read_text())
        except Exception as exc:  # OSError, or celery's SecurityError for a bad PEM
            raise KeyMaterialError(f"{path}: not a usable certificate ({exc})") from None
        raw = cert._cert  # celery keeps the cryptography object; it has no accessor
        if raw.not_valid_after_utc <= now:
            log.warning("trust store: %s expired on %s; its signer is refused", path,
                        raw.not_valid_after_utc.isoformat())
            return
        cert_id = cert.get_id()
        known = self._signers.get(cert_id)
        merged = roles | (known.roles if known else frozenset())
        self._certs[cert_id] = cert
        self._signers[cert_id] = Signer(slash_subject(raw.subject), merged, cert_id)

    def certificate(self, cert_id: str) -> Certificate:
        """The certificate of ``cert_id``; KeyError when it is not trusted."""
        return self._certs[cert_id]

    def signer(self, cert_id: str) -> Signer | None:
        return self._signers.get(cert_id)

    def signers(self) -> list[Signer]:
        return sorted(self._signers.values(), key=lambda s: s.subject)


def _store_files(root: Path) -> list[tuple[Path, frozenset[Role]]]:
    out: list[tuple[Path, frozenset[Role]]] = []
    for entry in sorted(root.iterdir()):
        if _is_cert_file(entry):
            out.append((entry, ALL_ROLES))
        elif entry.is_dir() and entry.name in {r.value for r in Role}:
            role = frozenset({Role(entry.name)})
            out += [(p, role) for p in sorted(entry.iterdir()) if _is_cert_file(p)]
    return out


def _is_cert_file(path: Path) -> bool:
    return path.is_file() and not path.name.startswith(".")
