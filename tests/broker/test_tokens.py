"""Reservation tokens against a real redis-server: all or nothing, TTL, confirm, restore."""

from __future__ import annotations

import os
import time
from dataclasses import fields

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grid_tasks.errors import GridTasksError
from grid_tasks.legion.tokens import (
    Claim, RefusalReason, Token, TokenInvalid, TokenRefused, TokenStore, _at, _IDS, _tokens,
    scan)

T0 = 1_000_000.0


def owned(store: TokenStore, owner: str) -> list:
    return [t for t in store.tokens() if t.owner == owner]


def test_take_is_all_or_nothing_and_names_the_refusing_resource(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 4, "a/n2": 2})
    store.take([Claim("a/n2", T0, T0 + 10, 2)], "first")
    with pytest.raises(TokenRefused) as info:
        store.take([Claim("a/n1", T0, T0 + 10, 4), Claim("a/n2", T0 + 5, T0 + 6, 1)], "second")
    assert info.value.reason is RefusalReason.FULL
    assert (info.value.subject, info.value.index) == ("a/n2", 2)
    assert (info.value.peak, info.value.capacity) == (2, 2)
    assert owned(store, "second") == []  # n1 was free but not taken
    assert len(store.take([Claim("a/n1", T0, T0 + 10, 4)], "third")) == 1


def test_intervals_are_half_open_and_claims_of_one_call_add_up(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 4})
    store.take([Claim("a/n1", T0, T0 + 10, 4)], "x")
    store.take([Claim("a/n1", T0 + 10, T0 + 20, 4)], "y")  # touches, does not overlap
    with pytest.raises(TokenRefused):
        store.take([Claim("a/n1", T0 + 20, T0 + 30, 3), Claim("a/n1", T0 + 25, T0 + 26, 2)],
                   "z")
    store.take([Claim("a/n1", T0 + 20, T0 + 30, 2), Claim("a/n1", T0 + 25, T0 + 26, 2)], "z")
    report = scan(store)
    assert report.ok and report.peaks == {"a/n1": 4}


def test_peak_not_sum_of_everything_overlapping(store: TokenStore) -> None:
    """Two claims that overlap the new one but not each other only count one at a time."""
    store.set_capacities({"r/n": 3})
    store.take([Claim("r/n", 0, 10, 2)], "a")
    store.take([Claim("r/n", 10, 20, 2)], "b")
    store.take([Claim("r/n", 5, 15, 1)], "c")
    with pytest.raises(TokenRefused):
        store.take([Claim("r/n", 9, 11, 1)], "d")


@pytest.mark.parametrize("claim, reason", [
    (Claim("nowhere/n9", T0, T0 + 1, 1), RefusalReason.UNKNOWN),
    (Claim("a/n1", T0, T0 + 1, 5), RefusalReason.FULL),
])
def test_unknown_resource_and_oversized_claims_are_refused(store: TokenStore, claim: Claim,
                                                          reason: RefusalReason) -> None:
    store.set_capacities({"a/n1": 4})
    with pytest.raises(TokenRefused) as info:
        store.take([claim], "o")
    assert info.value.reason is reason and claim.resource in str(info.value)


def test_bad_claims_and_names_are_typed_errors(store: TokenStore) -> None:
    with pytest.raises(ValueError):
        Claim("a/n1", 5, 5, 1)
    with pytest.raises(ValueError):
        Claim("a|b", 0, 1, 1)
    with pytest.raises(GridTasksError):
        store.take([Claim("a/n1", 0, 1, 1)], "bad|owner")
    with pytest.raises(GridTasksError):
        store.set_capacities({"a/n1": 0})


def test_unconfirmed_tokens_expire_and_start_nothing(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 1})
    [token] = store.take([Claim("a/n1", T0, T0 + 10, 1)], "o", ttl=0.15)
    assert store.check(token.id) == token
    time.sleep(0.25)
    launched = []
    with pytest.raises(TokenInvalid, match="expired"):
        store.start_object(token.id, launched.append)
    assert launched == []
    assert [t.id for t in store.tokens(include_expired=True)] == [token.id]
    store.take([Claim("a/n1", T0, T0 + 10, 1)], "p")  # free again; the take purged it
    assert [t.owner for t in store.tokens(include_expired=True)] == ["p"]
    with pytest.raises(TokenInvalid, match="released"):
        store.check(token.id)


def test_purge_removes_every_expired_token_and_its_timeline_entry(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 4, "a/n2": 4})
    store.take([Claim("a/n1", T0, T0 + 1, 1), Claim("a/n2", T0, T0 + 1, 1)], "o", ttl=0.05)
    store.take([Claim("a/n1", T0 + 1, T0 + 2, 1)], "o", ttl=0.05)
    time.sleep(0.1)
    assert store.purge() == 3
    assert store.tokens(include_expired=True) == []
    assert sum(store.timeline_sizes().values()) == 0


