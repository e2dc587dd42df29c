"""showstats --plot: the format follows the extension, colours follow the series."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from click.testing import CliRunner
from matplotlib.colors import to_hex

from grid_tasks.cli import main
from grid_tasks.ops import OpsError
from grid_tasks.ops.render_stats import TOTAL_COLOUR, history_figure, plot_history
from grid_tasks.ops.stats import CredentialStats
from grid_tasks.ops.stats_history import History, Period

T0 = datetime(2026, 1, 5, tzinfo=timezone.utc)


def _history() -> History:
    periods = []
    for day in range(3):
        start = T0 + timedelta(days=day)
        rows = [CredentialStats("rmA", proc_seconds=3600.0 * (day + 1)),
                CredentialStats("rmB", proc_seconds=1800.0)]
        periods.append(Period(start, start + timedelta(days=1), CredentialStats(None),
                              rows, {None: 40.0, "rmA": 50.0 + day, "rmB": 20.0}))
    return History("day", None, "rm", T0, T0 + timedelta(days=3), {"rmA": 8, "rmB": 4},
                   periods)


def test_each_series_keeps_its_colour_in_both_panels() -> None:
    fig = history_figure(_history())
    top, bottom = fig.axes[:2]
    bars = {c.get_label(): to_hex(c.patches[0].get_facecolor()) for c in top.containers}
    lines = {ln.get_label(): to_hex(ln.get_color()) for ln in bottom.get_lines()}
    assert set(bars) == {"rmA", "rmB"} and set(lines) == {"all", "rmA", "rmB"}
    assert bars["rmA"] == lines["rmA"] and bars["rmB"] == lines["rmB"]
    assert bars["rmA"] != bars["rmB"] and lines["all"] == TOTAL_COLOUR


def test_legends_sit_outside_the_axes() -> None:
    fig = history_figure(_history())
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes[:2]:
        legend = ax.get_legend().get_window_extent(renderer)
        assert legend.x0 >= ax.get_window_extent(renderer).x1  # right of the plot area


@pytest.mark.parametrize("name, magic", [("u.png", b"\x89PNG"), ("u.svg", b"<?xml"),
                                         ("u.PDF", b"%PDF")])
def test_the_extension_chooses_the_format(tmp_path: Path, name: str, magic: bytes) -> None:
    path = plot_history(_history(), tmp_path / name)
    assert path.read_bytes().startswith(magic)


def test_an_unsupported_extension_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(OpsError, match=r"extension \.txt.*one of .*png.*svg"):
        plot_history(_history(), tmp_path / "x.txt")
    assert not (tmp_path / "x.txt").exists()


def test_showstats_refuses_a_txt_plot_before_opening_the_grid(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["showstats", "--plot", str(tmp_path / "x.txt")])
    assert result.exit_code == 1
    assert "extension .txt" in result.output and "png" in result.output
    assert not (tmp_path / "x.txt").exists()
