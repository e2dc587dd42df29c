"""Value types of maui.cfg for resources, node availability and days of the week
(standing reservations' ``RESOURCES`` and ``DAYS``, ``NODEAVAILABILITYPOLICY``).

Same contract as :mod:`grid_tasks.maui.cfg.types`: ``parse``, ``format``, ``describe``,
and :class:`~grid_tasks.maui.cfg.types.ValueProblem` with the offending offset.
"""

from __future__ import annotations

import re
from typing import Any

from grid_tasks.maui.cfg.types import (
    Choice, List, ValueProblem, ValueType, _NAME_RE, _parse_int, _split,
)


_RES_ITEM_SPLIT = re.compile(r"[;+]")


class Resources(ValueType):
    """Per-task resources ``PROCS:2;MEM:512`` -> {"PROCS": 2, "MEM": 512}.

    PROCS:-1 means every processor of the node, as Maui's standing reservations use it.
    """

    label = "resources"

    def parse(self, text: str) -> dict[str, int]:
        items = _split(text, _RES_ITEM_SPLIT)
        if not items:
            raise ValueProblem("expected RESOURCE:COUNT[;RESOURCE:COUNT]...")
        result: dict[str, int] = {}
        for item, offset in items:
            name, sep, count = item.partition(":")
            if not sep or not _NAME_RE.fullmatch(name):
                raise ValueProblem(f"expected RESOURCE:COUNT, got {item!r}", offset)
            value = _parse_int(count, offset + len(name) + 1, "a resource count")
            if value < -1:
                raise ValueProblem(f"resource count must be -1 (all) or more, got {value}",
                                   offset + len(name) + 1)
            result[name.upper()] = value
        return result

    def format(self, value: Any) -> str:
        return ";".join(f"{name}:{count}" for name, count in value.items())


_RESOURCE_KINDS = ("PROCS", "MEM", "DISK", "SWAP")


class Availability(ValueType):
    """NODEAVAILABILITYPOLICY: ``POLICY[:RESOURCE]...`` -> {resource or "DEFAULT": policy}."""

    multi = True
    label = "availability policy"
    policies = Choice("DEDICATED", "UTILIZED", "COMBINED")

    def parse(self, text: str) -> dict[str, str]:
        words = _split(text, re.compile(r"[,\s]+"))
        if not words:
            raise ValueProblem("expected DEDICATED, UTILIZED or COMBINED")
        result: dict[str, str] = {}
        for word, offset in words:
            policy, sep, resource = word.partition(":")
            try:
                policy = self.policies.parse(policy)
            except ValueProblem as exc:
                raise ValueProblem(exc.message, offset) from None
            key = "DEFAULT"
            if sep:
                key = resource.upper()
                if key not in _RESOURCE_KINDS:
                    raise ValueProblem(f"resource must be one of {', '.join(_RESOURCE_KINDS)}; "
                                       f"got {resource!r}", offset + len(policy) + 1)
            result[key] = policy
        return result

    def format(self, value: Any) -> str:
        return " ".join(p if r == "DEFAULT" else f"{p}:{r}" for r, p in value.items())


DAY_NAMES = ("MON", "TUE", "WED", "THU", "FRI", "SAT", "SUN")


class Days(ValueType):
    """Standing reservation DAYS: ``ALL`` or ``Mon,Tue,...`` -> tuple of MON..SUN."""

    label = "days"
    _choice = Choice(*DAY_NAMES)

    def parse(self, text: str) -> tuple[str, ...]:
        if text.upper() == "ALL":
            return DAY_NAMES
        days = List(self._choice).parse(text)
        return tuple(d for d in DAY_NAMES if d in days)

    def format(self, value: Any) -> str:
        return "ALL" if tuple(value) == DAY_NAMES else ",".join(value)
