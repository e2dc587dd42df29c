"""``grid-tasks simulate``: JSON, comparisons, multi-cluster, outputs and typed errors."""

from __future__ import annotations

import csv
import json
import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from grid_tasks.cli import main
from grid_tasks.maui import pool_compiled, pool_site
from grid_tasks.sim.replay import ClusterSpec, Replay
from tests.sim.conftest import TRACES, swf_line, trace_path, write_swf


def synthetic(path: Path, n: int = 300, procs: int = 16, seed: int = 1,
              header: bool = True) -> Path:
    """A busy little machine: random sizes, runtimes and (over)estimates."""
    rng = random.Random(seed)
    lines, t = [], 0
    for i in range(1, n + 1):
        t += rng.randint(0, 1200)
        run = rng.randint(1, 3000)
        lines.append(swf_line(i, t, run, rng.randint(1, procs // 2), req_time=run * rng.choice([1, 2, 5]),
                              user=rng.randint(1, 5)))
    return write_swf(path, lines, header=[f"MaxProcs: {procs}"] if header else None)


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["simulate", *args])
    return result.exit_code, result.stdout, result.stderr


def test_json_headline_matches_the_library(tmp_path: Path) -> None:
    trace = synthetic(tmp_path / "t.swf")
    code, out, _ = invoke(str(trace), "--json", "--policy", "conservative")
    assert code == 0
    data = json.loads(out)
    for key in ("jobs_measured", "mean_wait_s", "mean_bsld", "utilization", "makespan_s",
                "sim_wall_s"):
        assert key in data
    direct = Replay([ClusterSpec(trace)], policy="conservative").run().summary
    assert direct is not None
    assert data["jobs_measured"] == direct.jobs_measured == 300
    assert data["mean_wait_s"] == pytest.approx(direct.mean_wait_s)
    assert data["policy"] == "conservative" and data["sim_wall_s"] > 0
    assert data["conservative_core"] == pool_compiled.CORE in ("compiled", "pure")
    assert data["site_core"] == pool_site.CORE in ("compiled", "pure")


def test_pyss_first_n_on_a_shared_trace(tmp_path: Path) -> None:
    trace = trace_path("SDSC-SP2")
    code, out, _ = invoke(str(trace), "--json", "--conventions", "pyss", "--first", "2000")
    assert code == 0
    data = json.loads(out)
    direct = Replay([ClusterSpec(trace, TRACES["SDSC-SP2"][1])], conventions="pyss",
                    first=2000).run()
    assert data["clusters"]["SDSC-SP2-1998-4.2-cln"]["job_lines"] == 2000
    assert data["mean_bsld"] == pytest.approx(direct.summary.mean_bsld)  # type: ignore[union-attr]


def test_compare_policies_side_by_side(tmp_path: Path) -> None:
    trace = synthetic(tmp_path / "t.swf")
    code, out, _ = invoke(str(trace), "--compare", "easy,fcfs", "--json")
    assert code == 0
    data = json.loads(out)
    assert data["compare"] == ["easy", "fcfs"]
    easy, fcfs = data["policies"]["easy"], data["policies"]["fcfs"]
    assert easy["jobs_measured"] == fcfs["jobs_measured"] == 300
    assert easy["mean_wait_s"] != fcfs["mean_wait_s"]  # backfilling changed the schedule
    code, table, _ = invoke(str(trace), "--compare", "easy,fcfs", "--no-groups")
    assert code == 0 and "easy" in table and "fcfs" in table and "mean bounded" in table


