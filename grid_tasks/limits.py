"""Bounds on the work small input may cause, shared by the pure core and the settings.

A module of constants with no imports: :mod:`grid_tasks.settings` reads it without
loading the RSL package (and its parsers) into every worker.
"""

from __future__ import annotations

#: Bytes all ``rsl_substitution`` values and ``$(NAME)`` references of one RSL request
#: may produce together (``GRID_TASKS_RSL_MAX_SUBSTITUTION``): 1 MiB.
DEFAULT_MAX_SUBSTITUTION = 1 << 20
