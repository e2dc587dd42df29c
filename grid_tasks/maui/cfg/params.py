"""The schema of maui.cfg: every parameter grid_tasks knows, its type and Maui's default.

Defaults follow the Maui Administrator's Guide (Appendix F) and Maui 3.2's compiled-in
defaults.  Parameters are grouped by category for display.  Three kinds of entries:

* :data:`PARAMETERS` -- ``NAME VALUE...`` lines (and ``NAME[index] VALUE`` per-partition
  or legacy indexed forms);
* :data:`OBJECT_PARAMETERS` -- ``NAME[object] KEY=VALUE ...`` lines (USERCFG, SRCFG,
  NODECFG, ...), each with its table of keys;
* :data:`ALIASES` -- other spellings accepted for a parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from grid_tasks.maui.cfg.res_types import Availability, Days, Resources
from grid_tasks.maui.cfg.types import (
    INFINITY,
    Bool,
    Choice,
    Float,
    FsTarget,
    Int,
    List,
    Str,
    Throttle,
    Time,
    ValueType,
)


@dataclass(frozen=True)
class Param:
    """One ``NAME VALUE`` parameter: its type, Maui's default and a one-line summary."""

    name: str
    type: ValueType
    default: Any
    category: str
    doc: str = ""


NODE_ALLOCATION_POLICIES = (
    "FIRSTAVAILABLE", "LASTAVAILABLE", "MINRESOURCE", "CPULOAD", "PRIORITY", "MACHINEPRIO",
    "LOCAL", "CONTIGUOUS", "MAXBALANCE", "FASTEST", "MINLOCAL", "MINGLOBAL",
)
BACKFILL_POLICIES = ("FIRSTFIT", "BESTFIT", "GREEDY", "PREEMPT", "NONE")
BACKFILL_METRICS = ("PROCS", "PROCSECONDS", "SECONDS", "PE", "NODES")
RESERVATION_POLICIES = ("CURRENTHIGHEST", "HIGHEST", "NEVER")
NODE_ACCESS_POLICIES = ("SHARED", "SINGLEJOB", "SINGLETASK", "SINGLEUSER", "DEDICATED")
FS_POLICIES = ("NONE", "DEDICATEDPS", "DEDICATEDPES", "UTILIZEDPS")
JOB_NODE_MATCH = ("EXACTNODE", "EXACTPROC")
TASK_DISTRIBUTION = ("DEFAULT", "ROUNDROBIN", "PACK", "LOCAL")
SIM_SUBMISSION = ("NORMAL", "CONSTANTJOBDEPTH", "CONSTANTPSDEPTH", "REPLAY")
LOG_FACILITIES = (
    "FALL", "FCORE", "FSCHED", "FSOCK", "FUI", "FLL", "FSDR", "FCONFIG", "FSTAT", "FSIM",
    "FSTRUCT", "FFS", "FCKPT", "FBANK", "FRM", "FPBS", "FWIKI", "FSGE", "FS3", "FLSF", "FNAT",
)


def _p(name: str, type_: ValueType, default: Any, category: str, doc: str = "") -> Param:
    return Param(name, type_, default, category, doc)


_W = Int()  # priority weights: any integer, negative weights are legal in Maui

