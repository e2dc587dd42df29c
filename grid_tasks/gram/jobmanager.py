"""The job manager of one job on one node: start, watch, limit, report.

It runs as a thread of the node daemon (so it dies with its worker), and its
processes carry ``PR_SET_PDEATHSIG``, so a worker killed with SIGKILL leaves no
orphan.  While the processes run it refreshes a per-job lease in Redis; the
scheduler's iteration treats an expired lease as a lost node (see
:mod:`grid_tasks.scheduling.recovery`).  It kills the whole process group past
``max_wall_time``, on cancel, or when its launch epoch (token) is superseded or
fenced.

Fencing (DESIGN.md invariant 9): a job manager that could not renew its lease for
the renewal bound (:func:`grid_tasks.leases.renew_bound`) kills its processes, and
so does the daemon's watchdog process (:mod:`grid_tasks.node.watchdog`), which each
renewal is reported to, when the daemon itself is frozen.  A Redis restarted empty
has no token: the job manager re-asserts its own and keeps running.
"""

from __future__ import annotations

import json
import logging
import re
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import IO, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

from grid_tasks.events import append_output
from grid_tasks.gram import keys
from grid_tasks.gram.errors import LaunchError
from grid_tasks.gram.launch import (
    LaunchRequest,
    account_for,
    check_host,
    kill_group,
    open_outputs,
    spawn,
)
from grid_tasks.gram.monitor import JobTask
from grid_tasks.gram.report import NodeContext, redis_retrying, report_finished, report_started

log = logging.getLogger(__name__)

#: What programs print when an allocation fails under RLIMIT_AS (Python, C, C++, Java,
#: glibc's strerror): the exit code alone does not say that the memory limit was hit.
_OOM = re.compile(rb"MemoryError|Cannot allocate memory|std::bad_alloc|out of memory|"
                  rb"OutOfMemoryError", re.IGNORECASE)
#: Signals that end a process over its CPU-time rlimit (soft, then hard one second later).
_CPU_SIGNALS = (-signal.SIGXCPU, -signal.SIGKILL)

#: Retry delays of one output line through a Redis outage (seconds): short, since the
#: process blocks on a full pipe meanwhile.
_STREAM_DELAYS = (0.1, 0.3, 0.6, 1.0, 1.0, 2.0)

#: A job whose processes all end within this many seconds of their start is reported
#: once: ACTIVE (at its real start) and its end in one transaction, instead of a
#: transaction for each; with many short jobs the node daemons' SQL writes halve.
QUICK_EXIT_S = 0.02

# KEYS: token, lease, cancel.  ARGV: token, lease TTL (ms), token TTL (s).  Renews the
# lease only while the launch epoch is ours; -2: fenced by recovery, -1: superseded by
# another launch, else whether the job was cancelled.
_CONTROL = """
local current = redis.call('GET', KEYS[1])
if not current then
  redis.call('SET', KEYS[1], ARGV[1], 'EX', tonumber(ARGV[3]))
elseif current ~= ARGV[1] then
  if string.sub(current, 1, 7) == 'fenced:' then return -2 end
  return -1
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', tonumber(ARGV[2]))
return redis.call('EXISTS', KEYS[3])
"""

#: Running job managers of this process, by (job id, node): for tests and shutdown.
RUNNING: dict[tuple[int, str], "JobManager"] = {}


@dataclass
class Part:
    """This node's outcome: exit codes per rank, or why it failed."""

    exit_codes: dict[str, int]
    reason: str | None = None
    code: str | None = None
    started: float | None = None  # POSIX time its processes were started

    def to_json(self) -> str:
        return json.dumps({"exit_codes": self.exit_codes, "reason": self.reason,
                           "code": self.code, "started": self.started})


