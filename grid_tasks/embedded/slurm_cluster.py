"""Private Slurm clusters on localhost: for tests, benchmarks and the demo (issue 24).

A :class:`SlurmSite` is one private ``munged`` (its own key and socket) serving any number
of independent clusters.  Each :class:`SlurmCluster` has its own ``slurm.conf`` (cluster
name, controller and node ports, state and spool directories, logs), selected by clients
with ``SLURM_CONF``, one ``slurmctld`` and several ``slurmd`` on this host in Slurm's
multiple-slurmd style (``NodeHostname=localhost``, one port per node, ``slurmd -N``).

Every daemon runs in the foreground as our child, so stopping is stopping what we started:
nothing outside the site's directory is read or written, and the machine's own Slurm (if
any) is never addressed.  Job steps (``slurmstepd``) are not our children (slurmd lets
them go), so a stop also ends every process whose environment names this cluster's
configuration.  The daemons run as root (slurmd must, to start jobs as their owners).
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

import psutil

from grid_tasks.embedded.redis_server import free_port
from grid_tasks.embedded.supervisor import die_with_parent
from grid_tasks.errors import ConfigError, ConnectivityError
from grid_tasks.private_files import private_dir, private_file

#: What a site needs on PATH (daemons and the client commands the Slurm RM runs).
BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "scancel", "scontrol", "sinfo")


def missing_binaries() -> list[str]:
    """The Slurm and munge programs this host lacks (empty: a site can start here)."""
    return [name for name in BINARIES if _which(name) is None]


def _which(name: str) -> str | None:
    # Debian installs the daemons in /usr/sbin, which a non-login PATH may lack.
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")


def _binary(name: str) -> str:
    found = _which(name)
    if found is None:
        raise ConfigError(f"{name} not found: install Debian's slurm-wlm and munge",
                          source="environment", key="PATH")
    return found


def _ports(count: int) -> list[int]:
    """``count`` distinct TCP ports free on loopback right now."""
    found: list[int] = []
    while len(found) < count:
        port = free_port()
        if port not in found:
            found.append(port)
    return found


def _spawn(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """A daemon in its own session that dies with the thread starting it (a test or
    benchmark killed mid-way leaves no cluster behind)."""
    with open(log, "ab") as out:  # the daemon's own stdout/stderr, beside its log file
        return subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent if sys.platform.startswith("linux") else None)


def _stop(proc: subprocess.Popen[bytes] | None, timeout: float = 5.0) -> None:
    if proc is None or proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class Munge:
    """A private ``munged``: its own key (owner-only), pid, seed and log files, and its
    socket in the site's public directory."""

    def __init__(self, directory: Path, socket: Path) -> None:
        self.directory = Path(directory)
        self.socket = socket
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 10.0) -> "Munge":
        private_dir(self.directory)
        key = private_file(self.directory / "munge.key")
        key.write_bytes(secrets.token_bytes(1024))
        d = self.directory
        argv = [_binary("munged"), "--foreground", f"--key-file={key}", f"--socket={self.socket}",
                f"--pid-file={d / 'munged.pid'}", f"--log-file={d / 'munged.log'}",
                f"--seed-file={d / 'munged.seed'}"]
        self.process = _spawn(argv, dict(os.environ), d / "munged.out")
        deadline = time.monotonic() + timeout
        while not self.socket.exists():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise ConnectivityError(f"munged did not start: see {d / 'munged.log'}")
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        proc, self.process = self.process, None
        _stop(proc)


