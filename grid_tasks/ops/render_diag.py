"""Rich renderings of ``diagnose -n`` (nodes), ``-r`` (reservations) and ``-f`` (fairshare)."""

from __future__ import annotations

from datetime import datetime

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .diag_fs import FairshareReport
from .diag_nodes import NodeDiagnosis
from .diag_res import ResDiagnosis
from .timefmt import format_duration, format_time
from .why import Reason


def _problems(problems: list[Reason]) -> str:
    return "\n".join(f"[red]{p.kind}[/]: {p.message}" for p in problems) or "[green]ok[/]"


def nodes_diag_view(rows: list[NodeDiagnosis]) -> Table:
    """diagnose -n: one line per node with its processors, heartbeat and problems."""
    table = Table(title="node diagnostics")
    for col in ("Node", "RM", "State", "Procs", "Dedicated", "Reserved", "Available",
                "Heartbeat", "Jobs", "Problems"):
        table.add_column(col, justify="right" if col in (
            "Procs", "Dedicated", "Reserved", "Available") else "left", overflow="fold",
            min_width=40 if col == "Problems" else None)
    for d in rows:
        r = d.report
        beat = ("-" if d.heartbeat_age is None else f"{d.heartbeat_age:.1f} s ago")
        if d.heartbeat_ttl is None:
            beat += " (no registry)"
        jobs = ", ".join(f"{j['job_id']}:{j['procs']}" for j in r.jobs) or "-"
        table.add_row(r.name, r.rm, r.state.value, str(r.configured["procs"]),
                      str(r.dedicated_procs), str(r.reserved_procs), str(r.available_procs),
                      beat, jobs, _problems(d.problems))
    return table


def res_diag_view(rows: list[ResDiagnosis], now: datetime) -> Table:
    """diagnose -r: one line per reservation with window, nodes, ACL, job, token, problems."""
    table = Table(title="reservation diagnostics")
    for col in ("Name", "Type", "RM", "Start", "End", "Nodes/Procs", "ACL", "Job", "Token",
                "Problems"):
        table.add_column(col, overflow="fold", min_width=40 if col == "Problems" else None)
    for d in rows:
        r = d.row
        nodes = ", ".join(f"{n}:{p}" for n, p in sorted(r.procs_by_node.items())) or "-"
        acl = "; ".join(f"{k}={','.join(v)}" for k, v in sorted(r.acl.items()) if v) or "-"
        job = "-" if r.job_id is None else f"{r.job_id} ({d.job_state or 'gone'})"
        token = "-" if d.token_state is None else d.token_state
        table.add_row(r.name, r.kind, r.rm or "-", format_time(r.start),
                      "INFINITY" if r.end is None else format_time(r.end),
                      f"{len(r.procs_by_node)}/{sum(r.procs_by_node.values())}\n{nodes}",
                      acl, job, token, _problems(d.problems))
    return table


def fairshare_view(reports: list[FairshareReport]) -> Group:
    """diagnose -f: per RM the configuration, then one line per credential with the
    usage of each window (newest first), decayed usage, target and priority part."""
    parts: list[object] = []
    for rep in reports:
        head = (f"{rep.rm}: FSPOLICY {rep.policy}  FSINTERVAL "
                f"{format_duration(rep.interval)}  FSDEPTH {rep.depth}  FSDECAY {rep.decay:g}")
        parts.append(Text(head, style="bold"))
        if not rep.enabled:
            parts.append(Text("  fairshare is off (FSPOLICY NONE): no FS priority component"))
            parts.append(Text())
            continue
        table = Table()
        table.add_column("Credential")
        for i, start in enumerate(rep.window_starts):
            table.add_column(f"W{i} {start.strftime('%m-%d %H:%M')}", justify="right")
        for col in ("Usage %", "Target", "Delta", "Weight", "Priority"):
            table.add_column(col, justify="right")
        table.add_row("TOTAL (proc-h)", *[f"{t:.2f}" for t in rep.totals], "100.0", "", "",
                      "", "", end_section=True)
        for row in rep.rows:
            table.add_row(f"{row.kind}:{row.name}", *[f"{w:.2f}" for w in row.windows],
                          f"{row.usage_percent:.1f}", row.target or "-", f"{row.delta:+.1f}",
                          f"{row.weight:g}", f"{row.component:+.1f}")
        parts += [table, Text()]
    return Group(*parts)