class JobManager(threading.Thread):
    """Runs one LaunchRequest to completion and reports it."""

    def __init__(self, req: LaunchRequest, ctx: NodeContext,
                 claimed_at: float | None = None, shown_by: str | None = None) -> None:
        """``shown_by``: the node daemon's worker name, which Flower shows the job's
        task events under (:mod:`grid_tasks.gram.monitor`); None sends none."""
        super().__init__(name=f"job manager {req.job_id}@{req.node}", daemon=True)
        self.req, self.ctx = req, ctx
        self.shown = JobTask(ctx.app, req, shown_by)
        # monotonic second the launch claim was sent: the lease counts as renewed then
        self.renewed = time.monotonic() if claimed_at is None else claimed_at
        self.procs: list[tuple[int, subprocess.Popen[bytes]]] = []
        self.changed = threading.Event()
        self.readers: list[threading.Thread] = []
        self.kill_reason: tuple[str, str] | None = None
        self.out_of_memory = False  # a process said an allocation failed
        self.started: float | None = None  # POSIX time the processes were started
        self._outputs: tuple[IO[bytes] | None, IO[bytes] | None] = (None, None)
        self._early: Part | None = None  # launch(): why the processes did not start
        self._spawned = False

    def launch(self) -> None:
        """Start the processes in the calling thread (a launch task's), then follow them
        in this job manager's own thread: a new thread would first have to win the
        interpreter from a busy worker, milliseconds before the job even starts."""
        RUNNING[(self.req.job_id, self.req.node)] = self
        self._early = self._guarded(self._spawn_all)
        self._spawned = True
        self.start()

    def run(self) -> None:
        RUNNING[(self.req.job_id, self.req.node)] = self
        part = None
        try:
            if not self._spawned:  # started without launch(): spawn here
                part = self._guarded(self._spawn_all)
            else:
                part = self._early
            if part is None:
                self.shown.started()
                part = self._guarded(self._follow)
        finally:
            RUNNING.pop((self.req.job_id, self.req.node), None)
            if self.procs:
                self.ctx.watchdog().forget(p.pid for _, p in self.procs)
        try:
            report_finished(self.ctx, self.req, part.to_json())
        except Exception:  # retries exhausted: the lease is gone, so recovery ends the job
            log.exception("job manager %s/%s could not report its end",
                          self.req.job_id, self.req.node)
        self.shown.ended(part.exit_codes, part.reason, part.code)

    def _guarded(self, step: Any) -> Part | None:
        """``step()``, or the Part of a job manager that crashed in it (never no report)."""
        try:
            return step()
        except Exception as exc:
            log.exception("job manager %s/%s crashed", self.req.job_id, self.req.node)
            self._kill_all()
            return Part({}, f"job manager failed on {self.req.node}: {exc}", "JM_STOPPED")

    def _spawn_all(self) -> Part | None:
        """Start every process of this node's part; the Part if that failed."""
        req = self.req
        try:
            who = account_for(req)
            directory, argv = check_host(req, who)
            self._outputs = open_outputs(req, directory, who)
        except LaunchError as exc:
            return Part({}, str(exc), exc.code)
        out, err = self._outputs
        failed: LaunchError | None = None
        dog = self.ctx.watchdog()
        dog.arm()  # beats from before the first spawn: a freeze from here on is caught
        try:
            for i in range(req.process_count()):
                rank = req.rank_offset + i
                self._check_claim_fresh()
                self.procs.append((rank, spawn(req, argv, directory, rank, req.stdin, who)))
                # watched from the claim: a daemon frozen from here on cannot outlive it
                dog.watch((self.procs[-1][1].pid,), self.renewed)
        except LaunchError as exc:
            failed = exc
        else:
            self.started = time.time()
        finally:
            dog.disarm()
        # Every process first, then their output readers: starting a reader's threads
        # before the next spawn delayed each further rank (the pipes hold the output).
        for rank, proc in self.procs:
            self._watch(rank, proc, out, err)
        if failed is not None:
            self._kill_all()
            return Part({}, str(failed), failed.code)
        return None

    def _follow(self) -> Part:
        """Report the start, supervise the processes to their end; this node's Part."""
        req = self.req
        if not self._ended_within(QUICK_EXIT_S):
            began = time.monotonic()
            report_started(self.ctx, req, self.started)
            self._renewed_at(began)
        self._supervise()
        for reader in self.readers:
            reader.join()
        for f in self._outputs:
            if f is not None:
                f.close()
        codes = {str(rank): p.returncode for rank, p in self.procs}
        if self.kill_reason is None and -signal.SIGKILL in codes.values() \
                and time.monotonic() - self.renewed > self.ctx.renew_bound:
            self.kill_reason = self._unrenewed()  # the watchdog killed them meanwhile
        if self.kill_reason is not None:
            return Part(codes, *self.kill_reason, started=self.started)
        limit = self._limit_hit(codes)
        if limit:
            return Part(codes, limit, "JOB_EXECUTION_FAILED", started=self.started)
        return Part(codes, started=self.started)

    def _ended_within(self, seconds: float) -> bool:
        """Whether every process has ended within ``seconds`` (then the end's report
        records ACTIVE too, see QUICK_EXIT_S)."""
        deadline = time.monotonic() + seconds
        while any(p.returncode is None for _, p in self.procs):
            left = deadline - time.monotonic()
            if left <= 0 or not self.changed.wait(left):
                return False
            self.changed.clear()
        return True

    def _limit_hit(self, codes: dict[str, int]) -> str | None:
        """Why the job failed if a process ended on its max_cpu_time / max_memory rlimit.

        GRAM reports a job stopped by a resource limit as FAILED with
        JOB_EXECUTION_FAILED, not as DONE with the signal for exit code.
        """
        req = self.req
        if req.max_cpu_time_s and any(c in _CPU_SIGNALS for c in codes.values()):
            return f"exceeded max_cpu_time of {req.max_cpu_time_s} s: killed by the CPU limit"
        if req.max_memory_mb and self.out_of_memory and any(codes.values()):
            return f"exceeded max_memory of {req.max_memory_mb} MB: allocation refused"
        return None

    def _watch(self, rank: int, proc: subprocess.Popen[bytes], out: IO[bytes] | None,
               err: IO[bytes] | None) -> None:
        def pump(pipe: IO[bytes], name: str, copy: IO[bytes] | None, then_wait: bool) -> None:
            watch_memory = name == "stderr" and bool(self.req.max_memory_mb)
            for line in iter(pipe.readline, b""):
                if watch_memory and not self.out_of_memory and _OOM.search(line):
                    self.out_of_memory = True
                if copy is not None:
                    copy.write(line)
                    copy.flush()
                self._stream(name, rank, line)
            pipe.close()
            if then_wait:
                proc.wait()
                self.changed.set()

        for name, pipe, copy, last in (("stderr", proc.stderr, err, False),
                                       ("stdout", proc.stdout, out, True)):
            t = threading.Thread(target=pump, args=(pipe, name, copy, last), daemon=True,
                                 name=f"{name} {self.req.job_id}.{rank}")
            t.start()
            self.readers.append(t)

    def _stream(self, name: str, rank: int, line: bytes) -> None:
        """Copy a line to the job's output stream; through a Redis outage it waits a
        few seconds (the output file, if any, keeps every line regardless)."""
        try:
            redis_retrying(lambda: append_output(self.ctx.redis, self.req.job_id, name,
                                                 self.req.node, rank, line), _STREAM_DELAYS)
        except RedisError:
            log.warning("job %s: output line of rank %d lost to a Redis outage",
                        self.req.job_id, rank)

    def _supervise(self) -> None:
        req, ctx = self.req, self.ctx
        deadline = time.monotonic() + req.max_wall_time_s if req.max_wall_time_s else None
        # report_started has just set the lease, and the launch claim checked the token
        # and the cancel flag: the first look at them is due one interval from now
        next_lease = time.monotonic() + ctx.lease_interval
        while any(p.returncode is None for _, p in self.procs):
            now = time.monotonic()
            if deadline is not None and now >= deadline and self.kill_reason is None:
                self._kill_all(("exceeded max_wall_time of "
                                f"{req.max_wall_time_s:g} s: killed", "JOB_EXECUTION_FAILED"))
            if now >= next_lease:
                next_lease = now + ctx.lease_interval
                self._check_control()
            wait = next_lease - now
            if deadline is not None and self.kill_reason is None:
                wait = min(wait, max(0.0, deadline - now))
            self.changed.wait(max(0.01, wait))
            self.changed.clear()

    def _check_control(self) -> None:
        """Renew the lease while the launch epoch is ours; act on a cancel, a superseded
        or fenced epoch, or a lease not renewed for the renewal bound."""
        req = self.req
        began = time.monotonic()
        try:
            verdict = self.ctx.redis.eval(
                _CONTROL, 3, keys.token_key(req.job_id), keys.lease_key(req.job_id, req.node),
                keys.cancel_key(req.job_id), req.token, int(self.ctx.lease_ttl * 1000),
                keys.TOKEN_TTL_S)
        except (RedisConnectionError, RedisTimeoutError) as exc:
            # Redis restarting: keep the job running and re-create the lease on the next
            # round (recovery gives a restarted Redis a grace period for that), but
            # never past the renewal bound: by then the part may be declared lost
            if time.monotonic() - self.renewed > self.ctx.renew_bound:
                self._kill_all(self._unrenewed())
            else:
                log.warning("job manager %s/%s: lease refresh failed (%s); retrying",
                            req.job_id, req.node, exc)
            return
        if verdict >= 0:
            self._renewed_at(began)
        if self.kill_reason is not None:
            return
        if verdict == 1:
            self._kill_all(("cancelled by user", "USER_CANCELLED"))
        elif verdict == -2:
            self._kill_all(("launch fenced: the job's part was declared lost",
                            "SYSTEM_CANCELLED"))
        elif verdict == -1:
            self._kill_all(("launch superseded (job requeued)", "SYSTEM_CANCELLED"))

    def _renewed_at(self, began: float) -> None:
        """The lease was renewed by a call begun at ``began`` (monotonic): tell the
        watchdog, which counts the renewal bound from there."""
        self.renewed = max(self.renewed, began)
        self.ctx.watchdog().renew((p.pid for _, p in self.procs), began)

    def _unrenewed(self) -> tuple[str, str]:
        return (f"lease not renewed for {self.ctx.renew_bound:g} s (Redis unreachable or "
                f"{self.req.node}'s daemon stalled): killed", "JM_STOPPED")

    def _check_claim_fresh(self) -> None:
        """Refuse to start a process a renewal bound after the launch claim: the daemon
        stalled between claim and spawn, and the launch may be fenced and rerun by now."""
        late = time.monotonic() - self.renewed
        if late > self.ctx.renew_bound:
            raise LaunchError(f"job {self.req.job_id} on {self.req.node}: launch claimed "
                              f"{late:.1f} s ago, past the renewal bound; not started",
                              code="JM_STOPPED")

    def _kill_all(self, reason: tuple[str, str] | None = None) -> None:
        if reason is not None and self.kill_reason is None:
            self.kill_reason = reason
        for _, proc in self.procs:
            if proc.returncode is None:
                kill_group(proc)
