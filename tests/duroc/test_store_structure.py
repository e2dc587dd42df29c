"""Job structure in the coordination store: create, add, delete, versions, freezing."""

from __future__ import annotations

import pytest

from grid_tasks.duroc.store import CoordinationStore
from grid_tasks.duroc.store_errors import (
    JobExistsError, JobNotFoundError, RuntimeMisuseError, StructureFrozenError,
    SubjobNotFoundError,
)
from grid_tasks.duroc.store_models import BarrierState, SubjobSpec
from grid_tasks.errors import GridTasksError, NotFoundError
from grid_tasks.states import SubjobCommsType, SubjobStartType


def specs() -> list[SubjobSpec]:
    return [SubjobSpec("left", 2),
            SubjobSpec("right", 3, SubjobStartType.LOOSE_BARRIER, SubjobCommsType.INDEPENDENT)]


def test_create_assigns_addresses_in_order(store: CoordinationStore) -> None:
    structure = store.create_job("j1", specs())
    assert [(s.address, s.label, s.size) for s in structure.subjobs] == [
        (0, "left", 2), (1, "right", 3)]
    assert structure.subjobs[1].start_type is SubjobStartType.LOOSE_BARRIER
    assert structure.subjobs[1].comms_type is SubjobCommsType.INDEPENDENT
    assert structure.version == 0
    assert structure.by_label("right").address == 1
    assert store.snapshot("j1").state is BarrierState.OPEN


def test_create_twice_is_refused(store: CoordinationStore) -> None:
    store.create_job("j1", specs())
    with pytest.raises(JobExistsError):
        store.create_job("j1", specs())


def test_duplicate_labels_refused_and_nothing_created(store: CoordinationStore) -> None:
    with pytest.raises(RuntimeMisuseError, match="duplicate subjob label 'a'"):
        store.create_job("j1", [SubjobSpec("a", 1), SubjobSpec("a", 2)])
    with pytest.raises(JobNotFoundError):
        store.snapshot("j1")


def test_add_and_delete_bump_version_and_never_reuse_addresses(
        store: CoordinationStore) -> None:
    store.create_job("j1", specs())
    added = store.add_subjob("j1", SubjobSpec("extra", 1))
    assert added.address == 2
    after_delete = store.delete_subjob("j1", "left")
    assert [s.label for s in after_delete.subjobs] == ["right", "extra"]
    again = store.add_subjob("j1", SubjobSpec("left", 4))
    assert again.address == 3  # a deleted address is never given again
    assert store.structure("j1").version == 3
    with pytest.raises(RuntimeMisuseError, match="duplicate"):
        store.add_subjob("j1", SubjobSpec("extra", 1))


def test_delete_unknown_label(store: CoordinationStore) -> None:
    store.create_job("j1", specs())
    with pytest.raises(SubjobNotFoundError, match="'nope'") as info:
        store.delete_subjob("j1", "nope")
    assert isinstance(info.value, NotFoundError)
    assert "script:" not in str(info.value)  # Redis' script suffix is stripped


def test_structure_frozen_after_release_and_abort(store: CoordinationStore) -> None:
    store.create_job("j1", [SubjobSpec("a", 1)])
    store.release("j1", require_complete=False)
    with pytest.raises(StructureFrozenError, match="released"):
        store.add_subjob("j1", SubjobSpec("b", 1))
    with pytest.raises(StructureFrozenError):
        store.delete_subjob("j1", "a")
    store.create_job("j2", [SubjobSpec("a", 1)])
    store.abort("j2", "user cancel")
    with pytest.raises(StructureFrozenError, match="aborted"):
        store.add_subjob("j2", SubjobSpec("b", 1))


@pytest.mark.parametrize("bad", ["", "a*", "a:b", "a b", "x" * 129, "j[1]", "?"])
def test_unsafe_job_ids_refused(store: CoordinationStore, bad: str) -> None:
    with pytest.raises(RuntimeMisuseError, match="invalid coallocated job id"):
        store.create_job(bad, specs())


@pytest.mark.parametrize("label,size", [("", 1), ("a", 0), ("a", -1), ("a", True), ("a", 1.5)])
def test_bad_subjob_specs(label: str, size: object) -> None:
    with pytest.raises(GridTasksError):
        SubjobSpec(label, size)  # type: ignore[arg-type]


def test_unknown_job_everywhere(store: CoordinationStore) -> None:
    for call in (lambda: store.snapshot("ghost"), lambda: store.release("ghost"),
                 lambda: store.abort("ghost", "x"), lambda: store.enter("ghost", 0, 0),
                 lambda: store.add_subjob("ghost", SubjobSpec("a", 1))):
        with pytest.raises(JobNotFoundError, match="'ghost'"):
            call()
