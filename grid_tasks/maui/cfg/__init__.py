"""The maui.cfg reader: Maui's configuration language, typed by a parameter schema.

>>> cfg = parse_maui_config("RMPOLLINTERVAL 00:00:30\\nUSERCFG[ann] MAXJOB=4,8\\n")
>>> cfg.get("rmpollinterval"), cfg.credentials("USER")["ann"]["MAXJOB"]
(30, (4, 8))

Pure code (no Celery, Redis, SQL, clock).  :mod:`.params` is the schema (names, types,
Maui's defaults); :mod:`.types` the value types; ``maui_cfg.lark`` the grammar.
"""

from grid_tasks.maui.cfg.model import (
    MauiConfig,
    MauiConfigError,
    MauiConfigErrors,
    MauiConfigWarning,
)
from grid_tasks.maui.cfg.params import (
    ALIASES,
    CREDENTIAL_KINDS,
    OBJECT_PARAMETERS,
    PARAMETERS,
    Param,
    lookup,
)
from grid_tasks.maui.cfg.parser import load_maui_config, parse_maui_config
from grid_tasks.maui.cfg.types import INFINITY, FairshareTarget

__all__ = [
    "ALIASES",
    "CREDENTIAL_KINDS",
    "INFINITY",
    "OBJECT_PARAMETERS",
    "PARAMETERS",
    "FairshareTarget",
    "MauiConfig",
    "MauiConfigError",
    "MauiConfigErrors",
    "MauiConfigWarning",
    "Param",
    "load_maui_config",
    "lookup",
    "parse_maui_config",
]
