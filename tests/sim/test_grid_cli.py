"""``grid-tasks simulate --grid``: JSON equals the library, table, plots, typed errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.sim.grid import GridOptions, load_workload
from grid_tasks.sim.grid_policies import run_policy
from grid_tasks.sim.replay import ClusterSpec
from tests.sim.conftest import trace_path
from tests.sim.test_cli import synthetic


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    folder = tmp_path_factory.mktemp("grid")
    return [str(synthetic(folder / "a.swf", n=200, procs=16, seed=1)),
            str(synthetic(folder / "b.swf", n=200, procs=32, seed=2))]


def test_json_has_every_policy_and_matches_the_library(pair: list[str]) -> None:
    code, out, _ = invoke("--grid", *pair, "--grid-share", "0.3", "--seed", "4", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert list(data["policies"]) == ["slice", "least-loaded", "reserve"]
    assert data["clusters"] == {"a": 16, "b": 32}
    assert data["grid"]["grid_share"] == 0.3 and data["grid"]["seed"] == 4
    options = GridOptions(grid_share=0.3, seed=4)
    workload = load_workload([ClusterSpec(p) for p in pair], options)
    assert data["workload"]["grid_jobs"] == len(workload.grid) > 0
    for name, got in data["policies"].items():
        direct = run_policy(workload, name).metrics()
        assert got["utilization"] == pytest.approx(direct["utilization"])
        assert got["local"] == direct["local"] and got["grid"] == direct["grid"]
        assert got["sim_wall_s"] > 0
    assert "slice_utilization" in data["policies"]["slice"]


def test_one_policy_table_and_plots(pair: list[str], tmp_path: Path) -> None:
    code, out, _ = invoke("--grid", *pair, "--grid-policy", "reserve", "--grid-share", "0.2",
                          "--coalloc-share", "0.5", "--plots", str(tmp_path))
    assert code == 0, out
    assert "reserve" in out and "least-loaded" not in out
    assert "grid mean wait" in out and "coallocated" in out
    for name in ("grid_utilization.png", "grid_wait_cdf.png"):
        assert (tmp_path / name).stat().st_size > 5000


def test_shared_traces_first_n(tmp_path: Path) -> None:
    traces = [str(trace_path("KTH-SP2")), str(trace_path("SDSC-SP2"))]
    code, out, _ = invoke("--grid", *traces, "--first", "200", "--json", "--grid-policy", "all")
    assert code == 0, out
    data = json.loads(out)
    assert sum(data["workload"]["local_jobs"].values()) + data["workload"]["grid_jobs"] <= 400
    for metrics in data["policies"].values():
        assert metrics["unfinished"] == 0 and metrics["grid"]["coalloc_max_skew_s"] == 0


@pytest.mark.parametrize("args, message", [
    (["--grid-share", "0.2"], "add --grid"),
    (["--grid", "--compare", "easy,fcfs"], "--compare cannot be combined with --grid"),
    (["--grid", "--slice", "1.5"], "--slice must be strictly between 0 and 1"),
    (["--grid", "--coalloc-share", "-1"], "--coalloc-share must be between 0 and 1"),
    (["--grid", "--grid-share", "0"], "no job was selected for the grid"),
])
def test_bad_grid_arguments_are_clear_errors(pair: list[str], args: list[str], message: str) -> None:
    code, out, err = invoke(*pair, *args)
    assert code == 1
    assert "Traceback" not in out + err
    assert message in out + err
    code, out, _ = invoke(*pair, *args, "--json")
    assert code == 1 and message in json.loads(out)["error"]["message"]
