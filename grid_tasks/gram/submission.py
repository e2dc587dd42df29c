"""Submission and cancellation against SQL: choose the RM, refuse the impossible, store."""

from __future__ import annotations

import getpass
from datetime import datetime
from typing import Any, Callable

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from grid_tasks.db import repository, session_scope
from grid_tasks.db.models import Job as JobRow
from grid_tasks.db.models import JobStateHistory, Node
from grid_tasks.db.models.base import table_row
from grid_tasks.errors import GridTasksError, NotFoundError, StorageUnavailable
from grid_tasks.events import JobEvent
from grid_tasks.gram.binding import bind as bind_reservation
from grid_tasks.gram.binding import requested_reservation
from grid_tasks.gram.errors import JobFinishedError, JobRefusedError, check_rm_contact
from grid_tasks.gram.keys import CANCEL_TTL_S, cancel_key, pending_cancels_key
from grid_tasks.gram.records import Outbox, finish
from grid_tasks.gram.status import CancelAccepted, HistoryEntry, JobStatus, parse_contact
from grid_tasks.security.authorization import authorize, check_owner, gridmap_for
from grid_tasks.security.errors import Unauthorized
from grid_tasks.services import Services
from grid_tasks.states import JobState, MauiJobState

#: Walltime of a job whose RSL gives neither maxWallTime nor maxTime (seconds).
DEFAULT_WALLTIME_S = 3600

# Every submission runs these: built once, so their cache keys are memoized.
_NODE_SIZES = select(Node.procs, Node.memory_mb).where(Node.rm == bindparam("rm"))
_INSERT_JOB = insert(JobRow.__table__)
_SET_CONTACT = update(JobRow.__table__).where(JobRow.__table__.c.id == bindparam("b_id"))
_INSERT_HISTORY = insert(JobStateHistory.__table__)


def choose_rm(session: Session, wanted: str | None) -> str:
    """The RM named (NotFoundError listing the known ones), else the only one."""
    if wanted:
        return repository.get_rm(session, wanted).name
    rms = repository.list_rms(session)
    if len(rms) == 1:
        return rms[0].name
    known = ", ".join(r.name for r in rms) or "none"
    raise NotFoundError(f"no resource manager given and none in the RSL "
                        f"(resourceManagerContact); choose one of: {known}")


def check_fits(session: Session, rm: str, sub: Any) -> None:
    """Refuse a request larger than the RM can EVER hold, saying which limit it breaks,
    or one whose RSL names another RM (resourceManagerContact)."""
    check_rm_contact(rm, sub.rm_contact)
    # plain columns of one query: choose_rm has checked the RM (hot path of every submit)
    nodes = session.connection().execute(_NODE_SIZES, {"rm": rm}).all()
    if not nodes:
        repository.get_rm(session, rm)  # an unknown RM: NotFoundError naming the known ones
    total = sum(n.procs for n in nodes)
    if sub.count > total:
        raise JobRefusedError(f"job can never run on {rm}: it asks for {sub.count} processors "
                              f"and {rm} has {total} in all", code="NO_RESOURCES")
    need = sub.min_memory_mb or 0
    if need and not any(n.memory_mb >= need for n in nodes):
        biggest = max((n.memory_mb for n in nodes), default=0)
        raise JobRefusedError(f"job can never run on {rm}: each process needs {need} MB "
                              f"(minMemory) and its largest node has {biggest} MB",
                              code="NO_RESOURCES")
    if sub.max_memory_mb and not any(n.memory_mb >= sub.max_memory_mb for n in nodes):
        biggest = max((n.memory_mb for n in nodes), default=0)
        raise JobRefusedError(f"job can never run on {rm}: each process may use up to "
                              f"{sub.max_memory_mb} MB (maxMemory) and its largest node has "
                              f"{biggest} MB", code="NO_RESOURCES")
    if sub.host_count and sub.host_count > len(nodes):
        raise JobRefusedError(f"job can never run on {rm}: hostCount {sub.host_count} but "
                              f"{rm} has {len(nodes)} nodes", code="NO_RESOURCES")


def build_job(session: Session, rm: str, rsl: str, sub: Any, creds: dict[str, Any],
              now: datetime, outbox: Outbox, *, idempotency_key: str | None = None,
              extra_env: dict[str, str] | None = None, run_as: str | None = None,
              owner: str | None = None) -> JobRow:
    """:func:`insert_job`, returning the job's row."""
    job_id, _ = insert_job(session, rm, rsl, sub, creds, now, outbox,
                           idempotency_key=idempotency_key, extra_env=extra_env,
                           run_as=run_as, owner=owner)
    return session.get(JobRow, job_id)


