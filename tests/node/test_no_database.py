"""A node daemon holds no database credentials: it reports to its RM's gatekeeper.

Real processes: a ``grid-tasks worker --scheduler --gatekeepers`` (the gatekeeper and
the iteration) and a ``grid-tasks worker --rm rmA --node node1`` started with no
``GRID_TASKS_DATABASE_URL`` at all and a state directory of its own, so that a
fallback to the default SQLite file would show as a file created there.
"""

from __future__ import annotations


from grid_tasks.states import JobState
from tests.waiting import until


def _sessions(settings):
    from grid_tasks import db

    return db.session_factory(db.get_engine(settings.database_url))



def test_a_node_without_a_database_registers_and_runs_a_job_to_done(
        settings, gatekeeper_worker, node_worker, tmp_path):
    from grid_tasks import db
    from grid_tasks.client import Grid
    from grid_tasks.embedded.stack import prepare_database
    from grid_tasks.topology import load_topology

    assert prepare_database(settings, load_topology(settings.topology_file))
    gatekeeper_worker("--scheduler", "--gatekeepers")
    own_state = tmp_path / "node-state"
    own_state.mkdir()
    child = node_worker("rmA", "node1", GRID_TASKS_STATE_DIR=str(own_state))
    with open(f"/proc/{child.pid}/environ", "rb") as f:
        assert b"GRID_TASKS_DATABASE_URL" not in f.read()
    sessions = _sessions(settings)

    def registered():
        with db.session_scope(sessions) as session:
            return db.get_node(session, "rmA", "node1").registered_at is not None

    until(registered, 30, "the gatekeeper to record node1's registration")
    with Grid(settings) as grid:
        job = grid.submit("&(executable=/bin/sh)(arguments=-c 'sleep 0.5')(count=1)",
                          rm="rmA").id

        def ended():
            with db.session_scope(sessions) as session:
                row = db.repository.get_job(session, job)
                return row.state.terminal and (row.state, row.exit_code,
                                               [h.to_state for h in row.history],
                                               dict(row.nodes_allocated or {}))

        state, code, history, nodes = until(ended, 60, f"job {job} to end")
    assert (state, code) == (JobState.DONE, 0)
    assert history == [JobState.PENDING, JobState.ACTIVE, JobState.DONE]
    assert nodes == {"node1": 1}
    assert not list(own_state.glob("*.db*")), "the node daemon opened a database of its own"
    db.dispose_engines()
