"""Refusals on the wire: each comes back as the typed error it stands for, from a fixed
list; a name outside it never selects code (a plain GridTasksError instead)."""

from __future__ import annotations

import pytest

from grid_tasks.duroc.errors import CoallocFinishedError, CoallocRequestError
from grid_tasks.duroc.store_errors import BarrierNotReadyError, StructureFrozenError
from grid_tasks.errors import GridTasksError
from grid_tasks.gram.door import RemoteError, answer, error_from_wire
from grid_tasks.security.errors import Unauthorized


@pytest.mark.parametrize("error", [
    CoallocRequestError("duplicate subjob label 'a' in the multi-request"),
    CoallocFinishedError("coallocated job 3 has ended already"),
    StructureFrozenError("structure frozen", job="coalloc-3"),
    BarrierNotReadyError("subjob 1 not in", job="coalloc-3"),
])
def test_duroc_refusals_come_back_typed(error: GridTasksError) -> None:
    reply = answer(lambda: (_ for _ in ()).throw(error))
    rebuilt = error_from_wire(reply["error"])
    assert type(rebuilt) is type(error) and str(rebuilt) == str(error)


def test_an_owner_refusal_keeps_the_identity() -> None:
    refused = Unauthorized("coallocated job 3 belongs to 'a', not to 'm'", identity="m")
    rebuilt = error_from_wire(answer(lambda: (_ for _ in ()).throw(refused))["error"])
    assert isinstance(rebuilt, Unauthorized) and rebuilt.identity == "m"


def test_an_unknown_type_name_selects_no_code() -> None:
    rebuilt = error_from_wire({"type": "os.system", "message": "rm -rf /"})
    assert type(rebuilt) is RemoteError and rebuilt.type_name == "os.system"
    assert str(rebuilt) == "rm -rf /"  # its message, nothing run or imported by name
