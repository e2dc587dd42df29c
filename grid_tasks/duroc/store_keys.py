"""The Redis key layout of one coallocated job, and the ACL that confines a job to it.

Every key of job ``J`` starts with ``grid_tasks:duroc:J:`` so that one ACL key
pattern covers exactly that job:

==============================  ======  ==================================================
key (after the job prefix)      type    content
==============================  ======  ==================================================
``meta``                        hash    state (open/released/aborted), reason, version,
                                        next_address, frozen structure
``subjobs``                     hash    address -> subjob JSON (label, size, types)
``labels``                      hash    label -> address
``events``                      stream  created / structure / complete / released /
                                        aborted / group: what blocked readers wait for
``entered:<address>``           set     ranks of that subjob that entered the barrier
``group``                       set     addresses whose rank 0 joined the inter-subjob group
``q:<address>:<rank>:<tag>``    list    intra-subjob messages for one process and tag
``x:<address>:<tag>``           list    inter-subjob messages for one subjob's rank 0
``queues``                      set     every message list ever created (for purge)
``tpl:set``, ``tpl:list``       set,    templates holding one :data:`TEMPLATE_MEMBER`
                                list    and the job's expiry (see below)
==============================  ======  ==================================================

Every key expires at the job's deadline (set on creation); :meth:`purge` deletes
them earlier.  The deadline itself lives in ``<base>#deadline``, outside every job's
ACL pattern: the job's processes can neither read nor move it.  They hold no
command that sets an expiry either (a job user once ``PEXPIREAT`` its keys to the
year 2100): a key their scripts create is a ``COPY`` of a template, and ``COPY``
keeps the source's expiry, so it expires with the job.  A key they make outside
the scripts is bounded when their access is revoked (``revoke_access``).  Job ids
are restricted to ``[A-Za-z0-9_.-]``: a glob character in an id would widen the
ACL pattern to other jobs' keys.
"""

from __future__ import annotations

import re

from grid_tasks.duroc.store_errors import RuntimeMisuseError

PREFIX = "grid_tasks:duroc"
JOB_ID_RE = re.compile(r"[A-Za-z0-9_.-]{1,128}")
MAX_TAG_LENGTH = 256

# Commands a job's processes need: the direct calls of the runtime library and
# every command inside the scripts it runs (Redis checks both against the ACL).
# ``hset``: the entry that completes an auto-release barrier releases it (ENTER).
# ``copy``/``srem``/``lpop``: a key the scripts create is a copy of a template (it
# keeps the template's expiry) without the template's member.  Nothing that sets or
# clears an expiry (EXPIRE, PEXPIREAT, PERSIST, GETEX, SET, RESTORE...): keys cannot
# outlive the job's deadline through them.
RUNTIME_COMMANDS = (
    "ping", "select", "evalsha", "blpop", "xread", "exists", "hget", "hmget", "hgetall",
    "hset", "sadd", "scard", "rpush", "xadd", "xrevrange", "copy", "srem", "lpop",
)
#: The one member of the template set and list; never a rank, address or message.
TEMPLATE_MEMBER = "~"


def check_job_id(job: str) -> str:
    """``job`` if it is a safe id, else :class:`RuntimeMisuseError` saying why."""
    if not isinstance(job, str) or not JOB_ID_RE.fullmatch(job):
        raise RuntimeMisuseError(
            f"invalid coallocated job id {job!r}: use 1-128 characters of A-Z a-z 0-9 _ . -")
    return job


def check_tag(tag: str) -> str:
    """``tag`` if it is a usable message tag (non-empty text, bounded length)."""
    if not isinstance(tag, str) or not tag or len(tag) > MAX_TAG_LENGTH:
        raise RuntimeMisuseError(
            f"invalid message tag {tag!r}: a non-empty string of at most {MAX_TAG_LENGTH} chars")
    return tag


class JobKeys:
    """Names of the keys of one job under ``prefix``."""

    def __init__(self, job: str, prefix: str = PREFIX) -> None:
        self.job = check_job_id(job)
        self.base = f"{prefix}:{job}"
        self.meta = f"{self.base}:meta"
        self.subjobs = f"{self.base}:subjobs"
        self.labels = f"{self.base}:labels"
        self.events = f"{self.base}:events"
        self.group = f"{self.base}:group"
        self.queues = f"{self.base}:queues"
        self.template_set = f"{self.base}:tpl:set"
        self.template_list = f"{self.base}:tpl:list"
        self.pattern = f"{self.base}:*"
        # outside the pattern above, and every other job's (ids hold no '#' or ':')
        self.deadline = f"{self.base}#deadline"

    @property
    def fixed(self) -> list[str]:
        """The keys every script receives, in the order the scripts expect them."""
        return [self.meta, self.subjobs, self.labels, self.events, self.group, self.queues]

    def entered(self, address: int) -> str:
        return f"{self.base}:entered:{address}"

    def intra_queue(self, address: int, rank: int, tag: str) -> str:
        return f"{self.base}:q:{address}:{rank}:{check_tag(tag)}"

    def inter_queue(self, address: int, tag: str) -> str:
        return f"{self.base}:x:{address}:{check_tag(tag)}"

    def acl_user(self) -> str:
        return f"grid_tasks-job-{self.job}"

    def acl_rules(self, password: str) -> list[str]:
        """``ACL SETUSER`` rules: this job's keys and channels, the runtime's commands only."""
        commands = [f"+{name}" for name in RUNTIME_COMMANDS]
        return ["reset", "on", f">{password}", f"~{self.pattern}", "resetchannels",
                f"&{self.pattern}", "-@all", *commands]
