"""The live broker sweeps confirmed tokens whose interval is over (nobody else does)."""

from __future__ import annotations

from grid_tasks.broker.live import Broker
from grid_tasks.legion.tokens import Claim, TokenStore


def test_sweep_releases_only_confirmed_tokens_that_ended(store: TokenStore):
    store.set_capacities({"rmA/n1": 4, "rmB/n2": 4})
    past = store.confirm(store.take([Claim("rmA/n1", 100.0, 200.0, 2),
                                     Claim("rmB/n2", 100.0, 200.0, 1)], "b1"), "old-job")
    future = store.confirm(store.take([Claim("rmA/n1", 300.0, 400.0, 2)], "b2"), "new-job")
    pending = store.take([Claim("rmB/n2", 50.0, 150.0, 1)], "b3")  # unconfirmed: its TTL
    broker = Broker(None, store, lambda: None)  # type: ignore[arg-type]
    assert broker.sweep(now=250.0) == 2
    left = {t.id for t in store.tokens()}
    assert left == {future[0].id, pending[0].id}
    assert {t.id for t in past} & left == set()
    assert broker.sweep(now=250.0) == 0
