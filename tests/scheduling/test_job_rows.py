"""The reads of jobs holding nodes use the index's ranges on SQLite: with a deep queue a
filter over every row of the RM was most of an unchanged iteration's SQL."""

from __future__ import annotations

import pytest
from sqlalchemy import insert

from grid_tasks import db
from grid_tasks.db.models import ResourceManager
from grid_tasks.db.testing import temporary_database
from grid_tasks.scheduling import reconcile, recovery, state


@pytest.mark.parametrize("stmt", [state._HOLDING, reconcile._OPEN, recovery._DUE],  # noqa: SLF001
                         ids=["live loader", "reconcile", "recovery"])
def test_jobs_holding_nodes_are_read_by_index_ranges(stmt):
    with temporary_database(None, prefix="gt_jobrows") as url:
        engine = db.get_engine(url)
        with engine.begin() as conn:
            conn.execute(insert(ResourceManager.__table__), [{"name": "rmA", "attributes": {}}])
            compiled = stmt.compile(dialect=conn.dialect)
            params = compiled.construct_params({"rm": "rmA", "cutoff": None})
            raw = conn.connection.dbapi_connection.cursor()
            args = [params[name] for name in compiled.positiontup]
            plan = " ".join(str(r[-1]) for r in raw.execute(f"EXPLAIN QUERY PLAN {compiled}", args))
        db.dispose_engines(url)
    assert "MULTI-INDEX OR" in plan, plan
    assert "ix_jobs_rm_state_maui (rm=? AND state=?)" in plan, plan
