"""Celery message signing that tells the task who signed it.

Celery's stock ``auth`` serializer signs each task body with the sender's RSA key
and verifies it against a certificate store, but then drops what it learned: a
task cannot ask *who* sent it.  :class:`SignedSerializer` builds on it (same wire
format, same ``auth`` name, so stock Celery peers interoperate) and, after the
signature verifies, puts the signer into the decoded message's ``embed`` part as
``grid_signer`` (subject and roles from :class:`~grid_tasks.security.trust.TrustStore`).
Celery hands the embed to the task as request attributes: ``self.request.grid_signer``.
A sender cannot forge it: the key is overwritten after verification.

Only the body is signed, not the headers (that is Celery's format), so the sender
also puts the task name into the signed embed (``grid_task``, by a
``before_task_publish`` hook) and :class:`GridTask` refuses a message whose header
names another task: a signed body cannot be replayed as a different task.

With signing on, every task message is signed and a worker accepts only signed
ones (``accept_content=['auth']``); results and events stay plain JSON.  kombu's
serializer registry is process-wide, so a process runs signed or unsigned apps,
with one key, not both.
"""

from __future__ import annotations

import datetime as dt
import functools
from typing import Any

from celery import Task
from celery.exceptions import SecurityError
from celery.security.certificate import Certificate
from celery.security.key import PrivateKey
from celery.security.serialization import SecureSerializer
from celery.security.utils import reraise_errors
from celery.signals import before_task_publish
from kombu.serialization import disable_insecure_serializers, loads, registry
from kombu.utils.encoding import bytes_to_str

from grid_tasks.errors import ConfigError, GridTasksError
from grid_tasks.security.config import SigningSettings
from grid_tasks.security.errors import KeyMaterialError
from grid_tasks.security.keys import check_key_matches, describe
from grid_tasks.security.refusals import refuse
from grid_tasks.security.roles import CONTROL_ROLES, Role, roles_for
from grid_tasks.security.trust import Signer, TrustStore

AUTH = "auth"
SIGNER_KEY = "grid_signer"
TASK_KEY = "grid_task"


class MessageRefused(GridTasksError):
    """A signed message whose signer may not run its task (or that names another task)."""


def signing_config(signing: SigningSettings) -> dict[str, Any]:
    """The Celery settings that turn signing on (empty when it is off)."""
    if not signing.enabled:
        return {}
    return {
        "task_serializer": AUTH,
        "accept_content": [AUTH],
        "result_serializer": "json",
        "result_accept_content": ["json"],
        "security_key": str(signing.key),
        "security_certificate": str(signing.cert),
        "security_cert_store": str(signing.cert_store),
        "security_digest": "sha256",
    }


#: Verified messages a process remembers, by their exact bytes (see :meth:`_verify`).
VERIFIED_CACHE_SIZE = 256

#: What a verified message holds: its signer and signed body, content type, encoding.
Verified = tuple[Signer, bytes, str, str]


class SignedSerializer(SecureSerializer):  # type: ignore[misc]
    """Celery's ``auth`` serializer, verifying against a :class:`TrustStore` and
    recording the verified signer in the message's embed."""

    def __init__(self, key: PrivateKey, cert: Certificate, trust: TrustStore) -> None:
        super().__init__(key, cert, None, digest="sha256", serializer="json")
        self.trust = trust
        self._verify_once = functools.lru_cache(maxsize=VERIFIED_CACHE_SIZE)(self._verify)

    def deserialize(self, data: Any) -> Any:
        verify = self._verify_once if isinstance(data, (bytes, str)) else self._verify
        signer, signed, content_type, content_encoding = verify(data)
        body = loads(signed, content_type, content_encoding, force=True)
        if isinstance(body, dict) and "method" in body and not signer.roles & CONTROL_ROLES:
            reason = (f"signer role {_names(signer.roles)} may not send remote-control "
                      f"commands ({body.get('method')!r}; needs {_names(CONTROL_ROLES)})")
            self.on_refused(signer.subject, reason)
            raise SecurityError(reason)
        return with_signer(body, signer)

    def on_refused(self, subject: str, reason: str) -> None:
        """Hook for a refusal made while decoding (set by :func:`setup_signing`)."""

    def _verify(self, data: Any) -> Verified:
        """The signer and signed body of ``data``, after checking its RSA signature.

        A worker decodes each task message twice in one process (its consumer, then
        its pool, with the same bytes), so :meth:`deserialize` remembers the last
        :data:`VERIFIED_CACHE_SIZE` results by the message's exact bytes (an exact-equality
        lookup): the same bytes verify the same way against this process's trust store,
        which never changes after it is loaded.  Failures raise and are not remembered;
        every decode still parses the body afresh, so no two decodes share an object."""
        with reraise_errors("Unable to deserialize: {0!r}", (Exception,)):
            payload = self._unpack(data)
            cert_id = bytes_to_str(payload["signer"])
            signer = self.trust.signer(cert_id)
            if signer is None:
                raise SecurityError(f"unknown signer {cert_id!r}")
            self.trust.certificate(cert_id).verify(payload["body"], payload["signature"],
                                                   self._digest)
        return signer, payload["body"], payload["content_type"], payload["content_encoding"]


def with_signer(body: Any, signer: Signer) -> Any:
    """A task body ``(args, kwargs, embed)`` with the verified signer in its embed."""
    if isinstance(body, (list, tuple)) and len(body) == 3 and isinstance(body[2], (dict,
                                                                                  type(None))):
        embed = dict(body[2] or {})
        embed[SIGNER_KEY] = signer.to_embed()
        return (body[0], body[1], embed)
    return body


def signer_id(data: Any) -> str | None:
    """The signer id a (possibly refused) signed payload claims, for logs; None if none."""
    try:
        return bytes_to_str(SecureSerializer()._unpack(data)["signer"])
    except Exception:  # not a signed payload at all
        return None


