"""The result of reading a maui.cfg: typed values, objects, warnings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grid_tasks.errors import NotFoundError, SourceError
from grid_tasks.maui.cfg.params import (
    CREDENTIAL_KINDS,
    PARAMETERS,
    SRCFG_DEFAULTS,
    canonical,
)
from grid_tasks.maui.cfg.types import FairshareTarget


class MauiConfigError(SourceError):
    """A maui.cfg cannot be read: bad syntax or a wrong value (line and column of it)."""


class MauiConfigErrors(MauiConfigError):
    """Several errors in one maui.cfg, in file order, so that one run reports them all.

    Located at the first; ``errors`` holds every one (each with its line and column),
    and the caret display shows each in turn.
    """

    def __init__(self, errors: list[MauiConfigError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.message, source=first.source, line=first.line,
                         column=first.column, code=first.code, key=first.key, text=first.text)

    def __str__(self) -> str:
        return "\n".join(str(error) for error in self.errors)

    def pretty(self) -> str:
        shown = "\n".join(error.pretty() for error in self.errors)
        return f"{shown}\n{len(self.errors)} errors in {self.source}"

    def to_dict(self) -> dict[str, Any]:
        return {**self.errors[0].to_dict(), "errors": [e.to_dict() for e in self.errors]}


@dataclass(frozen=True)
class MauiConfigWarning:
    """Something in a maui.cfg was ignored or looks wrong, but reading went on."""

    source: str
    line: int
    column: int
    message: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}:{self.column}: warning: {self.message}"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "line": self.line, "column": self.column,
                "message": self.message}


@dataclass(frozen=True)
class Setting:
    """A parameter value as set in the file, with where it was set."""

    value: Any
    line: int
    column: int


def jsonable(value: Any) -> Any:
    """A JSON-ready copy of a typed value (tuples become lists, targets dicts)."""
    if isinstance(value, FairshareTarget):
        return value.to_dict()
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    return value


def _copy(value: Any) -> Any:
    # Defaults and stored values are shared; hand out copies of the mutable ones.
    return dict(value) if isinstance(value, dict) else value


def _kind_param(kind: str) -> str:
    upper = kind.upper()
    name = upper if upper.endswith("CFG") else f"{upper}CFG"
    if name[:-3] not in CREDENTIAL_KINDS:
        raise NotFoundError(f"unknown credential kind {kind!r}; "
                            f"expected one of {', '.join(CREDENTIAL_KINDS)}")
    return name


@dataclass
class MauiConfig:
    """A parsed maui.cfg.  Build it with :func:`grid_tasks.maui.cfg.parse_maui_config`.

    Plain parameters are read with :meth:`get` (Maui's default when unset); the
    ``NAME[object] KEY=VALUE`` lines are grouped by :meth:`credentials`,
    :attr:`standing_reservations`, :attr:`node_configs` and :attr:`resource_managers`.
    """

    source: str = "<string>"
    settings: dict[str, Setting] = field(default_factory=dict)
    indexed: dict[str, dict[str, Setting]] = field(default_factory=dict)
    objects: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    #: (PARAM, object, KEY) -> (line, column) of the KEY=VALUE that set it (last wins)
    positions: dict[tuple[str, str, str], tuple[int, int]] = field(default_factory=dict)
    warnings: list[MauiConfigWarning] = field(default_factory=list)

    # --- plain parameters ---------------------------------------------------------

    def get(self, name: str, index: str | None = None) -> Any:
        """The typed value of a parameter (any case, aliases accepted).

        With ``index``, the value of ``NAME[index]`` when set (per-partition forms),
        else the global one.  Unset parameters give Maui's documented default.
        """
        key = self._known(name)
        if index is not None and index in self.indexed.get(key, {}):
            return _copy(self.indexed[key][index].value)
        if key in self.settings:
            return _copy(self.settings[key].value)
        return _copy(PARAMETERS[key].default)

    def is_set(self, name: str, index: str | None = None) -> bool:
        """Whether the file sets the parameter (``NAME[index]`` when index is given)."""
        key = self._known(name)
        if index is not None:
            return index in self.indexed.get(key, {})
        return key in self.settings

    def where(self, name: str) -> tuple[int, int] | None:
        """(line, column) of the value that set a parameter, or None when unset."""
        setting = self.settings.get(self._known(name))
        return None if setting is None else (setting.line, setting.column)

    def object_where(self, param: str, name: str, key: str) -> tuple[int, int] | None:
        """(line, column) of ``PARAM[name] KEY=...`` (e.g. USERCFG, DEFAULT, MAXPROC), or
        None when the file does not set it; reports about a credential's limit cite it."""
        return self.positions.get((canonical(param), name, key.upper()))

    def effective(self) -> dict[str, Any]:
        """Every known parameter with its effective value (set or default)."""
        return {name: self.get(name) for name in PARAMETERS}

    def non_default(self) -> dict[str, Any]:
        """Parameters whose effective value differs from Maui's default."""
        return {name: setting.value for name, setting in self.settings.items()
                if setting.value != PARAMETERS[name].default}

    @property
    def modules(self) -> tuple[str, ...]:
        """grid_tasks extension: names of the pluggable scheduler modules, in order."""
        return tuple(self.get("MODULES"))

    @staticmethod
    def _known(name: str) -> str:
        key = canonical(name)
        if key not in PARAMETERS:
            raise NotFoundError(f"unknown Maui parameter {name!r}")
        return key

    # --- NAME[object] KEY=VALUE lines ----------------------------------------------

    def _objects_of(self, param: str) -> dict[str, dict[str, Any]]:
        return {name: {k: _copy(v) for k, v in keys.items()}
                for name, keys in self.objects.get(param, {}).items()}

    def credentials(self, kind: str) -> dict[str, dict[str, Any]]:
        """Every ``<KIND>CFG[name]`` as {name: {key: typed value}}; kind is USER, GROUP,
        ACCOUNT, CLASS or QOS (any case).  ``DEFAULT`` holds the kind's defaults."""
        return self._objects_of(_kind_param(kind))

    def credential(self, kind: str, name: str) -> dict[str, Any]:
        """The keys that apply to one credential: its ``DEFAULT`` entry, then its own."""
        table = self.objects.get(_kind_param(kind), {})
        merged = {k: _copy(v) for k, v in table.get("DEFAULT", {}).items()}
        merged.update({k: _copy(v) for k, v in table.get(name, {}).items()})
        return merged

    @property
    def standing_reservations(self) -> dict[str, dict[str, Any]]:
        """``SRCFG[name]`` entries, Maui's SR defaults filled in for unset keys."""
        return {name: {**{k: _copy(v) for k, v in SRCFG_DEFAULTS.items()}, **keys}
                for name, keys in self._objects_of("SRCFG").items()}

    @property
    def node_configs(self) -> dict[str, dict[str, Any]]:
        """``NODECFG[name]`` entries as set (``DEFAULT`` applies to every node)."""
        return self._objects_of("NODECFG")

    def node_config(self, node: str) -> dict[str, Any]:
        """The keys that apply to one node: ``NODECFG[DEFAULT]``, then its own."""
        table = self.objects.get("NODECFG", {})
        return {**{k: _copy(v) for k, v in table.get("DEFAULT", {}).items()},
                **{k: _copy(v) for k, v in table.get(node, {}).items()}}

    @property
    def resource_managers(self) -> dict[str, dict[str, Any]]:
        """``RMCFG[name]`` entries as set."""
        return self._objects_of("RMCFG")

    # --- export ---------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready description: set parameters, effective values, objects, warnings."""
        return {
            "source": self.source,
            "parameters": {n: jsonable(s.value) for n, s in self.settings.items()},
            "indexed": {n: {i: jsonable(s.value) for i, s in by.items()}
                        for n, by in self.indexed.items()},
            "effective": jsonable(self.effective()),
            "credentials": {kind: jsonable(self.credentials(kind))
                            for kind in CREDENTIAL_KINDS},
            "standing_reservations": jsonable(self.standing_reservations),
            "node_configs": jsonable(self.node_configs),
            "resource_managers": jsonable(self.resource_managers),
            "modules": list(self.modules),
            "warnings": [w.to_dict() for w in self.warnings],
        }


__all__ = ["MauiConfig", "MauiConfigError", "MauiConfigErrors", "MauiConfigWarning", "Setting",
           "jsonable"]
