"""Keys per role: one key pair for each kind of signer, each trusted in its role only.

Layout of a keys directory (``<state dir>/keys`` by default)::

    scheduler.key  scheduler.pem       schedulers, gatekeepers, beats
    node.key       node.pem            node daemons
    operator.key   operator.pem        Flower (remote control, no tasks)
    user-<name>.key  user-<name>.pem   one per user (applications, the CLI)
    certs/scheduler/scheduler.pem      the trust store, one folder per role
    certs/node/node.pem
    certs/user/<name>.pem

A certificate's subject is ``/O=grid_tasks/OU=<role>/CN=<name>``; the grid map maps
a user's subject to local accounts.  Private keys are 0600, the directory 0700.

With ``role_dirs`` (what ``grid-tasks keys init-grid`` makes for a deployment) each
role's pair sits in a folder of its own - ``scheduler/scheduler.key``, ``node/node.key``,
``operator/operator.key``, ``user/user-<name>.key`` - beside the same ``certs/``, so
each host (or container) can be given its role's folder and the trust store, and
nothing else.

:func:`ensure_grid_keys` is what the embedded stack runs at start: it makes what is
missing and keeps what exists, so a restarted grid trusts the same keys.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from pathlib import Path

from grid_tasks.private_files import private_dir
from grid_tasks.security.config import STORE_DIR, SigningSettings
from grid_tasks.security.errors import KeyMaterialError
from grid_tasks.security.keys import DEFAULT_DAYS, KeyPaths, _write_private, self_signed
from grid_tasks.security.roles import Role

#: Keys the embedded stack makes for itself: 2048-bit RSA signs in 0.30 ms against
#: 0.73 ms for 3072 bits (measured here), and every task message is signed.
EMBEDDED_KEY_SIZE = 2048


@dataclass(frozen=True)
class GridKeys:
    """The key of each role of one grid, and the trust store they share."""

    scheduler: KeyPaths
    node: KeyPaths
    user: KeyPaths
    operator: KeyPaths
    user_subject: str

    def for_role(self, role: Role) -> KeyPaths:
        return {Role.SCHEDULER: self.scheduler, Role.NODE: self.node, Role.USER: self.user,
                Role.OPERATOR: self.operator}[role]

    def signing(self, role: Role) -> SigningSettings:
        """The signing settings of a process of ``role``."""
        paths = self.for_role(role)
        return SigningSettings(True, paths.key, paths.cert, paths.cert_store)


def subject_of(role: Role, name: str) -> str:
    """The slash-form subject :func:`init_role_key` gives a certificate."""
    return f"/O=grid_tasks/OU={role.value}/CN={name}"


def init_role_key(directory: Path, role: Role, name: str, *, now: dt.datetime,
                  days: int = DEFAULT_DAYS, key_size: int = EMBEDDED_KEY_SIZE,
                  stem: str | None = None, force: bool = False,
                  hosts: tuple[str, ...] = ()) -> KeyPaths:
    """Make ``<stem>.key``/``<stem>.pem`` for ``role`` and trust the certificate in
    ``certs/<role>/``; refuses to replace an existing key unless ``force``.

    ``stem`` may name a subfolder (``node/node``): it is made 0700 like ``directory``.
    """
    stem = stem or role.value
    store = directory / STORE_DIR
    paths = KeyPaths(directory / f"{stem}.key", directory / f"{stem}.pem", store)
    if paths.key.exists() and not force:
        raise KeyMaterialError(f"{paths.key} already exists: use --force to replace it "
                               "(peers must then trust the new certificate)")
    key_pem, cert_pem = self_signed(name, now=now, days=days, key_size=key_size,
                                    unit=role.value, hosts=hosts)
    try:
        private_dir(directory)  # holds the private keys
        private_dir(paths.key.parent)
        (store / role.value).mkdir(parents=True, exist_ok=True)
        _write_private(paths.key, key_pem)
        paths.cert.write_bytes(cert_pem)
        (store / role.value / f"{name}.pem").write_bytes(cert_pem)
    except OSError as exc:
        raise KeyMaterialError(f"cannot write keys into {directory}: {exc.strerror}") from None
    return paths


def ensure_grid_keys(directory: Path, user: str, *, now: dt.datetime,
                     role_dirs: bool = False) -> GridKeys:
    """The scheduler, node, operator and ``user`` keys of ``directory``, made where
    missing; with ``role_dirs`` each in its role's folder (``node/node.key``)."""
    made = {}
    for role, name, stem in ((Role.SCHEDULER, "scheduler", "scheduler"),
                             (Role.NODE, "node", "node"), (Role.USER, user, f"user-{user}"),
                             (Role.OPERATOR, "operator", "operator")):
        where = f"{role.value}/{stem}" if role_dirs else stem
        key = directory / f"{where}.key"
        if key.exists():
            made[role] = KeyPaths(key, directory / f"{where}.pem", directory / STORE_DIR)
        else:
            made[role] = init_role_key(directory, role, name, now=now, stem=where)
    return GridKeys(made[Role.SCHEDULER], made[Role.NODE], made[Role.USER],
                    made[Role.OPERATOR], subject_of(Role.USER, user))


def also_trust(paths: KeyPaths, role: Role, name: str) -> Path:
    """Trust ``paths``'s certificate in ``role`` too (kept if it is there already): the
    one user of a one-user grid is also its operator."""
    target = paths.cert_store / role.value / f"{name}.pem"
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(paths.cert.read_bytes())
    return target
