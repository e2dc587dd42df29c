"""Rich renderings of ``showstats`` (current and ``--history``) and its ``--plot``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .stats import CredentialStats, Stats
from .stats_history import History
from .timefmt import OpsError, format_duration

_KEY_HEADER = {None: "scope", "rm": "RM"}


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def fairshare_text(stats: CredentialStats) -> str:
    """``rmA 12.5% (target 20+)``, one RM after the other; ``-`` without FSPOLICY."""
    parts = []
    for rm, fs in sorted(stats.fairshare.items()):
        target = f" (target {fs['target']})" if fs["target"] else ""
        parts.append(f"{rm} {fs['usage']:.1f}%{target}")
    return "; ".join(parts) or "-"


def stats_view(s: Stats) -> Table:
    """showstats: one line per credential or RM (or the whole system), then TOTAL."""
    key = _KEY_HEADER.get(s.by, s.by)
    title = f"statistics{' of ' + s.rm if s.rm else ''}" + (f" per {s.by}" if s.by else "")
    table = Table(title=title)
    with_fs = any(r.fairshare for r in s.rows)
    cols = [key, "Active Jobs", "Active Procs", "Jobs", "Done", "Failed", "ProcHours",
            "Share %", "Mean wait", "AvgXF", "MaxXF"] + (["FS usage (decayed)"] if with_fs else [])
    for col in cols:
        table.add_column(col, justify="left" if col in (key, "FS usage (decayed)") else "right")
    for row in (s.rows or []) + [s.total]:
        name = "TOTAL" if row is s.total else (row.key or "-")
        cells = [name, str(row.active_jobs), str(row.active_procs), str(row.jobs),
                 str(row.succeeded), str(row.failed), f"{row.proc_hours:.3f}",
                 f"{row.share:.1f}", format_duration(row.mean_wait), _f(row.mean_xfactor),
                 _f(row.max_xfactor)]
        table.add_row(*cells, *([fairshare_text(row) if row is not s.total else ""]
                                if with_fs else []))
    return table


def history_view(h: History) -> Group:
    """showstats --history: one table, a block of lines per period."""
    key = _KEY_HEADER.get(h.by, h.by)
    title = (f"statistics per {h.period}{' of ' + h.rm if h.rm else ''}"
             + (f" and {h.by}" if h.by else ""))
    table = Table(title=title)
    for col in ("Period", key, "Jobs", "Done", "Failed", "ProcHours", "Util %", "Mean wait",
                "AvgXF", "MaxXF"):
        table.add_column(col, justify="left" if col in ("Period", key) else "right")
    label = "%Y-%m" if h.period == "month" else "%Y-%m-%d"
    for p in h.periods:
        rows = [(r, p.utilization.get(r.key) if h.by == "rm" else None) for r in p.rows]
        for i, (row, util) in enumerate(rows + [(p.total, p.utilization.get(None))]):
            name = "TOTAL" if row is p.total else (row.key or "-")
            table.add_row(p.start.strftime(label) if i == 0 else "", name, str(row.jobs),
                          str(row.succeeded), str(row.failed), f"{row.proc_hours:.3f}",
                          _f(util), format_duration(row.mean_wait), _f(row.mean_xfactor),
                          _f(row.max_xfactor), end_section=row is p.total)
    capacity = ", ".join(f"{rm} {n}" for rm, n in sorted(h.capacity.items())) or "none"

    return Group(table, Text(f"processors configured: {capacity}"))


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display); an optional dependency."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=True)
        from matplotlib import pyplot as plt
    except ImportError as exc:  # an optional dependency: say what to install
        raise OpsError(f"--plot needs matplotlib ({exc}); pip install matplotlib") from None
    return plt


def plot_format(path: Path) -> str:
    """The image format FILE's extension asks for (png, svg, pdf...), checked before any
    work so that ``--plot x.txt`` is refused instead of writing a PNG into a text file."""
    _pyplot()
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    formats = FigureCanvasAgg.get_supported_filetypes()
    ext = path.suffix.lower().lstrip(".")
    if ext not in formats:
        got = f"extension .{ext}" if ext else "no extension"
        raise OpsError(f"--plot {path}: {got}; the file's extension chooses the image format, "
                       f"one of {', '.join(sorted(formats))}")
    return ext


def plot_history(h: History, path: Path) -> Path:
    """``--plot FILE``: processor-hours per period (stacked per key when grouped) and
    utilization (per RM with ``--by-rm``), in the format FILE's extension names."""
    fmt = plot_format(path)
    plt = _pyplot()
    fig = history_figure(h)
    try:
        fig.savefig(path, format=fmt, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def history_figure(h: History) -> Any:
    """The two panels of :func:`plot_history`; a series keeps its colour in both, and
    legends sit outside the axes so that they never cover a bar or a curve."""
    plt = _pyplot()
    labels = [p.start.strftime("%Y-%m" if h.period == "month" else "%m-%d") for p in h.periods]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(6.0, 0.6 * len(labels) + 4), 7),
                                      sharex=True)
    colours = _colours(h, plt.rcParams["axes.prop_cycle"].by_key()["color"])
    _bars(top, h, labels, colours)
    _utilization(bottom, h, labels, colours)
    fig.suptitle(f"grid_tasks statistics per {h.period}" + (f" ({h.rm})" if h.rm else ""))
    fig.tight_layout()
    return fig


#: The colour of the whole-grid series ("total" bars, "all" utilization).
TOTAL_COLOUR = "#444444"


def _colours(h: History, cycle: list[str]) -> dict[str, str]:
    """One colour per series name, the same in both panels."""
    names = sorted({str(r.key or "-") for p in h.periods for r in p.rows} | set(h.capacity))
    colours = {name: cycle[i % len(cycle)] for i, name in enumerate(names)}
    return {**colours, "total": TOTAL_COLOUR, "all": TOTAL_COLOUR}


def _bars(ax: Any, h: History, labels: list[str], colours: dict[str, str]) -> None:
    x = range(len(labels))
    keys = sorted({r.key for p in h.periods for r in p.rows}, key=lambda k: str(k))
    if not keys:
        ax.bar(x, [p.total.proc_hours for p in h.periods], label="total",
               color=colours["total"])
    bottom = [0.0] * len(labels)
    for key in keys:
        values = [next((r.proc_hours for r in p.rows if r.key == key), 0.0) for p in h.periods]
        name = str(key or "-")
        ax.bar(x, values, bottom=bottom, label=name, color=colours[name])
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.set_ylabel("processor-hours")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))


def _utilization(ax: Any, h: History, labels: list[str], colours: dict[str, str]) -> None:
    x = list(range(len(labels)))
    series: dict[str, list[float]] = {"all": [p.utilization.get(None) or 0.0 for p in h.periods]}
    if h.by == "rm":
        for rm in sorted(h.capacity):
            series[rm] = [p.utilization.get(rm) or 0.0 for p in h.periods]
    for name, values in series.items():
        ax.plot(x, values, marker="o", label=name, color=colours[name])
    ax.set_ylabel("utilization %")
    ax.set_ylim(bottom=0)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, rotation=45, ha="right")
    ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