_TABLE: tuple[Param, ...] = (
    # --- scheduling loop, reservations, backfill -------------------------------------
    # At least a second: the iteration is a beat entry of this period, 0 would spin.
    _p("RMPOLLINTERVAL", Time(minimum=1), 60, "scheduling",
       "time between scheduling iterations"),
    _p("RESERVATIONDEPTH", Int(0), 1, "scheduling",
       "how many blocked top jobs get a reservation (1 = EASY; large = conservative)"),
    _p("RESERVATIONPOLICY", Choice(*RESERVATION_POLICIES), "CURRENTHIGHEST", "scheduling",
       "which blocked jobs keep priority reservations"),
    _p("RESERVATIONRETRYTIME", Time(), 0, "scheduling",
       "how long a failed reservation start is retried"),
    _p("BACKFILLPOLICY", Choice(*BACKFILL_POLICIES), "FIRSTFIT", "scheduling",
       "how idle windows are filled without delaying reservations"),
    _p("BACKFILLDEPTH", Int(0), 0, "scheduling", "jobs considered for backfill (0 = all)"),
    _p("BACKFILLMETRIC", Choice(*BACKFILL_METRICS), "PROCS", "scheduling",
       "what BESTFIT/GREEDY maximise"),
    _p("BACKFILLMAXSCHEDULES", Int(1), 10000, "scheduling", "GREEDY schedules evaluated"),
    _p("NODEALLOCATIONPOLICY", Choice(*NODE_ALLOCATION_POLICIES), "LASTAVAILABLE",
       "scheduling", "which free nodes a starting job gets"),
    _p("NODEAVAILABILITYPOLICY", Availability(), {"DEFAULT": "COMBINED"}, "scheduling",
       "which of dedicated/utilized resources make a node busy, optionally per resource"),
    _p("JOBNODEMATCHPOLICY", List(Choice(*JOB_NODE_MATCH)), (), "scheduling",
       "nodes must match the job's request exactly"),
    _p("NODEACCESSPOLICY", Choice(*NODE_ACCESS_POLICIES), "SHARED", "scheduling",
       "whether jobs may share a node"),
    _p("TASKDISTRIBUTIONPOLICY", Choice(*TASK_DISTRIBUTION), "DEFAULT", "scheduling",
       "how tasks are laid out over the allocated nodes"),
    _p("DEFERTIME", Time(), 3600, "scheduling", "how long a job that cannot run is deferred"),
    _p("DEFERCOUNT", Int(0), 24, "scheduling", "deferrals before a job is put on hold"),
    _p("DEFERSTARTCOUNT", Int(0), 1, "scheduling", "failed starts before a job is deferred"),
    _p("JOBMAXSTARTTIME", Time(), INFINITY, "scheduling", "longest a job may stay starting"),
    _p("JOBMAXOVERRUN", Time(), 600, "scheduling", "how far past its walltime a job may run"),
    _p("JOBPURGETIME", Time(), 0, "scheduling", "how long completed jobs are remembered"),
    _p("MAXJOBPERITERATION", Int(0), 0, "scheduling", "jobs started per iteration (0 = no cap)"),
    _p("NODEPOLLFREQUENCY", Int(0), 0, "scheduling", "iterations between node refreshes"),
    _p("NODEDOWNSTATEDELAYTIME", Time(), 3600, "scheduling",
       "how long a silent node is Down before it is Unknown"),
    _p("NODELOADPOLICY", Choice("ADJUSTSTATE", "ADJUSTPROCS"), "ADJUSTSTATE", "scheduling",
       "how node load affects availability"),
    _p("NODEMAXLOAD", Float(0.0), 0.0, "scheduling", "load above which a node is busy"),
    _p("JOBPRIOACCRUALPOLICY", Choice("ALWAYS", "QUEUEPOLICY", "FULLPOLICY"), "QUEUEPOLICY",
       "scheduling", "when queue time starts counting toward priority"),
    _p("ENABLENEGJOBPRIORITY", Bool(), False, "scheduling", "allow negative priorities"),
    _p("REJECTNEGPRIOJOBS", Bool(), True, "scheduling", "do not start negative-priority jobs"),
    _p("PREEMPTPOLICY", Choice("REQUEUE", "SUSPEND", "CHECKPOINT"), "REQUEUE", "scheduling",
       "what happens to a preempted job"),
    # Moab's name; grid_tasks implements the two actions a lost node needs (see
    # grid_tasks.scheduling.recovery): the job is FAILED, or requeued to start anew.
    _p("JOBACTIONONNODEFAILURE", Choice("FAIL", "REQUEUE"), "FAIL", "scheduling",
       "what a node that stops heartbeating does to its jobs: FAIL them or REQUEUE them"),
    _p("MODULES", List(separators=r"[,\s]+"), (), "scheduling",
       "grid_tasks: pluggable scheduler modules called every iteration (Java Maui style)"),
    # --- priority: components and subcomponents ---------------------------------------
    _p("SERVICEWEIGHT", _W, 1, "priority", "weight of the service component"),
    _p("QUEUETIMEWEIGHT", _W, 1, "priority", "weight of queue time (minutes waited)"),
    _p("XFACTORWEIGHT", _W, 0, "priority", "weight of expansion factor"),
    _p("BYPASSWEIGHT", _W, 0, "priority", "weight of times a job was backfilled over"),
    _p("XFMINWCLIMIT", Time(), 120, "priority", "smallest walltime used in XFACTOR"),
    _p("TARGETWEIGHT", _W, 1, "priority", "weight of the target component"),
    _p("TARGETQUEUETIMEWEIGHT", _W, 0, "priority", "weight of QoS queue time target"),
    _p("TARGETXFACTORWEIGHT", _W, 0, "priority", "weight of QoS xfactor target"),
    _p("CREDWEIGHT", _W, 1, "priority", "weight of the credential component"),
    _p("USERWEIGHT", _W, 0, "priority", "weight of the user's PRIORITY"),
    _p("GROUPWEIGHT", _W, 0, "priority", "weight of the group's PRIORITY"),
    _p("ACCOUNTWEIGHT", _W, 0, "priority", "weight of the account's PRIORITY"),
    _p("CLASSWEIGHT", _W, 0, "priority", "weight of the class's PRIORITY"),
    _p("QOSWEIGHT", _W, 0, "priority", "weight of the QoS's PRIORITY"),
    _p("FSWEIGHT", _W, 1, "priority", "weight of the fairshare component"),
    _p("FSUSERWEIGHT", _W, 0, "priority", "weight of user fairshare"),
    _p("FSGROUPWEIGHT", _W, 0, "priority", "weight of group fairshare"),
    _p("FSACCOUNTWEIGHT", _W, 0, "priority", "weight of account fairshare"),
    _p("FSCLASSWEIGHT", _W, 0, "priority", "weight of class fairshare"),
    _p("FSQOSWEIGHT", _W, 0, "priority", "weight of QoS fairshare"),
    _p("RESWEIGHT", _W, 1, "priority", "weight of the resource component"),
    _p("PROCWEIGHT", _W, 0, "priority", "weight of requested processors"),
    _p("NODEWEIGHT", _W, 0, "priority", "weight of requested nodes"),
    _p("MEMWEIGHT", _W, 0, "priority", "weight of requested memory (MB)"),
    _p("SWAPWEIGHT", _W, 0, "priority", "weight of requested swap (MB)"),
    _p("DISKWEIGHT", _W, 0, "priority", "weight of requested disk (MB)"),
    _p("PSWEIGHT", _W, 0, "priority", "weight of requested processor-seconds"),
    _p("PEWEIGHT", _W, 0, "priority", "weight of requested processor-equivalents"),
    # --- fairshare --------------------------------------------------------------------
    _p("FSPOLICY", Choice(*FS_POLICIES), "NONE", "fairshare", "usage metric for fairshare"),
    _p("FSDEPTH", Int(1, 32), 8, "fairshare", "fairshare windows remembered"),
    # A window of 0 s would divide usage times by zero (windows are now // FSINTERVAL).
    _p("FSINTERVAL", Time(minimum=1), 43200, "fairshare", "length of one fairshare window"),
    # The admin guide's range for FSDECAY is 0.01 to 1.0 (1.0: no decay).
    _p("FSDECAY", Float(0.01, 1.0), 1.0, "fairshare", "weight of each older window (0.01..1)"),
    _p("FSENFORCEMENT", Bool(), False, "fairshare", "enforce ceilings/caps as limits"),
    # --- throttling: system-wide defaults (per-credential limits live in *CFG lines) ---
    _p("MAXJOBPERUSERCOUNT", Throttle(), (-1, -1), "throttling", "running jobs per user"),
    _p("MAXPROCPERUSERCOUNT", Throttle(), (-1, -1), "throttling", "processors per user"),
    _p("MAXNODEPERUSERCOUNT", Throttle(), (-1, -1), "throttling", "nodes per user"),
    _p("MAXPSPERUSERCOUNT", Throttle(), (-1, -1), "throttling", "processor-seconds per user"),
    _p("MAXJOBQUEUEDPERUSERCOUNT", Throttle(), (-1, -1), "throttling", "idle jobs per user"),
    _p("MAXJOBPERGROUPCOUNT", Throttle(), (-1, -1), "throttling", "running jobs per group"),
    _p("MAXPROCPERGROUPCOUNT", Throttle(), (-1, -1), "throttling", "processors per group"),
    _p("MAXJOBPERACCOUNTCOUNT", Throttle(), (-1, -1), "throttling", "running jobs per account"),
    _p("MAXPROCPERACCOUNTCOUNT", Throttle(), (-1, -1), "throttling", "processors per account"),
    # --- logging ----------------------------------------------------------------------
    _p("LOGFILE", Str(), "maui.log", "logging", "log file name (in LOGDIR)"),
    _p("LOGDIR", Str(), "log/", "logging", "log directory"),
    _p("LOGLEVEL", Int(0, 9), 0, "logging", "verbosity 0..9"),
    _p("LOGFACILITY", List(Choice(*LOG_FACILITIES)), ("FALL",), "logging",
       "which subsystems log"),
    _p("LOGFILEMAXSIZE", Int(0), 1000000, "logging", "bytes before the log rolls"),
    _p("LOGFILEROLLDEPTH", Int(0), 1, "logging", "rolled logs kept"),
    # --- server and statistics --------------------------------------------------------
    _p("SERVERMODE", Choice("NORMAL", "TEST", "SIMULATION"), "NORMAL", "server",
       "live scheduling, dry run or simulation"),
    _p("SERVERHOST", Str(), "", "server", "host the scheduler runs on"),
    _p("SERVERPORT", Int(1, 65535), 40559, "server", "port of the scheduler's client API"),
    _p("SERVERNAME", Str(), "maui", "server", "scheduler name"),
    _p("ADMIN1", List(), ("root",), "server", "users with full control"),
    _p("ADMIN2", List(), (), "server", "users who may change jobs"),
    _p("ADMIN3", List(), (), "server", "users who may query everything"),
    _p("STATDIR", Str(), "stats/", "server", "where statistics are written"),
    _p("CHECKPOINTFILE", Str(), "maui.ck", "server", "checkpoint file"),
    _p("CHECKPOINTINTERVAL", Time(), 300, "server", "time between checkpoints"),
    _p("CHECKPOINTEXPIRATIONTIME", Time(), 300000, "server", "age after which state is stale"),
    _p("DEFAULTCLASSLIST", List(separators=r"[,\s]+"), ("DEFAULT",), "server", "classes of nodes with none"),
    # --- simulation -------------------------------------------------------------------
    _p("SIMWORKLOADTRACEFILE", Str(), "workload", "simulation", "job trace to replay"),
    _p("SIMRESOURCETRACEFILE", Str(), "resource", "simulation", "node trace to load"),
    _p("SIMJOBSUBMISSIONPOLICY", Choice(*SIM_SUBMISSION), "CONSTANTJOBDEPTH", "simulation",
       "how trace jobs are submitted"),
    _p("SIMINITIALQUEUEDEPTH", Int(0), 16, "simulation", "jobs queued at start"),
    _p("SIMSTOPITERATION", Int(-1), -1, "simulation", "iteration to pause at (-1 = never)"),
    _p("SIMEXITITERATION", Int(-1), -1, "simulation", "iteration to stop at (-1 = never)"),
    _p("SIMAUTOSHUTDOWN", Bool(), True, "simulation", "stop when the trace is exhausted"),
    _p("SIMPURGEBLOCKEDJOBS", Bool(), True, "simulation", "drop jobs that can never run"),
    _p("SIMNODECOUNT", Int(0), 0, "simulation", "nodes to load (0 = all)"),
    _p("SIMSTARTTIME", Int(0), 0, "simulation", "epoch the simulated clock starts at"),
    _p("SIMTIMERATIO", Float(0.0), 0.0, "simulation", "simulated to wall time (0 = fast)"),
)