def insert_job(session: Session, rm: str, rsl: str, sub: Any, creds: dict[str, Any],
               now: datetime, outbox: Outbox, *, idempotency_key: str | None = None,
               extra_env: dict[str, str] | None = None, run_as: str | None = None,
               owner: str | None = None,
               coallocation: tuple[int, str] | None = None,
               rebind: Callable[[str], Any] | None = None) -> tuple[int, str]:
    """Insert the job, PENDING (Idle for Maui), with its contact and history; returns
    (id, contact).  ``coallocation``: (coallocated job id, subjob label) of a subjob.

    ``run_as`` is the local account the grid map chose (the job's processes run as
    it); ``owner`` the submitting identity (default: the user).  ``rebind(contact)``:
    the request evaluated again once its contact is known, or None when the first
    evaluation stands (see :mod:`grid_tasks.gram.jmvars`).  Plain INSERTs and one
    UPDATE rather than an ORM flush: every submission pays for this."""
    request = _request(sub, extra_env, run_as)
    walltime = sub.max_wall_time_s or sub.max_time_s or DEFAULT_WALLTIME_S
    state = JobState.PENDING
    values = {"rm": rm, "owner": owner or creds["user"], "user": creds["user"],
              "group": creds.get("group"), "account": creds.get("account") or sub.project,
              "qos": creds.get("qos"), "job_class": creds.get("job_class") or sub.queue,
              "rsl": rsl, "request": request, "submit_time": now, "walltime": int(walltime),
              "procs": sub.count, "tasks": sub.count, "idempotency_key": idempotency_key,
              "state": state, "maui_state": state.maui, "version": 1}
    if coallocation is not None:
        values["coallocation_id"], values["coallocation_label"] = coallocation
    row = table_row(JobRow.__mapper__, values)
    conn = session.connection()  # Core statements built once: no ORM execution layer
    job_id = conn.execute(_INSERT_JOB, row).inserted_primary_key[0]
    contact = f"gram://{rm}/jobs/{job_id}"
    bound = rebind(contact) if rebind is not None else None
    if bound is None:
        conn.execute(_SET_CONTACT, {"b_id": job_id, "contact": contact})
    else:
        sub = bound
        conn.execute(_SET_CONTACT, {"b_id": job_id, "contact": contact,
                                    "request": _request(sub, extra_env, run_as)})
    conn.execute(_INSERT_HISTORY, {"job_id": job_id, "from_state": JobState.UNSUBMITTED,
                                   "to_state": state, "reason": "submitted", "at": now})
    if requested_reservation(sub) is not None:  # RSL (reservation=NAME): refused if unusable
        bind_reservation(session, session.get(JobRow, job_id), sub, now)
    outbox.events.append(JobEvent(job_id, state.value, "submitted", now.timestamp()))
    outbox.rms.add(rm)
    return job_id, contact


def _request(sub: Any, extra_env: dict[str, str] | None, run_as: str | None) -> dict[str, Any]:
    """The job's stored request: the lowered subjob, extra environment, account."""
    request = sub.to_dict()
    if extra_env:
        request["extra_env"] = {str(k): str(v) for k, v in extra_env.items()}
    if run_as:
        request["run_as"] = run_as
    return request