@dataclass
class SlurmCluster:
    """One private cluster: ``slurmctld`` and ``nodes`` slurmd named ``<name>1..``."""

    name: str
    directory: Path
    munge: Munge
    conf: Path  # in the site's public directory: every submitter reads it
    nodes: int = 4
    cpus: int = 2
    memory_mb: int = 1000
    #: SchedulerParameters: batch jobs start in the next pass, no 3 s batch delay
    scheduler_parameters: str = "batch_sched_delay=0,bf_interval=1,sched_min_interval=0"
    ctld_port: int = 0
    node_ports: list[int] = field(default_factory=list)
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def spool(self) -> Path:
        """Beside the configuration: a job runs its script from here under its own uid."""
        return self.conf.with_name(f"{self.name}-spool")

    @property
    def node_names(self) -> list[str]:
        return [f"{self.name}{i}" for i in range(1, self.nodes + 1)]

    def env(self) -> dict[str, str]:
        """What a client command needs to address this cluster (and no other)."""
        return {"SLURM_CONF": str(self.conf)}

    def start(self, timeout: float = 20.0) -> "SlurmCluster":
        private_dir(self.directory)
        self.ctld_port, *self.node_ports = _ports(1 + self.nodes)
        self.conf.write_text(self._conf_text())
        self.conf.chmod(0o644)  # as /etc/slurm/slurm.conf: no secret in it
        env = {**os.environ, **self.env()}
        logs = self.directory / "logs"
        for sub in (logs, self.directory / "state"):
            private_dir(sub)
        self.spool.mkdir(mode=0o755, exist_ok=True)  # jobs exec their script from it as themselves
        self.processes = [self._controller("-i")]
        for node in self.node_names:
            self.processes.append(_spawn([_binary("slurmd"), "-D", "-N", node], env,
                                         logs / f"slurmd.{node}.out"))
        try:
            self._wait_idle(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _controller(self, *flags: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, **self.env()}
        return _spawn([_binary("slurmctld"), "-D", *flags], env,
                      self.directory / "logs" / "slurmctld.out")

    def stop_controller(self) -> None:
        """Stop slurmctld alone (a controller outage): its nodes and running jobs go on."""
        _stop(self.processes[0])

    def start_controller(self, timeout: float = 20.0) -> None:
        """Start slurmctld again after :meth:`stop_controller`; it recovers its jobs from
        its saved state and answers once its nodes are back."""
        self.processes[0] = self._controller()
        deadline = time.monotonic() + timeout
        while self.run("sinfo", "-h").returncode != 0:
            if time.monotonic() > deadline:
                raise ConnectivityError(f"cluster {self.name}: slurmctld did not answer "
                                        f"within {timeout:g} s; see {self.directory / 'logs'}")
            time.sleep(0.1)

    def _conf_text(self) -> str:
        d = self.directory
        first, last = self.node_ports[0], self.node_ports[-1]
        ports = (f"[{first}-{last}]" if self.node_ports == list(range(first, last + 1))
                 else ",".join(map(str, self.node_ports)))
        lines = {
            "ClusterName": self.name, "SlurmctldHost": "localhost",
            "SlurmctldPort": self.ctld_port, "SlurmUser": "root", "SlurmdUser": "root",
            "AuthType": "auth/munge", "CredType": "cred/munge",
            "AuthInfo": f"socket={self.munge.socket}",
            "StateSaveLocation": d / "state", "SlurmdSpoolDir": self.spool / "%n",
            "SlurmctldPidFile": d / "slurmctld.pid", "SlurmdPidFile": d / "slurmd.%n.pid",
            "SlurmctldLogFile": d / "logs" / "slurmctld.log",
            "SlurmdLogFile": d / "logs" / "slurmd.%n.log",
            "ProctrackType": "proctrack/pgid", "TaskPlugin": "task/none",
            "JobAcctGatherType": "jobacct_gather/none",
            "AccountingStorageType": "accounting_storage/none", "JobCompType": "jobcomp/none",
            "SchedulerType": "sched/backfill", "SchedulerParameters": self.scheduler_parameters,
            "SelectType": "select/cons_tres", "SelectTypeParameters": "CR_CPU",
            "ReturnToService": 2, "MpiDefault": "none", "SlurmdParameters": "config_overrides",
            "MinJobAge": 300, "KillWait": 3,
        }
        text = "".join(f"{key}={value}\n" for key, value in lines.items())
        nodes = f"{self.name}[1-{self.nodes}]"
        return text + (
            f"NodeName={nodes} NodeHostname=localhost Port={ports} CPUs={self.cpus} "
            f"RealMemory={self.memory_mb} State=UNKNOWN\n"
            f"PartitionName=all Nodes={nodes} Default=YES MaxTime=INFINITE State=UP\n")

    def _wait_idle(self, timeout: float) -> None:
        """Until every node reports idle (registered with the controller)."""
        deadline = time.monotonic() + timeout
        states: list[str] = []
        while time.monotonic() < deadline:
            dead = [p.args for p in self.processes if p.poll() is not None]
            if dead:
                raise ConnectivityError(f"cluster {self.name}: {dead[0]!r} exited; "
                                        f"see {self.directory / 'logs'}")
            states = self.run("sinfo", "-h", "-N", "-o", "%T").stdout.split()
            if len(states) == self.nodes and all(s == "idle" for s in states):
                return
            time.sleep(0.1)
        raise ConnectivityError(f"cluster {self.name}: nodes not idle within {timeout:g} s "
                                f"({states}); see {self.directory / 'logs'}")

    def run(self, command: str, *args: str, timeout: float = 10.0) -> subprocess.CompletedProcess[str]:
        """A Slurm client command against this cluster (never raises on its exit code)."""
        return subprocess.run([_binary(command), *args], env={**os.environ, **self.env()},
                              capture_output=True, text=True, timeout=timeout)

    def stop(self) -> None:
        """Cancel every job, stop the daemons, then end what job steps they left (see the
        module docstring)."""
        procs, self.processes = self.processes, []
        if procs and procs[0].poll() is None:
            self.run("scancel", "--partition=all")
        for proc in reversed(procs):  # the node daemons first, the controller last
            _stop(proc)
        _end_strays(self.directory)


def _end_strays(directory: Path) -> None:
    """Kill the job steps holding a file under ``directory`` open (a slurmstepd keeps its
    node's log), with every process they started."""
    inside = str(directory) + os.sep
    strays: list[psutil.Process] = []
    for proc in psutil.process_iter():
        try:
            if any(f.path.startswith(inside) for f in proc.open_files()):
                strays += [*proc.children(recursive=True), proc]
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for proc in strays:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(strays, timeout=5)


class SlurmSite:
    """One munged and several private clusters under ``directory``; a context manager.

    ``clusters`` maps each cluster name (lowercase letters) to its node count.  What
    every submitter must reach, the munge socket and each cluster's ``slurm.conf`` (as a
    real site's /run/munge and /etc/slurm), lies in a public directory of its own under
    the system's temporary directory: searchable by all but not listable.  Keys, state and
    logs stay in the owner-only ``directory``; the slurmd spools (each job's script,
    run as its owner) sit in the public one, as /var/spool/slurmd does."""

    def __init__(self, directory: Path, clusters: dict[str, int], cpus: int = 2) -> None:
        for name in clusters:
            if not (name.isalpha() and name.islower()):
                raise ConfigError(f"cluster name {name!r}: lowercase letters only "
                                  "(node names are the cluster name and a number)",
                                  source="SlurmSite", key=name)
        self.directory = Path(directory)
        self.public: Path | None = None
        self.sizes, self.cpus = dict(clusters), cpus
        self.clusters: dict[str, SlurmCluster] = {}

    def start(self) -> "SlurmSite":
        private_dir(self.directory)
        self.public = Path(tempfile.mkdtemp(prefix="grid-tasks-slurm-"))
        self.public.chmod(0o711)
        self.munge = Munge(self.directory / "munge", self.public / "munge.socket")
        self.clusters = {name: SlurmCluster(name, self.directory / name, self.munge,
                                            self.public / f"{name}.conf", nodes=count, cpus=self.cpus)
                         for name, count in self.sizes.items()}
        self.munge.start()
        try:
            for cluster in self.clusters.values():
                cluster.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        for cluster in self.clusters.values():
            cluster.stop()
        if self.public is not None:
            self.munge.stop()
            shutil.rmtree(self.public, ignore_errors=True)
            self.public = None

    def __getitem__(self, name: str) -> SlurmCluster:
        return self.clusters[name]

    def __enter__(self) -> "SlurmSite":
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
