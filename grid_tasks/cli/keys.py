"""``grid-tasks keys`` (signing keys, certificates) and ``grid-tasks gridmap`` (authorization)."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import socket
from pathlib import Path
from typing import Any

import click
from cryptography import x509
from rich.markup import escape
from rich.table import Table

from grid_tasks.cli.console import wide_console
from grid_tasks.errors import GridTasksError
from grid_tasks.security.config import CERT_FILE, KEY_FILE, KEYS_DIR, STORE_DIR
from grid_tasks.security.errors import GridMapError
from grid_tasks.security.gridmap import GridMap
from grid_tasks.security.keys import (
    check_key_matches, describe, init_keys, store_certificates, trust,
)
from grid_tasks.security.role_keys import ensure_grid_keys, init_role_key
from grid_tasks.security.roles import Role
from grid_tasks.security.trust import slash_subject
from grid_tasks.settings import Settings
from grid_tasks.topology import load_topology


ROLE_NAMES = [role.value for role in Role]
GRID_ROLES = (Role.SCHEDULER, Role.NODE, Role.OPERATOR, Role.USER)  # init-grid's order


def _now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def _keys_dir(directory: Path | None) -> Path:
    return directory if directory is not None else Settings.from_env().state_dir / KEYS_DIR


def _default_name(role: Role) -> str:
    """A role key's common name: the login for a user (what grid maps name), else
    ``<role>@<hostname>``."""
    return getpass.getuser() if role is Role.USER else f"{role.value}@{socket.gethostname()}"


def _slash_subject(cert: Path) -> str:
    """The certificate's subject as grid maps write it (``/O=grid_tasks/OU=node/CN=..``)."""
    return slash_subject(x509.load_pem_x509_certificate(cert.read_bytes()).subject)


@click.group()
def keys() -> None:
    """Message-signing keys and certificates (no CA: each host signs its own).

    \b
    A whole grid at once (one folder per role; give each host its role's
    folder and certs/ only):
      grid-tasks keys init-grid /etc/grid_tasks/keys --user alice
    \b
    Or host by host, each key trusted in its role (certs/<role>/):
      grid-tasks keys init --role node      # node.key, node.pem, certs/node/
      grid-tasks keys trust --role scheduler sched.pem   # trust the scheduler
    Signing is on unless GRID_TASKS_SIGNING=0.
    """


@keys.command("init")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--name", "common_name", default=None,
              help="Certificate common name [default: grid_tasks@<hostname>].")
@click.option("--days", default=365, show_default=True, type=click.IntRange(min=1),
              help="Certificate lifetime.")
@click.option("--host", "hosts", multiple=True,
              help="DNS name or IP for the certificate (needed to serve TLS, e.g. Redis); "
                   "repeatable.")
@click.option("--key-size", default=3072, show_default=True,
              type=click.Choice(["2048", "3072", "4096"]), help="RSA key size in bits.")
@click.option("--force", is_flag=True, help="Replace an existing key.")
@click.option("--role", type=click.Choice(ROLE_NAMES), default=None,
              help="Make this role's key in <role>/ (<role>.key, user-<name>.key for a "
                   "user; subject /O=grid_tasks/OU=<role>/CN=<name>), the layout of "
                   "init-grid, and trust it in certs/<role>/ only [default: worker.key, "
                   "trusted in every role].")