def store_submission(services: Services, rsl: str, sub: Any, rm: str | None,
                     creds: dict[str, Any], *,
                     idempotency_key: str | None = None,
                     extra_env: dict[str, str] | None = None, identity: str | None = None,
                     coallocation: tuple[int, str] | None = None,
                     within: Any = None, hold: Outbox | None = None,
                     rebind: Callable[[str], Any] | None = None,
                     check: Callable[[Session, str, Any], None] | None = None
                     ) -> tuple[int, str, bool]:
    """Authorize, check and store one lowered subjob request as a GRAM job, then
    trigger its RM; returns (id, contact, stored by this call).

    ``creds["user"]`` None: the grid map's local account, else this process's user.
    A repeated ``idempotency_key`` returns the job first stored with it (False), also
    when this attempt would be refused.  ``within(session, job_id)`` runs in the
    storing transaction (a coallocated subjob links itself there).  ``hold``: the
    caller runs the RM's iteration itself (a gatekeeper, see ``iterate_here``), so no
    iteration is triggered, and sends the stored job's events, which go into ``hold``,
    with that iteration's first round trip.  ``rebind``: see :func:`insert_job`.
    ``check(session, rm, sub)`` refuses what the RM can never run (default
    :func:`check_fits`, against its nodes; a Slurm RM's fit is Slurm's to judge).
    """
    outbox = Outbox()
    try:
        with session_scope(services.sessions) as session:
            name, who, granted = _authorized(services, session, rm, identity, creds.get("user"))
            creds = {**creds, "user": granted.name if granted else (
                creds.get("user") or getpass.getuser())}
            # also names an unknown RM (NotFoundError)
            (check or check_fits)(session, name, sub)
            job_id, contact = insert_job(
                session, name, rsl, sub, creds, services.clock.now(), outbox,
                idempotency_key=idempotency_key, extra_env=extra_env,
                run_as=granted.name if granted else None, owner=who,
                coallocation=coallocation, rebind=rebind)
            if within is not None:
                within(session, job_id)
    except StorageUnavailable:
        raise  # nothing stored (rolled back), and no key can be looked up either
    except (IntegrityError, GridTasksError):
        # the key's row is looked for only now: a retried submission is the rare case
        found = _by_key(services, idempotency_key)
        if found is None:
            raise
        return found[0], found[1], False
    if hold is not None:
        hold.events += outbox.events
    else:
        outbox.flush(services.redis, services.app)
    return job_id, contact, True


def restart_job(services: Services, contact: str, rm: str,
                identity: str | None) -> tuple[int, str]:
    """GRAM's restart request (``&(restart=CONTACT)``): the job manager of that job takes
    it up again.  A job's whole state is in SQL here, so a job of this RM restarted by
    its owner (with a grid map) is simply taken up: (id, contact).  Anything else has
    no state to restart from, as GRAM says when it finds no state file: a
    JobRefusedError NO_STATE_FILE (someone else's job is not told apart from none)."""
    try:
        job_id, named = parse_contact(contact)
        if named != rm:
            raise NotFoundError(f"{contact} is not a job of {rm}")
        with session_scope(services.sessions) as session:
            row = repository.get_job(session, job_id)
            _check_owner(services, row, rm, identity)
            return row.id, row.contact
    except (NotFoundError, Unauthorized):
        raise JobRefusedError(f"cannot restart {contact}: {rm} has no state of that job "
                              "(restart names a job of this resource manager by its "
                              "contact)", code="NO_STATE_FILE") from None


def _authorized(services: Services, session: Session, rm: str | None, identity: str | None,
                account: str | None) -> tuple[str, str | None, Any]:
    """(RM, submitting identity, the grid map's LocalAccount for it).

    ``identity`` is what the gatekeeper verified (the signer's subject); with a grid
    map, a request without one is refused, and ``account`` (``--user``) may only pick
    among the accounts the map allows that identity (the first by default).  Without
    a grid map (a one-user grid) nothing is mapped and a named RM not looked up."""
    if gridmap_for(services.settings) is None:
        return rm or choose_rm(session, None), identity, None
    name = choose_rm(session, rm)  # an unknown RM is named before any authorization
    if not identity:
        raise Unauthorized(f"{name} accepts only signed requests from a user in its grid "
                           "map: this one carries no verified identity", rm=name)
    return name, identity, authorize(services.settings, identity, name, account=account)


def _by_key(services: Services, key: str | None) -> tuple[int, str] | None:
    """(id, contact) of the job stored with idempotency key ``key``, if any."""
    if not key:
        return None
    with session_scope(services.sessions) as session:
        found = repository.find_job_by_idempotency_key(session, key)
        return None if found is None else (found.id, found.contact)


def cancel_job(services: Services, job_id: int, *, rm: str | None = None,
               identity: str | None = None, admin: bool = False,
               stop: Callable[[JobRow], None] | None = None) -> JobStatus | CancelAccepted:
    """Cancel ``job_id`` (see :meth:`grid_tasks.client.Grid.cancel`).

    At a gatekeeper (``rm`` given) the job must be that RM's, and with a grid map
    only its owner, as verified (``identity``), or an ``admin`` may cancel it.

    With the database away the cancel is still taken (:func:`accept_cancel`): a
    :class:`CancelAccepted` rather than the job's status.  ``stop(row)``: how an RM
    whose jobs another system runs (Slurm) stops this one, once the cancel is allowed;
    its error leaves nothing recorded."""
    try:
        return _cancel_recorded(services, job_id, rm=rm, identity=identity, admin=admin,
                                stop=stop)
    except StorageUnavailable as exc:
        if rm is None or stop is not None:
            raise  # not at a gatekeeper, or another system runs the job: nobody would
            # apply it later (a Slurm RM has no iteration to reconcile it)
        return accept_cancel(services, job_id, rm, identity, admin, exc)


