"""Scheduler policy configuration: a plain dataclass, three presets and a maui.cfg bridge."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Mapping, TypeVar

from grid_tasks.maui.model import SchedulerError

CREDENTIAL_KINDS = ("USER", "GROUP", "ACCOUNT", "CLASS", "QOS")
THROTTLE_KEYS = ("MAXJOB", "MAXPROC", "MAXPS", "MAXNODE", "MAXIJOB")
E = TypeVar("E", bound=Enum)


class UnknownPolicyError(SchedulerError):
    """A configured policy name no policy class implements (names the parameter and the choices)."""


def policy_choice(enum: type[E], parameter: str, value: object) -> E:
    """``value`` (a member or its name, any case) as a member of ``enum``."""
    if isinstance(value, enum):
        return value
    key = str(value.value if isinstance(value, Enum) else value).strip().upper()
    try:
        return enum(key)
    except ValueError:
        known = ", ".join(m.value for m in enum)
        raise UnknownPolicyError(f"{parameter} {value!r} is not a known policy; choose one of {known}") from None


class BackfillPolicy(str, Enum):
    FIRSTFIT = "FIRSTFIT"
    BESTFIT = "BESTFIT"
    GREEDY = "GREEDY"
    NONE = "NONE"


class BackfillMetric(str, Enum):
    """BACKFILLMETRIC: what BESTFIT and GREEDY maximise (see maui.policies.metric)."""

    PROCS = "PROCS"
    PROCSECONDS = "PROCSECONDS"
    SECONDS = "SECONDS"
    PE = "PE"
    NODES = "NODES"


class ReservationPolicy(str, Enum):
    """How job reservations live across iterations.

    HIGHEST: a job keeps its reservation until it starts; the reservation is only ever
    moved earlier (re-placed after resources were freed).  CURRENTHIGHEST: every
    iteration drops the job reservations and makes them again for the current top
    jobs.  NEVER: no job reservations at all.
    """

    HIGHEST = "HIGHEST"
    CURRENTHIGHEST = "CURRENTHIGHEST"
    NEVER = "NEVER"


class AvailabilityPolicy(str, Enum):
    """RESOURCEAVAILABILITYPOLICY: which terms of MAX(Dedicated, Utilized) count."""

    COMBINED = "COMBINED"
    DEDICATED = "DEDICATED"
    UTILIZED = "UTILIZED"


class FairsharePolicy(str, Enum):
    NONE = "NONE"
    DEDICATEDPS = "DEDICATEDPS"
    DEDICATEDPES = "DEDICATEDPES"
    UTILIZEDPS = "UTILIZEDPS"


#: Maui's documented defaults: component weights 1, subcomponent weights 0 except
#: QUEUETIMEWEIGHT, so that an unconfigured Maui is first-come first-served.
DEFAULT_WEIGHTS: dict[str, float] = {
    "CREDWEIGHT": 1, "FSWEIGHT": 1, "SERVWEIGHT": 1, "RESWEIGHT": 1,
    "USERWEIGHT": 0, "GROUPWEIGHT": 0, "ACCOUNTWEIGHT": 0, "CLASSWEIGHT": 0, "QOSWEIGHT": 0,
    "FSUSERWEIGHT": 0, "FSGROUPWEIGHT": 0, "FSACCOUNTWEIGHT": 0, "FSCLASSWEIGHT": 0, "FSQOSWEIGHT": 0,
    "QUEUETIMEWEIGHT": 1, "XFACTORWEIGHT": 0,
    "PROCWEIGHT": 0, "NODEWEIGHT": 0, "MEMWEIGHT": 0, "PEWEIGHT": 0,
}


@dataclass(frozen=True)
class FSTarget:
    """A fairshare target in percent; mode '' (target), '+' (floor), '-' (ceiling) or
    '^' (cap, which for priority acts as a ceiling)."""

    value: float
    mode: str = ""

    @classmethod
    def parse(cls, raw: Any) -> "FSTarget":
        if isinstance(raw, FSTarget):
            return raw
        if isinstance(raw, (int, float)):
            return cls(float(raw))
        text = str(raw).strip()
        mode = text[-1] if text and text[-1] in "+-^" else ""
        try:
            return cls(float(text[:-1] if mode else text), mode)
        except ValueError:
            raise SchedulerError(f"bad fairshare target {raw!r}: expected N, N+ or N-") from None


@dataclass
class SchedulerConfig:
    """Every policy knob the core understands, with Maui's defaults."""

    reservation_depth: int | None = 1  # None: unlimited
    reservation_policy: ReservationPolicy = ReservationPolicy.CURRENTHIGHEST
    backfill_policy: BackfillPolicy = BackfillPolicy.FIRSTFIT
    backfill_metric: BackfillMetric = BackfillMetric.PROCS
    node_allocation_policy: str = "FIRSTAVAILABLE"
    task_distribution: str = "PACK"  # or ROUNDROBIN
    availability_policy: AvailabilityPolicy = AvailabilityPolicy.COMBINED
    weights: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))
    #: credential priorities: kind -> name -> priority (USERCFG[u] PRIORITY=...)
    cred_priority: dict[str, dict[str, float]] = field(default_factory=dict)
    fs_policy: FairsharePolicy = FairsharePolicy.NONE
    fs_interval: float = 43200.0
    fs_depth: int = 8
    fs_decay: float = 1.0
    fs_targets: dict[str, dict[str, FSTarget]] = field(default_factory=dict)
    #: kind -> name (or "DEFAULT") -> key -> (soft, hard)
    throttles: dict[str, dict[str, dict[str, tuple[float, float]]]] = field(default_factory=dict)
    modules: tuple[str, ...] = ()
    #: name -> StandingReservation (SRCFG), instantiated period by period
    standing_reservations: dict[str, Any] = field(default_factory=dict)
    #: allow the single-pool fast path when the state permits it
    fast_path: bool = True

    def __post_init__(self) -> None:
        self.reservation_policy = policy_choice(ReservationPolicy, "RESERVATIONPOLICY", self.reservation_policy)
        self.backfill_policy = policy_choice(BackfillPolicy, "BACKFILLPOLICY", self.backfill_policy)
        self.backfill_metric = policy_choice(BackfillMetric, "BACKFILLMETRIC", self.backfill_metric)
        self.availability_policy = policy_choice(AvailabilityPolicy, "NODEAVAILABILITYPOLICY",
                                                 self.availability_policy)
        self.fs_policy = policy_choice(FairsharePolicy, "FSPOLICY", self.fs_policy)
        self.node_allocation_policy = str(self.node_allocation_policy).upper()
        self.task_distribution = str(self.task_distribution).upper()
        if self.reservation_depth is not None and self.reservation_depth < 0:
            raise SchedulerError("reservation_depth must be >= 0 or None (unlimited)")
        merged = dict(DEFAULT_WEIGHTS)
        merged.update({k.upper(): float(v) for k, v in self.weights.items()})
        self.weights = merged
        self.fs_targets = {k: {n: FSTarget.parse(t) for n, t in v.items()} for k, v in self.fs_targets.items()}

    @classmethod
    def preset(cls, name: str, **overrides: Any) -> "SchedulerConfig":
        """``fcfs``, ``easy`` or ``conservative``; they differ only in reservation depth
        (and fcfs in not backfilling).  HIGHEST keeps a reservation and moves it only
        earlier, which is exactly how the reference simulator re-places its jobs."""
        key = name.lower()
        if key == "fcfs":
            base = cls(reservation_depth=0, backfill_policy=BackfillPolicy.NONE,
                       reservation_policy=ReservationPolicy.HIGHEST)
        elif key == "easy":
            base = cls(reservation_depth=1, reservation_policy=ReservationPolicy.HIGHEST)
        elif key == "conservative":
            base = cls(reservation_depth=None, reservation_policy=ReservationPolicy.HIGHEST)
        else:
            raise SchedulerError(f"unknown preset {name!r}: choose fcfs, easy or conservative")
        return replace(base, **overrides) if overrides else base

    @property
    def depth(self) -> float:
        """Reservation depth as a number (infinite when unlimited, 0 when NEVER)."""
        if self.reservation_policy is ReservationPolicy.NEVER:
            return 0
        return float("inf") if self.reservation_depth is None else self.reservation_depth

    @property
    def fifo(self) -> bool:
        """True when priority reduces to submission order (queue time only)."""
        w = self.weights
        serv_only = all(
            w[k] == 0 for k in DEFAULT_WEIGHTS
            if k not in ("QUEUETIMEWEIGHT", "CREDWEIGHT", "FSWEIGHT", "SERVWEIGHT", "RESWEIGHT")
        )
        return serv_only and w["SERVWEIGHT"] * w["QUEUETIMEWEIGHT"] > 0 and self.fs_policy is FairsharePolicy.NONE


def throttle_limit(limits: Mapping[str, tuple[float, float]], key: str) -> tuple[float, float] | None:
    """The (soft, hard) pair for ``key`` or None when unlimited."""
    pair = limits.get(key)
    if pair is None:
        return None
    if isinstance(pair, (int, float)):
        return (float(pair), float(pair))
    soft, hard = pair
    return (float(soft), float(hard if hard is not None else soft))