PARAMETERS: dict[str, Param] = {p.name: p for p in _TABLE}

#: Other spellings; the key is read as the parameter it maps to.
ALIASES: dict[str, str] = {
    "RESOURCEAVAILABILITYPOLICY": "NODEAVAILABILITYPOLICY",  # grid_tasks' spelling
    "SERVWEIGHT": "SERVICEWEIGHT",  # Moab's spelling
    "QUEUECFG": "CLASSCFG",  # Maui reads QUEUECFG[q] as CLASSCFG[q]
    "UFSWEIGHT": "FSUSERWEIGHT",  # Maui 3.0 names of the fairshare subweights
    "GFSWEIGHT": "FSGROUPWEIGHT",
    "AFSWEIGHT": "FSACCOUNTWEIGHT",
    "CFSWEIGHT": "FSCLASSWEIGHT",
    "QFSWEIGHT": "FSQOSWEIGHT",
    "UWEIGHT": "USERWEIGHT",
    "GWEIGHT": "GROUPWEIGHT",
    "AWEIGHT": "ACCOUNTWEIGHT",
    "PROCESSORWEIGHT": "PROCWEIGHT",
    "MEMORYWEIGHT": "MEMWEIGHT",
    "RESOURCEWEIGHT": "RESWEIGHT",
}