def accept_cancel(services: Services, job_id: int, rm: str, identity: str | None,
                  admin: bool, outage: StorageUnavailable) -> CancelAccepted:
    """Take a cancel while the database is away: remembered in Redis for ``rm``'s
    iteration to record once SQL is back (:mod:`grid_tasks.scheduling.reconcile`).

    When no owner check is due (no grid map, or an ``admin``) the job's cancel flag is
    set at once, so its job managers kill it now; otherwise the flag waits for the
    check against the job's owner in SQL (a stranger must not cancel a job because
    the database cannot say whose it is)."""
    check_due = not admin and gridmap_for(services.settings) is not None
    pipe = services.redis.pipeline(transaction=True)
    pipe.hset(pending_cancels_key(rm), str(int(job_id)), (identity or "-") if check_due else "")
    if not check_due:
        pipe.set(cancel_key(job_id), 1, ex=CANCEL_TTL_S)
    pipe.execute()
    when = "once the database is back and the job's owner is checked" if check_due else "now"
    return CancelAccepted(int(job_id), rm, f"cancel accepted while the database is away "
                          f"({outage.cause}); the job is stopped {when} and its end "
                          "recorded when the database returns")


def _cancel_recorded(services: Services, job_id: int, *, rm: str | None,
                     identity: str | None, admin: bool,
                     stop: Callable[[JobRow], None] | None = None) -> JobStatus:
    outbox = Outbox()
    with session_scope(services.sessions) as session:
        row = repository.get_job(session, job_id, for_update=True)
        if rm is not None:
            _check_owner(services, row, rm, None if admin else identity, admin=admin)
        if JobState(row.state).terminal:
            raise JobFinishedError(f"job {job_id} is {row.state.value} already; nothing to "
                                   "cancel", code="JOB_CANCEL_FAILED")
        # Remembered first: a launch or job manager that races this cancel sees it.
        services.redis.set(cancel_key(job_id), 1, ex=CANCEL_TTL_S)
        if stop is not None:
            try:
                stop(row)
            except BaseException:
                services.redis.delete(cancel_key(job_id))  # not cancelled after all
                raise
        if row.state is JobState.PENDING and row.maui_state is not MauiJobState.STARTING:
            finish(session, row, JobState.FAILED, "cancelled by user",
                   services.clock.now(), outbox, gram_error="USER_CANCELLED")
        status = JobStatus.from_row(row)
    outbox.flush(services.redis, services.app)
    return status


def _check_owner(services: Services, row: JobRow, rm: str | None, identity: str | None,
                 admin: bool = False) -> None:
    """A gatekeeper acts on its own RM's jobs (``rm``; None: the scheduler, for any
    RM's), for their owners only (with a grid map) or an administrator."""
    if rm is not None and row.rm != rm:
        raise NotFoundError(f"job {row.id} is not a job of {rm} (it is {row.rm}'s)")
    if not admin:
        check_owner(services.settings, row.owner, identity, f"job {row.id} on {row.rm}",
                    rm=row.rm)


def job_report(services: Services, job_id: int, *, rm: str | None = None,
               identity: str | None = None, admin: bool = False,
               history: bool = False) -> dict[str, Any]:
    """What the gatekeeper tells a job's owner of it: ``{"status": ..., "history":
    [...]}`` (history only when asked).  With a grid map only its owner or an
    ``admin`` may look (GRAM answers a status query only to the job's own credential);
    asked at an RM's gatekeeper (``rm``), the job must be that RM's."""
    with session_scope(services.sessions) as session:
        row = repository.get_job(session, int(job_id))
        _check_owner(services, row, rm, identity, admin=admin)
        out: dict[str, Any] = {"status": JobStatus.from_row(row).to_dict()}
        if history:
            out["history"] = [HistoryEntry(h.from_state, h.to_state, h.reason, h.at).to_dict()
                              for h in repository.job_history(session, row.id)]
    return out


def gram_status(sessions: Any, job_id: int) -> JobStatus:
    """The current status of GRAM job ``job_id`` (one SQL read), for the grid's own
    services (a DUROC header watching its subjob)."""
    with session_scope(sessions) as session:
        return JobStatus.from_row(repository.get_job(session, int(job_id)))