def test_confirmed_tokens_outlive_the_ttl_and_are_bound_to_the_job(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2, "b/n3": 2})
    tokens = store.take([Claim("a/n1", T0, T0 + 10, 2), Claim("b/n3", T0, T0 + 10, 1)],
                        "broker-1", ttl=0.15)
    hooked = []
    confirmed = store.confirm(tokens, "job-42", hook=hooked.append)
    assert hooked == [tokens]
    time.sleep(0.25)
    assert store.purge() == 0
    for token in confirmed:
        held = store.start_object(token.id, lambda t: t)
        assert held.confirmed and held.owner == "job-42" and held.size == 2
    assert scan(store).confirmed == 2


def test_confirm_is_all_or_nothing(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2})
    [short] = store.take([Claim("a/n1", T0, T0 + 1, 1)], "o", ttl=0.1)
    [long] = store.take([Claim("a/n1", T0, T0 + 1, 1)], "o", ttl=5)
    time.sleep(0.2)
    with pytest.raises(TokenRefused) as info:
        store.confirm([long, short], "job")
    assert info.value.reason is RefusalReason.EXPIRED and info.value.subject == short.id
    assert not store.check(long.id).confirmed


def test_failing_hook_confirms_nothing(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2})
    tokens = store.take([Claim("a/n1", T0, T0 + 1, 1)], "o")

    def refuse(_tokens: object) -> None:
        raise GridTasksError("SQL said no")

    with pytest.raises(GridTasksError, match="SQL said no"):
        store.confirm(tokens, "job", hook=refuse)
    assert not store.check(tokens[0].id).confirmed


def test_replace_keeps_releases_and_acquires_atomically(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2, "b/n3": 2})
    keep, move = store.take([Claim("a/n1", T0, T0 + 10, 1), Claim("b/n3", T0, T0 + 10, 2)],
                            "o", ttl=0.6)
    # b/n3 is full, but the token being released no longer counts against the new claim
    time.sleep(0.3)
    [moved] = store.replace([keep], [move], [Claim("b/n3", T0 + 5, T0 + 15, 2)], "o", ttl=0.6)
    time.sleep(0.4)  # past the first TTL: the kept token was refreshed
    assert store.check(keep.id).id == keep.id and store.check(moved.id)
    with pytest.raises(TokenInvalid):
        store.check(move.id)
    # refused acquisition: the token to release stays held, nothing new appears
    store.take([Claim("a/n1", T0 + 20, T0 + 30, 2)], "other")
    before = {t.id for t in store.tokens()}
    with pytest.raises(TokenRefused) as info:
        store.replace([keep], [moved], [Claim("a/n1", T0 + 25, T0 + 26, 1)], "o")
    assert info.value.subject == "a/n1"
    assert {t.id for t in store.tokens()} == before


def test_keeping_an_expired_token_is_refused(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2})
    [gone] = store.take([Claim("a/n1", T0, T0 + 1, 1)], "o", ttl=0.05)
    time.sleep(0.1)
    with pytest.raises(TokenRefused) as info:
        store.replace([gone], [], [Claim("a/n1", T0 + 2, T0 + 3, 1)], "o")
    assert info.value.reason in (RefusalReason.EXPIRED, RefusalReason.GONE)
    assert store.tokens() == []


def test_lost_state_refuses_until_restored_with_durable_claims(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2, "a/n2": 2})
    claims = [Claim("a/n1", T0, T0 + 10, 2), Claim("a/n2", T0, T0 + 10, 1)]
    durable = store.confirm(store.take(claims, "o"), "job-1")
    for key in store.client.scan_iter(match=f"{store.prefix}:*"):
        store.client.delete(key)  # what a Redis restart without persistence does
    with pytest.raises(TokenRefused) as info:
        store.take([Claim("a/n1", T0, T0 + 10, 1)], "o")
    assert info.value.reason is RefusalReason.UNKNOWN
    store.restore({"a/n1": 2, "a/n2": 2}, [("job-1", [t.id for t in durable], claims)])
    assert {t.id for t in store.tokens()} == {t.id for t in durable}
    with pytest.raises(TokenRefused):
        store.take([Claim("a/n1", T0 + 5, T0 + 6, 1)], "o")
    report = scan(store)
    assert report.ok and report.confirmed == 2


# --- model check: the script decides exactly like a plain capacity sweep ---------------