@click.option("--json", "as_json", is_flag=True, help="Print the paths as JSON.")
def init(directory: Path | None, common_name: str | None, days: int, hosts: tuple[str, ...],
         key_size: str, force: bool, role: str | None, as_json: bool) -> None:
    """Make a self-signed key and certificate in DIRECTORY [default: <state dir>/keys].

    Writes worker.key (mode 0600), worker.pem and a trusted store certs/ that
    already holds worker.pem; with --role, <role>/<role>.key and .pem, trusted in
    certs/<role>/.
    """
    target = _keys_dir(directory)
    if role is None:
        paths = init_keys(target, common_name or f"grid_tasks@{socket.gethostname()}",
                          now=_now(), days=days, hosts=hosts, key_size=int(key_size),
                          force=force)
    else:
        name = common_name or _default_name(Role(role))
        paths = init_role_key(target, Role(role), name, now=_now(), days=days,
                              key_size=int(key_size), hosts=hosts, force=force,
                              stem=f"{role}/user-{name}" if role == Role.USER.value
                              else f"{role}/{role}")
    if as_json:
        click.echo(json.dumps({"key": str(paths.key), "cert": str(paths.cert),
                               "cert_store": str(paths.cert_store), "role": role,
                               "subject": _slash_subject(paths.cert), "env": paths.env()}))
        return
    click.echo(f"key         {paths.key}\ncertificate {paths.cert}\n"
               f"trust store {paths.cert_store}\n\nTo sign every task message:")
    for name, value in paths.env().items():
        click.echo(f"  export {name}={value}")


@keys.command("init-grid")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--user", default=None,
              help="Name of the user key (subject /O=grid_tasks/OU=user/CN=NAME, what the "
                   "grid map maps) [default: your login].")
@click.option("--flat", is_flag=True,
              help="Every pair in DIRECTORY itself (the layout `grid-tasks up` keeps in its "
                   "state dir) instead of a folder per role.")
@click.option("--json", "as_json", is_flag=True, help="Print the paths as JSON.")
def init_grid(directory: Path, user: str | None, flat: bool, as_json: bool) -> None:
    """Make the keys of every role of a grid in DIRECTORY, and the trust store they share.

    Keys that exist are kept (peers keep trusting them): a deployment may run this at
    every start, as compose's one-shot `keys` service does.

    \b
      DIRECTORY/scheduler/  scheduler.key .pem   schedulers, gatekeepers, beats
      DIRECTORY/node/       node.key .pem        node daemons
      DIRECTORY/operator/   operator.key .pem    Flower (remote control only)
      DIRECTORY/user/       user-NAME.key .pem   the user's applications and CLI
      DIRECTORY/certs/ROLE/                      the trust store, for every process
    Give each host its role's folder and certs/, never another role's key.
    """
    grid = ensure_grid_keys(directory, user or getpass.getuser(), now=_now(),
                            role_dirs=not flat)
    rows = {role.value: {"key": str(grid.for_role(role).key),
                         "cert": str(grid.for_role(role).cert),
                         "subject": _slash_subject(grid.for_role(role).cert),
                         "env": grid.for_role(role).env()} for role in GRID_ROLES}
    if as_json:
        click.echo(json.dumps({"directory": str(directory),
                               "cert_store": str(grid.scheduler.cert_store), "roles": rows}))
        return
    table = Table(title=escape(f"grid keys in {directory}"))
    for col in ("role", "key", "subject"):
        table.add_column(col)
    for role, row in rows.items():
        table.add_row(role, escape(row["key"]), escape(row["subject"]))
    wide_console().print(table)
    click.echo(f"trust store {grid.scheduler.cert_store} (one folder per role)")