def test_multi_cluster_replay_on_one_clock(tmp_path: Path) -> None:
    a = synthetic(tmp_path / "a.swf", n=120, procs=16, seed=2)
    b = synthetic(tmp_path / "b.swf", n=80, procs=8, seed=3, header=False)
    code, out, _ = invoke("--cluster", str(a), "--cluster", f"{b}:8", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert set(data["clusters"]) == {"a", "b"}
    assert data["clusters"]["a"]["procs"] == 16 and data["clusters"]["b"]["procs"] == 8
    assert data["jobs_measured"] == 200
    assert data["clusters"]["a"]["jobs_measured"] == 120


def test_per_job_output_and_plots(tmp_path: Path) -> None:
    trace = synthetic(tmp_path / "t.swf", n=150)
    jobs_out, plots = tmp_path / "jobs.csv", tmp_path / "plots"
    code, out, err = invoke(str(trace), "--jobs-out", str(jobs_out), "--plots", str(plots),
                            "--gantt", "0:2h")
    assert code == 0, err
    rows = list(csv.DictReader(jobs_out.open()))
    assert len(rows) == 150 and all(float(r["start"]) >= float(r["submit"]) for r in rows)
    pngs = sorted(p.name for p in plots.glob("*.png"))
    assert pngs == ["gantt-easy.png", "utilization.png", "wait_cdf.png"]
    assert all((plots / p).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert "wrote" in out and "By job size" in out


def test_bad_line_is_reported_with_position(tmp_path: Path) -> None:
    bad = "2 9 -1 5 x -1 -1 -1 -1 -1 1 1 1 -1 1 -1 -1 -1"
    trace = write_swf(tmp_path / "bad.swf", [swf_line(1, 0, 5, 1), bad], header=["MaxProcs: 4"])
    code, _, err = invoke(str(trace))
    assert code == 1
    assert f"{trace}:3:" in err and "allocated_procs" in err and "^" in err
    assert "Traceback" not in err
    code, out, _ = invoke(str(trace), "--json")
    assert code == 1 and json.loads(out)["error"]["line"] == 3
    code, out, _ = invoke(str(trace), "--json", "--skip-bad")
    assert code == 0 and json.loads(out)["clusters"]["bad"]["bad_lines"] == 1


@pytest.mark.parametrize(("args", "message"), [
    (["--gantt", "5h"], "expected START:END"),
    (["--gantt", "2h:1h"], "END must be after START"),
    (["--compare", "easy,lottery"], "unknown policy 'lottery'"),
    (["--compare", "easy", "--config", "x.cfg"], "list the maui.cfg in --compare"),
])
def test_bad_options_are_typed_errors(tmp_path: Path, args: list[str], message: str) -> None:
    code, _, err = invoke(str(synthetic(tmp_path / "t.swf", n=5)), *args)
    assert code == 1 and message in err and "Traceback" not in err


def test_machine_size_is_required_without_header(tmp_path: Path) -> None:
    trace = synthetic(tmp_path / "t.swf", n=5, header=False)
    code, _, err = invoke(str(trace))
    assert code == 1 and "--procs" in err
    code, out, _ = invoke(str(trace), "--procs", "16", "--json")
    assert code == 0 and json.loads(out)["clusters"]["t"]["procs"] == 16


def test_trace_without_usable_jobs_is_an_error(tmp_path: Path) -> None:
    trace = write_swf(tmp_path / "t.swf", [swf_line(1, 0, 0, 4)], header=["MaxProcs: 4"])
    code, _, err = invoke(str(trace))  # the only job never ran: the default drops it
    assert code == 1 and "no measured job" in err and "1 dropped" in err


def test_missing_trace_and_no_trace() -> None:
    code, _, err = invoke("/nonexistent/trace.swf")
    assert code == 1 and "cannot open trace" in err
    code, _, err = invoke()
    assert code == 1 and "give a TRACE" in err


def test_help_documents_the_options() -> None:
    code, out, _ = invoke("--help")
    assert code == 0
    for option in ("--policy", "--config", "--compare", "--procs", "--first", "--conventions",
                   "--json", "--plots", "--jobs-out", "--skip-bad", "--cluster", "--gantt"):
        assert option in out


def test_config_file_policy_is_the_one_replayed(tmp_path: Path) -> None:
    """A maui.cfg spelling out EASY replays exactly like the preset; one spelling out
    FCFS (no backfill, no reservation) exactly like fcfs, which differs from EASY here."""
    trace = synthetic(tmp_path / "t.swf", n=200)
    easy_cfg = tmp_path / "easy.cfg"
    easy_cfg.write_text("BACKFILLPOLICY FIRSTFIT\nRESERVATIONPOLICY HIGHEST\nRESERVATIONDEPTH 1\n")
    fcfs_cfg = tmp_path / "fcfs.cfg"
    fcfs_cfg.write_text("BACKFILLPOLICY NONE\nRESERVATIONPOLICY HIGHEST\nRESERVATIONDEPTH 0\n")
    code, out, err = invoke(str(trace), "--json", "--compare", f"{easy_cfg},easy,{fcfs_cfg},fcfs")
    assert code == 0, err
    runs = json.loads(out)["policies"]
    assert list(runs) == ["easy.cfg", "easy", "fcfs.cfg", "fcfs"]
    assert runs["easy.cfg"]["mean_wait_s"] == runs["easy"]["mean_wait_s"]
    assert runs["fcfs.cfg"]["mean_wait_s"] == runs["fcfs"]["mean_wait_s"]
    assert runs["easy"]["mean_wait_s"] != runs["fcfs"]["mean_wait_s"]


def test_bad_config_file_is_reported_with_its_line(tmp_path: Path) -> None:
    trace = synthetic(tmp_path / "t.swf", n=5)
    cfg = tmp_path / "bad.cfg"
    cfg.write_text("RESERVATIONDEPTH 1\nBACKFILLPOLICY SOMETIMES\n")
    code, _, err = invoke(str(trace), "--config", str(cfg))
    assert code == 1 and f"{cfg}:2" in err and "Traceback" not in err


def throttled(tmp_path: Path) -> tuple[Path, Path]:
    """The synthetic trace and a maui.cfg whose MAXPROC=4 blocks every job over 4 processors."""
    trace = synthetic(tmp_path / "t.swf", n=120)
    cfg = tmp_path / "site.cfg"
    cfg.write_text("# a site\nRESERVATIONDEPTH 1\nUSERCFG[DEFAULT] MAXJOB=50 MAXPROC=4\n")
    return trace, cfg


def test_compare_says_which_jobs_it_measures_before_the_table(tmp_path: Path) -> None:
    trace, cfg = throttled(tmp_path)
    code, out, err = invoke(str(trace), "--compare", f"easy,{cfg}", "--no-groups")
    assert code == 0, err
    big = sum(1 for r in csv_rows(tmp_path, trace) if int(r["procs"]) > 4)
    assert big > 0
    flat = " ".join(re.sub(r"[│┃]", " ", out).split())  # wrapped cells joined back
    basis = flat.index("EVERY policy")
    assert basis < flat.index("jobs unfinished") < flat.index("jobs every policy finished:")
    assert f"easy 0, site.cfg {big}" in flat
    assert flat.index("every policy finished:") < flat.index("own finished jobs (not comparable)")
    # the warning: before the replay, once for the one limit, with its line
    assert err.count("can never start") == 1
    # rich folds a word longer than the terminal (a deep tmp path) anywhere: compare
    # without whitespace
    said = f"{cfg}:3: USERCFG[DEFAULT] MAXPROC=4 is below {big} job(s)"
    assert "".join(said.split()) in "".join(err.split())


def csv_rows(tmp_path: Path, trace: Path) -> list[dict[str, str]]:
    jobs = tmp_path / "all.csv"
    assert invoke(str(trace), "--jobs-out", str(jobs), "--json")[0] == 0
    return list(csv.DictReader(jobs.open()))


def test_compare_json_carries_the_common_set(tmp_path: Path) -> None:
    trace, cfg = throttled(tmp_path)
    code, out, _ = invoke(str(trace), "--compare", f"easy,fcfs,{cfg}", "--json")
    assert code == 0
    data = json.loads(out)
    left = data["unfinished"]["site.cfg"]
    assert left > 0 and data["unfinished"]["easy"] == data["unfinished"]["fcfs"] == 0
    assert data["common_jobs"] == 120 - left and data["same_jobs"] is False
    assert data["basis"] == "jobs every policy finished"
    for name, entry in data["policies"].items():
        assert entry["common_set"]["jobs_measured"] == data["common_jobs"]
        assert entry["metrics_on"] == "own finished jobs"
        assert entry["unfinished"] == data["unfinished"][name]
    own = data["policies"]["easy"]
    assert own["jobs_measured"] == 120 and own["common_set"]["mean_wait_s"] != own["mean_wait_s"]
    assert data["policies"]["site.cfg"]["common_set"]["mean_wait_s"] == \
        pytest.approx(data["policies"]["site.cfg"]["mean_wait_s"])  # its own set is the common one
    (finding,) = data["policies"]["site.cfg"]["never_start"]
    assert (finding["line"], finding["key"], finding["jobs"]) == (3, "MAXPROC", left)
    assert data["policies"]["easy"]["never_start"] == []


def test_comparison_plots_draw_the_common_set(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from grid_tasks.sim import plots

    trace, cfg = throttled(tmp_path)
    seen: dict[str, object] = {}
    original = plots.plot_wait_cdf

    def spy(runs, path, *, basis=""):  # type: ignore[no-untyped-def]
        seen["sizes"] = {label: len(jobs) for label, jobs in runs}
        seen["basis"] = basis
        return original(runs, path, basis=basis)

    monkeypatch.setattr(plots, "plot_wait_cdf", spy)
    code, out, err = invoke(str(trace), "--compare", f"easy,{cfg}", "--plots",
                            str(tmp_path / "p"), "--json")
    assert code == 0, err
    data = json.loads(out)
    common, left = data["common_jobs"], data["unfinished"]["site.cfg"]
    assert seen["sizes"] == {"easy": common, f"site.cfg ({left} unfinished)": common}
    assert seen["basis"] == f"the {common:,} jobs every policy finished"
    assert (tmp_path / "p" / "wait_cdf.png").exists()


def test_single_run_says_how_many_jobs_never_finished_above_its_table(tmp_path: Path) -> None:
    trace, cfg = throttled(tmp_path)
    code, out, _ = invoke(str(trace), "--config", str(cfg), "--no-groups")
    assert code == 0
    assert out.index("never finished") < out.index("jobs unfinished")


def test_not_an_swf_trace_is_said_before_asking_for_procs(tmp_path: Path) -> None:
    binary = tmp_path / "prog"
    binary.write_bytes(b"\x7fELF\x02\x01\x01" + bytes(range(256)) * 4)
    code, out, err = invoke(str(binary))
    assert code == 1 and "not an SWF trace: binary data" in err and "--procs" not in err
    assert "ELF" not in out + err  # no raw bytes on the terminal
    text = tmp_path / "notes.txt"
    text.write_text("hello world\n")
    code, _, err = invoke(str(text))
    assert code == 1 and "notes.txt:1:" in err and "not an SWF trace: line 1" in err
    assert "--procs" not in err