def _fits(held: list[Claim], new: list[Claim], caps: dict[str, int]) -> bool:
    for resource, cap in caps.items():
        mine = [c for c in held + new if c.resource == resource]
        for instant in {c.start for c in mine}:
            if sum(c.procs for c in mine if c.start <= instant < c.end) > cap:
                return False
    return True


_claim = st.builds(lambda r, s, d, p: Claim(r, float(s), float(s + d), p),
                   st.sampled_from(["m/x", "m/y"]), st.integers(0, 20), st.integers(1, 8),
                   st.integers(1, 3))


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(st.tuples(st.booleans(), st.lists(_claim, min_size=1, max_size=3)),
                    min_size=1, max_size=12))
def test_decisions_match_a_capacity_model(store: TokenStore, ops) -> None:
    caps = {"m/x": 3, "m/y": 2}
    for key in store.client.scan_iter(match=f"{store.prefix}:*"):
        store.client.delete(key)
    store.set_capacities(caps)
    held: list[list] = []
    for release_first, claims in ops:
        if release_first and held:
            store.release(held.pop(0))
        model = [t.claim for group in held for t in group]
        expected = _fits(model, claims, caps)
        try:
            held.append(store.take(claims, "m"))
            taken = True
        except TokenRefused:
            taken = False
        assert taken == expected, (model, claims)
    assert scan(store).ok


# --- the bounds that spare reads (issue 8): they must never hide anything -------------

def test_a_short_ttl_taken_after_long_ones_is_still_purged_lazily(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 4, "a/n2": 4})
    store.take([Claim("a/n1", T0, T0 + 10, 1)], "long", ttl=5)
    [short] = store.take([Claim("a/n2", T0, T0 + 10, 1)], "short", ttl=0.1)
    time.sleep(0.2)
    store.take([Claim("a/n1", T0 + 20, T0 + 30, 1)], "later")  # touches nothing of a/n2
    assert short.id not in {t.id for t in store.tokens(include_expired=True)}
    assert store.timeline_sizes().get("a/n2", 0) == 0


def test_claims_placed_before_the_horizon_still_count(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 2})
    store.take([Claim("a/n1", T0 + 100, T0 + 110, 2)], "late")  # the horizon is T0+110
    store.take([Claim("a/n1", T0, T0 + 10, 2)], "early")
    with pytest.raises(TokenRefused) as info:
        store.take([Claim("a/n1", T0 + 5, T0 + 6, 1)], "x")
    assert info.value.peak == 2
    store.take([Claim("a/n1", T0 + 110, T0 + 120, 2)], "touching")  # at the horizon: free
    with pytest.raises(TokenRefused):  # past the horizon, but a claim of the same call counts
        store.take([Claim("a/n1", T0 + 200, T0 + 210, 1), Claim("a/n1", T0 + 205, T0 + 206, 2)],
                   "y")
    with pytest.raises(TokenRefused):  # past the horizon of a timeline the call just extended
        store.take([Claim("a/n1", T0 + 300, T0 + 310, 2), Claim("a/n1", T0 + 305, T0 + 306, 1)],
                   "z")
    assert scan(store).ok


def test_released_and_expired_claims_free_their_slot_below_the_horizon(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 1})
    [gone] = store.take([Claim("a/n1", T0, T0 + 10, 1)], "o")
    [short] = store.take([Claim("a/n1", T0 + 10, T0 + 20, 1)], "o", ttl=0.05)
    store.take([Claim("a/n1", T0 + 50, T0 + 60, 1)], "o")
    store.release([gone])
    time.sleep(0.1)
    assert len(store.take([Claim("a/n1", T0, T0 + 20, 1)], "again")) == 1
    assert short.id not in {t.id for t in store.tokens(include_expired=True)}


def test_capacities_hide_the_bookkeeping_fields(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 3, "b/n3": 1})
    store.take([Claim("a/n1", T0, T0 + 10, 1), Claim("b/n3", T0, T0 + 5, 1)], "o")
    assert store.capacities() == {"a/n1": 3, "b/n3": 1}


def test_bad_prefix_and_ids_are_typed_errors(store: TokenStore) -> None:
    with pytest.raises(GridTasksError, match="prefix"):
        TokenStore(store.client, prefix="a|b")
    store.set_capacities({"a/n1": 1})
    with pytest.raises(GridTasksError, match="token id"):
        store.mirror([Claim("a/n1", T0, T0 + 1, 1)], "job", ["x|y"])
    assert store.tokens() == []