def setup_signing(app: Any, signing: SigningSettings) -> bool:
    """Register the signer-revealing ``auth`` serializer if signing is on; True if it is.

    Raises :class:`ConfigError` naming the variable when a key, certificate or
    store is missing or unusable.
    """
    if not signing.enabled:
        return False
    signing.check_files()
    _check_own_certificate(signing)
    try:
        serializer = SignedSerializer(PrivateKey(signing.key.read_bytes()),  # type: ignore[union-attr]
                                      Certificate(signing.cert.read_text()),  # type: ignore[union-attr]
                                      TrustStore(signing.cert_store))  # type: ignore[arg-type]
    except (SecurityError, GridTasksError, OSError, ValueError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"message signing cannot start: {text}", source="environment",
                          key="GRID_TASKS_SIGNING") from None
    registry.register(AUTH, serializer.serialize, serializer.deserialize,
                      content_type="application/data", content_encoding="utf-8")
    disable_insecure_serializers(allowed=["json", AUTH])  # pickle, yaml, msgpack off
    serializer.on_refused = lambda subject, reason: refuse(  # type: ignore[method-assign]
        app, queue="pidbox", signer=subject, reason=reason)
    app.grid_trust = serializer.trust  # type: ignore[attr-defined]
    return True


def _check_own_certificate(signing: SigningSettings) -> None:
    """This process's certificate must be current and its key's: ConfigError naming its
    subject otherwise (every peer would refuse what it signs)."""
    assert signing.key is not None and signing.cert is not None
    try:
        info = describe(signing.cert)
        check_key_matches(signing.key, signing.cert)
    except KeyMaterialError as exc:
        raise ConfigError(f"message signing cannot start: {exc}", source="environment",
                          key="GRID_TASKS_SIGNING_CERT") from None
    now = dt.datetime.now(dt.timezone.utc)
    if info.expired(now):
        when = "expired on" if now >= info.not_after else "is valid only from"
        date = (info.not_after if now >= info.not_after else info.not_before).isoformat()
        raise ConfigError(f"this process's certificate for {info.subject} ({signing.cert}) "
                          f"{when} {date}: make a new key (grid-tasks keys init) and have the "
                          "grid trust its certificate", source="environment",
                          key="GRID_TASKS_SIGNING_CERT")


def _name_task(sender: Any = None, body: Any = None, headers: Any = None, **_: Any) -> None:
    """Put the task name into the (signed) embed of every task message sent."""
    if isinstance(body, tuple) and len(body) == 3 and isinstance(body[2], dict):
        body[2][TASK_KEY] = (headers or {}).get("task") or sender


before_task_publish.connect(_name_task, weak=False, dispatch_uid="grid_tasks.name_task")


class GridTask(Task):  # type: ignore[misc]
    """The base of every grid_tasks task: with signing on, runs a message only when its
    verified signer holds a role the task admits (:func:`~grid_tasks.security.roles.roles_for`).

    A refusal is logged once, as a warning by :func:`refuse`; Celery then records the
    task's failure as an expected one (``throws``): one line, no traceback."""

    throws = (MessageRefused,)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if MessageRefused not in cls.throws:  # a task's own ``throws=`` keeps ours
            cls.throws = (*cls.throws, MessageRefused)

    def before_start(self, task_id: str, args: Any, kwargs: Any) -> None:
        if self.app.conf.task_serializer != AUTH or self.request.called_directly:
            return
        signer = getattr(self.request, SIGNER_KEY, None)
        named = getattr(self.request, TASK_KEY, None)
        reason = _refusal(self.name, signer, named)
        if reason is not None:
            queue = (self.request.delivery_info or {}).get("routing_key")
            subject = (signer or {}).get("subject") if isinstance(signer, dict) else None
            refuse(self.app, queue=queue, signer=subject, reason=reason, task=self.name)
            raise MessageRefused(f"{self.name}: refused: {reason}")

    def signer_subject(self) -> str | None:
        """The verified subject of the current message's signer (None: unsigned/local)."""
        signer = getattr(self.request, SIGNER_KEY, None)
        return signer.get("subject") if isinstance(signer, dict) else None

    def signed_as(self, role: Role) -> bool:
        """Whether the current message's verified signer holds ``role``."""
        signer = getattr(self.request, SIGNER_KEY, None)
        return isinstance(signer, dict) and role.value in (signer.get("roles") or ())

    def submitter(self, vouched: str | None = None) -> str | None:
        """Who asks, as far as this worker can tell.

        A user's signed request: its verified subject (whatever it claims).  A
        service (scheduler role) acting for a user: the subject it ``vouched`` for, as
        the grid trusts its services.  Unsigned (signing off, a closed test bench):
        ``vouched``, unverified, for lack of anything better.
        """
        signer = getattr(self.request, SIGNER_KEY, None)
        if not isinstance(signer, dict):
            return None if self.app.conf.task_serializer == AUTH else vouched
        roles = set(signer.get("roles") or ())
        if Role.SCHEDULER.value in roles and vouched:
            return vouched
        return signer.get("subject") if Role.USER.value in roles else None


def _refusal(task: str, signer: Any, named: Any) -> str | None:
    if not isinstance(signer, dict):
        return "not signed by a trusted key"
    if named != task:
        return f"signed for task {named!r}, not this one"
    held = {Role(r) for r in signer.get("roles", ()) if r in Role._value2member_map_}
    allowed = roles_for(task)
    if not held & allowed:
        return f"signer role {_names(held)} may not run it (needs {_names(allowed)})"
    return None


def _names(roles: Any) -> str:
    return "/".join(sorted(r.value for r in roles)) or "none"