# --- KEY=VALUE forms ------------------------------------------------------------------

_LIMIT_KEYS = (
    "MAXJOB", "MAXIJOB", "MAXPROC", "MAXIPROC", "MAXPS", "MAXIPS", "MAXNODE", "MAXINODE",
    "MAXPE", "MAXIPE", "MAXMEM", "MAXIMEM",
)

#: Keys every credential line (USERCFG, GROUPCFG, ACCOUNTCFG, CLASSCFG, QOSCFG) accepts.
CREDENTIAL_KEYS: dict[str, ValueType] = {
    "PRIORITY": Int(),
    "FSTARGET": FsTarget(),
    **{key: Throttle() for key in _LIMIT_KEYS},
    "MAXWC": Time(),  # longest walltime any one job of the credential may ask for
    "QDEF": Str(),
    "QLIST": List(),
    "ADEF": Str(),
    "ALIST": List(),
    "PDEF": Str(),
    "PLIST": List(),
    "FLAGS": List(),
}

QOS_FLAGS = (
    "IGNJOBPERUSER", "IGNPROCPERUSER", "IGNPSPERUSER", "IGNJOBQUEUEDPERUSER", "IGNJOBPERGROUP",
    "IGNPROCPERGROUP", "IGNPSPERGROUP", "IGNJOBQUEUEDPERGROUP", "IGNJOBPERACCOUNT",
    "IGNPROCPERACCOUNT", "IGNPSPERACCOUNT", "IGNJOBQUEUEDPERACCOUNT", "IGNSYSMAXPROC",
    "IGNSYSMAXTIME", "IGNSYSMAXPS", "IGNSRMAXTIME", "IGNUSER", "IGNGROUP", "IGNACCOUNT",
    "IGNSYSTEM", "IGNALL", "PREEMPTOR", "PREEMPTEE", "DEDICATED", "RESERVEALWAYS",
    "USERESERVED", "NOBF", "NORESERVATION", "RESTARTPREEMPT",
)