@keys.command("show")
@click.argument("directory", required=False, type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def show(directory: Path | None, as_json: bool) -> None:
    """Show the certificate and the trusted store in DIRECTORY [default: <state dir>/keys]."""
    target = _keys_dir(directory)
    own = describe(target / CERT_FILE)
    check_key_matches(target / KEY_FILE, target / CERT_FILE)
    store = store_certificates(target / STORE_DIR)
    now = _now()
    if as_json:
        click.echo(json.dumps({"certificate": own.to_dict(now), "key": str(target / KEY_FILE),
                               "trusted": [c.to_dict(now) for c in store]}))
        return
    table = Table(title=escape(f"certificates in {target}"))
    for col in ("", "subject", "serial", "valid until", "sha256"):
        table.add_column(col)
    for label, cert in [("own", own)] + [("trusted", c) for c in store]:
        until = cert.not_after.strftime("%Y-%m-%d %H:%MZ")
        if cert.expired(now):
            until = f"[red]{until} EXPIRED[/]"
        table.add_row(label, escape(cert.subject), f"{cert.serial:x}"[:16], until,
                      cert.fingerprint_sha256[:23] + "...")
    wide_console().print(table)


@keys.command("trust")
@click.argument("cert", type=click.Path(path_type=Path, exists=True, dir_okay=False))
@click.option("--store", type=click.Path(path_type=Path), default=None,
              help="Trusted store directory [default: <state dir>/keys/certs].")
@click.option("--name", default=None, help="File name in the store [default: <serial>.pem].")
@click.option("--role", type=click.Choice(ROLE_NAMES), default=None,
              help="Trust CERT in this role only (into <store>/<role>/) [default: the "
                   "store itself, which trusts it in every role].")
def trust_cmd(cert: Path, store: Path | None, name: str | None, role: str | None) -> None:
    """Trust the signer whose certificate is CERT (copy it into the store).

    Trust a scheduler's certificate with --role scheduler, a node's with --role node,
    a user's with --role user: what a signer may do follows the folder it is in.
    """
    base = store or _keys_dir(None) / STORE_DIR
    if role:  # a certificate may sit in several roles' folders: only this one is checked
        (base / role).mkdir(parents=True, exist_ok=True)
    target = trust(cert, base / role if role else base, name)
    click.echo(f"trusted {cert} as {target}" + (f" (role {role})" if role else
                                                " (in every role)"))


@click.group()
def gridmap() -> None:
    """The grid map: which submitting identities run as which local accounts, per RM.

    \b
    Format (see config/grid-mapfile.example):
      "/O=Grid/OU=Physics/CN=Alice Smith"  alice,asmith
      [rmB]
      "/O=Grid/OU=Physics/CN=Alice Smith"  alice_b
    """


def _load(path: Path | None) -> Any:
    if path is None:
        path = Settings.from_env().gridmap_file
        if path is None:
            raise GridTasksError("no grid map: pass --file FILE or set GRID_TASKS_GRIDMAP")
    return GridMap.load(path)


@gridmap.command("check")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--grid", "grid_file", type=click.Path(path_type=Path), default=None,
              help="Also check that every [rm] section names an RM of this topology.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def check(file: Path, grid_file: Path | None, as_json: bool) -> None:
    """Parse FILE and list its mappings; exit 1 with line and column if malformed."""
    try:
        gm = _load(file)
    except GridMapError as exc:
        if not as_json:
            raise
        click.echo(json.dumps({"ok": False, "error": exc.to_dict()}))
        raise SystemExit(1) from None
    warnings = []
    if grid_file is not None:
        known = set(load_topology(grid_file).rms)
        warnings = [f"section [{rm}] names no resource manager of {grid_file}"
                    for rm in gm.unknown_rms(known)]
    if as_json:
        click.echo(json.dumps({"ok": True, **gm.to_dict(), "warnings": warnings}))
        return
    table = Table(title=escape(f"{file}: {len(gm.entries)} mappings"))
    for col in ("line", "identity", "accounts", "rm"):
        table.add_column(col)
    for e in gm.entries:
        table.add_row(str(e.line), escape(e.identity), ", ".join(e.accounts),
                      e.rm or "(all)")
    console = wide_console()
    console.print(table)
    for warning in warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")


@gridmap.command("lookup")
@click.argument("identity")
@click.option("--rm", required=True, help="Resource manager the job would run on.")
@click.option("--account", default=None, help="Ask for this one of the mapped accounts.")
@click.option("--file", "file", type=click.Path(path_type=Path), default=None,
              help="Grid map [default: $GRID_TASKS_GRIDMAP].")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def lookup(identity: str, rm: str, account: str | None, file: Path | None,
           as_json: bool) -> None:
    """The local account IDENTITY runs as on --rm (exit 1 if unauthorized)."""
    granted = _load(file).authorize(identity, rm, account)
    if as_json:
        click.echo(json.dumps(granted.to_dict()))
    else:
        click.echo(f"{identity} -> {granted.name} on {rm} "
                   f"(allowed: {', '.join(granted.allowed)}; line {granted.line})")


__all__ = ["keys", "gridmap"]