def test_ids_differ_in_a_forked_child(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 4})
    parent = store.take([Claim("a/n1", T0, T0 + 1, 1)], "parent")[0].id
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: one id, written back, then out without pytest's teardown
        try:
            os.write(write, store.take([Claim("a/n1", T0, T0 + 1, 1)], "child")[0].id.encode())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 100).decode()
    os.waitpid(pid, 0)
    os.close(read)
    stem_length = len(_IDS.stem)
    assert child and child[:stem_length] != parent[:stem_length]
    assert {t.id for t in store.tokens()} >= {parent, child}


# --- the one-index layout (issue 8): encodings the client and the scripts share -------

def test_fast_token_construction_fills_every_field() -> None:
    claims = [Claim("a/n1", 1, 2, 1), Claim("b/n2", 3.5, 4.25, 2)]
    made = _tokens(["x.0", "x.1"], claims, "own", 1234)
    assert made == [Token("x.0", "a/n1", 1.0, 2.0, 1, "own", "own", 2, 1234),
                    Token("x.1", "b/n2", 3.5, 4.25, 2, "own", "own", 2, 1234)]
    assert [list(t.__dict__) for t in made] == [[f.name for f in fields(Token)]] * 2


def test_index_positions_are_fixed_width_and_monotone() -> None:
    ends = [-5e12, -0.5, 0.0, 0.99, 1.0, 1.5e9, 9e12 - 1, 9e12, float("inf")]
    got = [_at(t) for t in ends]
    assert all(len(g) == 13 for g in got) and got == sorted(got)
    # times before 0 (and far beyond the year 200,000) share the end positions
    assert (got[0], got[2], got[4], got[5], got[-1]) == (
        "1000000000000", "1000000000000", "1000000000001", "1001500000000", "9999999999999")


def test_fractional_and_negative_times_are_found_below_the_horizon(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 1})
    store.take([Claim("a/n1", 500.0, 600.0, 1)], "late")  # the horizon is far after
    store.take([Claim("a/n1", -10.75, -0.25, 1), Claim("a/n1", 0.25, 0.5, 1)], "early")
    for claim in (Claim("a/n1", -0.5, -0.3, 1), Claim("a/n1", 0.4, 0.45, 1),
                  Claim("a/n1", -20, 0.3, 1)):
        with pytest.raises(TokenRefused):
            store.take([claim], "x")
    store.take([Claim("a/n1", -0.25, 0.25, 1), Claim("a/n1", 0.5, 500.0, 1)], "gaps")
    assert scan(store).ok and scan(store).peaks == {"a/n1": 1}


def test_a_reservation_of_many_claims_is_split_in_slices(store: TokenStore) -> None:
    store.set_capacities({f"m/n{i}": 1 for i in range(150)})
    claims = [Claim(f"m/n{i}", T0, T0 + 1, 1) for i in range(150)]  # 900 fields
    tokens = store.take(claims, "big")
    assert [t.resource for t in tokens] == [c.resource for c in claims]
    with pytest.raises(TokenRefused) as info:
        store.take([Claim("m/n0", T0 + 2, T0 + 3, 1)] + claims[1:], "again")
    assert info.value.subject == "m/n1"
    assert len(store.confirm(tokens, "job-big")) == 150 and scan(store).confirmed == 150


def test_purge_counts_tokens_and_leaves_no_expiry_hint(store: TokenStore) -> None:
    store.set_capacities({"a/n1": 4})
    confirmed = store.take([Claim("a/n1", T0, T0 + 1, 1)], "o", ttl=0.05)
    released = store.take([Claim("a/n1", T0, T0 + 1, 1)], "o", ttl=0.05)
    store.take([Claim("a/n1", T0, T0 + 1, 1), Claim("a/n1", T0 + 1, T0 + 2, 1)], "o",
               ttl=0.05)
    store.confirm(confirmed, "job")
    store.release(released)
    time.sleep(0.1)
    assert store.purge() == 2  # the two expired; not the confirmed or released one
    assert store.index_size() == 1 and store.timeline_sizes() == {"a/n1": 1}


def test_nul_in_names_is_refused(store: TokenStore) -> None:
    with pytest.raises(ValueError):
        Claim("a/n\0", 0, 1, 1)
    store.set_capacities({"a/n1": 1})
    with pytest.raises(GridTasksError, match="token id"):
        store.mirror([Claim("a/n1", T0, T0 + 1, 1)], "job", ["x\0y"])


def test_token_ids_are_letters_digits_and_dots_only() -> None:
    """An id beginning with "-" would read as an option to `grid-tasks tokens show`."""
    from grid_tasks.legion.tokens_model import _IdSource

    ids = _IdSource()
    seen = set()
    for _ in range(3000):
        ids.reset()
        seen.update(ids.take(2))
    assert all(i.replace(".", "").isalnum() for i in seen)