#: Extra keys only QOSCFG accepts (service targets and QoS flags).
QOS_EXTRA_KEYS: dict[str, ValueType] = {
    "QFLAGS": List(Choice(*QOS_FLAGS)),
    "QTWEIGHT": Int(),
    "XFWEIGHT": Int(),
    "QTTARGET": Time(),
    "XFTARGET": Float(0.0),
}

#: Extra keys only CLASSCFG accepts.
CLASS_EXTRA_KEYS: dict[str, ValueType] = {
    "MAXPROCPERJOB": Int(0),
    "DEFAULT.FEATURES": List(),
    "DEFAULT.WCLIMIT": Time(),
}

CREDENTIAL_KINDS = ("USER", "GROUP", "ACCOUNT", "CLASS", "QOS")

SR_FLAGS = (
    "BYNAME", "PREEMPTEE", "SPACEFLEX", "TIMEFLEX", "IGNSTATE", "OWNERPREEMPT", "SINGLEUSE",
    "STANDINGRSV", "ADVRES", "DEDICATEDNODE", "DEDICATEDRESOURCE", "IGNRSV",
)

#: Keys of SRCFG[name] (standing reservations).
SRCFG_KEYS: dict[str, ValueType] = {
    "ACCESS": Choice("DEDICATED", "SHARED"),
    "ACCOUNTLIST": List(),
    "CHARGEACCOUNT": Str(),
    "CLASSLIST": List(),
    "DAYS": Days(),
    "DEPTH": Int(0),
    "ENDTIME": Time(),
    "FLAGS": List(Choice(*SR_FLAGS)),
    "GROUPLIST": List(),
    "HOSTLIST": List(),
    "JOBATTRLIST": List(),
    "NODEFEATURES": List(),
    "OWNER": Str(),
    "PARTITION": Str(),
    "PERIOD": Choice("DAY", "WEEK", "INFINITY"),
    "PRIORITY": Int(),
    "QOSLIST": List(),
    "RESOURCES": Resources(),
    "STARTTIME": Time(),
    "TASKCOUNT": Int(0),
    "TIMELIMIT": Time(),
    "TPN": Int(0),
    "USERLIST": List(),
    "WENDTIME": Time(),
    "WSTARTTIME": Time(),
}

