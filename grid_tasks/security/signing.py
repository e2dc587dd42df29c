"""Celery message signing (the ``auth`` serializer) switched on from settings.

With signing on, every task message is signed with this process's private key
and a worker accepts only messages whose signature verifies against a
certificate in its trusted store; anything else (a plain JSON message, a
message signed by an unknown key, a tampered body) is refused before the task
runs.  Results stay plain JSON (``result_accept_content=['json']``): they are
written by workers that already passed verification, and clients could not
read signed results without the signer's certificate.

Celery installs the serializer process-wide (kombu's registry is global), so
a process runs either signed or unsigned apps, not both.
"""

from __future__ import annotations

from typing import Any

from grid_tasks.errors import ConfigError
from grid_tasks.security.config import SigningSettings

AUTH = "auth"


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


def setup_signing(app: Any, signing: SigningSettings) -> bool:
    """Register the ``auth`` serializer for ``app`` if signing is on; True if it is.

    Raises :class:`ConfigError` naming the variable when a key, certificate or
    store is missing or unusable.
    """
    if not signing.enabled:
        return False
    signing.check_files()
    from celery.exceptions import ImproperlyConfigured, SecurityError

    try:
        # Keep JSON decodable for consumers without an accept list (results, events).
        app.setup_security(allowed_serializers=["json"])
    except (SecurityError, ImproperlyConfigured, OSError, ValueError) as exc:
        text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"message signing cannot start: {text}", source="environment",
                          key="GRID_TASKS_SIGNING") from None
    return True