#: Maui's defaults for a standing reservation's keys (DEFAULT_SR* in Maui 3.2).
SRCFG_DEFAULTS: dict[str, Any] = {
    "ACCESS": "DEDICATED",
    "DAYS": ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN"),
    "DEPTH": 2,
    "PERIOD": "DAY",
    "PRIORITY": 0,
    "STARTTIME": 0,
    "ENDTIME": 0,
    "TPN": 0,
    "FLAGS": (),
    "RESOURCES": {"PROCS": -1},
}

#: Keys of NODECFG[node] (NODECFG[DEFAULT] applies to every node).
NODECFG_KEYS: dict[str, ValueType] = {
    "PROCS": Int(0),
    "MEMORY": Int(0),
    "DISK": Int(0),
    "SWAP": Int(0),
    "FEATURES": List(),
    "PRIORITY": Int(),
    "SPEED": Float(0.0),
    "PROCSPEED": Int(0),
    "MAXJOB": Int(0),
    "MAXJOBPERUSER": Int(0),
    "MAXLOAD": Float(0.0),
    "PARTITION": Str(),
    "RACK": Int(0),
    "SLOT": Int(0),
    "NODETYPE": Str(),
    "ARCH": Str(),
    "OS": Str(),
    "NETWORK": List(),
    "ACCESS": Choice(*NODE_ACCESS_POLICIES),
    "CHARGERATE": Float(0.0),
}

#: Keys of RMCFG[name] (resource managers: one per grid_tasks cluster).
RMCFG_KEYS: dict[str, ValueType] = {
    "TYPE": Choice("PBS", "LL", "SGE", "LSF", "WIKI", "NATIVE", "GRIDTASKS"),
    "HOST": Str(),
    "PORT": Int(1, 65535),
    "SERVER": Str(),
    "TIMEOUT": Time(),
    "EPORT": Int(1, 65535),
    "AUTHTYPE": Str(),
    "NAME": Str(),
}


@dataclass(frozen=True)
class ObjectParam:
    """A ``NAME[object] KEY=VALUE ...`` parameter and the keys it accepts."""

    name: str
    keys: dict[str, ValueType]
    category: str
    doc: str = ""


def _cred(kind: str, extra: dict[str, ValueType] | None = None) -> ObjectParam:
    keys = {**CREDENTIAL_KEYS, **(extra or {})}
    return ObjectParam(f"{kind}CFG", keys, "credentials", f"{kind.lower()} priority and limits")


OBJECT_PARAMETERS: dict[str, ObjectParam] = {
    "USERCFG": _cred("USER"),
    "GROUPCFG": _cred("GROUP"),
    "ACCOUNTCFG": _cred("ACCOUNT"),
    "CLASSCFG": _cred("CLASS", CLASS_EXTRA_KEYS),
    "QOSCFG": _cred("QOS", QOS_EXTRA_KEYS),
    "SRCFG": ObjectParam("SRCFG", SRCFG_KEYS, "reservations", "standing reservations"),
    "NODECFG": ObjectParam("NODECFG", NODECFG_KEYS, "nodes", "per-node attributes"),
    "RMCFG": ObjectParam("RMCFG", RMCFG_KEYS, "resource managers", "resource managers"),
}

#: Maui 3.0's indexed standing-reservation parameters: ``SRHOSTLIST[0] node01`` is read
#: as ``SRCFG[0] HOSTLIST=node01``; ``SRNAME[0] x`` renames reservation 0 to ``x``.
LEGACY_SR_PARAMETERS: dict[str, str] = {
    f"SR{key}": key for key in SRCFG_KEYS if key not in ("FLAGS",)
} | {"SRFLAGS": "FLAGS", "SRNAME": "NAME"}


def canonical(name: str) -> str:
    """The schema name a parameter spelling refers to (upper-case, aliases resolved)."""
    upper = name.upper()
    return ALIASES.get(upper, upper)


def lookup(name: str) -> Param | None:
    """The :class:`Param` for a name or alias, in any case; None if unknown."""
    return PARAMETERS.get(canonical(name))
