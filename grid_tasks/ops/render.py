"""Rich renderings of the operator reports, in Maui's layout and vocabulary.

The report classes are named for type checking only: a command that renders one
report does not import the modules of all the others (start-up time).
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from .timefmt import INFINITE, format_duration, format_time

if TYPE_CHECKING:
    from .diagnose import JobDiagnosis, PriorityRow
    from .jobs import CoallocReport, JobReport
    from .nodes import NodeReport
    from .planning import StartReport, WindowRow
    from .queue import Queue, QueueRow
    from .reservations import ResRow
    from .stats import Stats

STATE_STYLE = {"Running": "cyan", "Starting": "cyan", "Idle": "green", "Hold": "magenta",
               "Blocked": "red", "Deferred": "yellow", "Suspended": "yellow"}


def _styled(state: str) -> str:
    style = STATE_STYLE.get(state)
    return f"[{style}]{state}[/]" if style else state


#: A showq section longer than this prints as plain aligned columns, not a rich table:
#: laying out a table of 100,000 rows took most of ``showq --all``'s time.
PLAIN_ROWS = 1000


def _queue_columns(active: bool) -> tuple[str, ...]:
    return ("JOBNAME", "USERNAME", "STATE", "PROC", "REMAINING" if active else "WCLIMIT",
            "STARTTIME" if active else "QUEUETIME", "RM")


def _queue_cells(r: QueueRow, active: bool) -> list[str]:
    return [str(r.job_id), r.user or "-", r.state, str(r.procs),
            format_duration(r.remaining if active else r.walltime),
            format_time(r.start_time if active else r.submit_time), r.rm or "-"]


def _queue_section(title: str, rows: list[QueueRow], active: bool) -> Any:
    if len(rows) > PLAIN_ROWS:
        return _plain_section(title, rows, active)
    table = Table(title=title, title_justify="left", title_style="bold")
    for col in _queue_columns(active):
        table.add_column(col, justify="right" if col in ("PROC", "REMAINING", "WCLIMIT") else "left")
    for r in rows:
        cells = _queue_cells(r, active)
        cells[2] = _styled(r.state)
        table.add_row(*cells)
    return table


def _plain_section(title: str, rows: list[QueueRow], active: bool) -> Text:
    """A long section as Maui prints it: a title, a header and one aligned line per job."""
    header = list(_queue_columns(active))
    cells = [_queue_cells(r, active) for r in rows]
    widths = [max(len(header[i]), max(len(c[i]) for c in cells)) for i in range(len(header))]
    right = {3, 4}  # PROC and the duration

    def line(values: list[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w)
                         for i, (v, w) in enumerate(zip(values, widths))).rstrip()

    # never wrapped nor cropped: measuring 100,000 lines for wrapping cost rich most of
    # showq --all's time, and the lines are as long as their content anyway
    text = Text(title + "\n", style="bold", no_wrap=True, overflow="ignore")
    text.append("\n".join([line(header)] + [line(c) for c in cells]))
    return text


def _entered(sub: Any) -> str:
    return f"{'-' if sub.entered is None else sub.entered}/{sub.size}"


def _coalloc_section(statuses: list[Any]) -> Table:
    """One line per coallocated job (contact, state, barrier), then one indented line
    per subjob: label, RM, GRAM job, start type, state, barrier entries, reason."""
    table = Table(title="COALLOCATED JOBS", title_justify="left", title_style="bold")
    for col in ("JOB / SUBJOB", "RM", "GRAM JOB", "START TYPE", "STATE", "IN BARRIER",
                "REASON"):
        table.add_column(col)
    for c in statuses:
        table.add_row(f"[bold]{c.contact}[/]", "", "", f"barrier {c.barrier}", c.state.value,
                      "", c.reason or "")
        for sub in c.subjobs:
            table.add_row(f"  {sub.label}", sub.rm,
                          "-" if sub.gram_job is None else str(sub.gram_job),
                          sub.start_type.value, sub.state.value, _entered(sub), sub.reason or "")
    return table


def _page_note(queue: Queue, section: str) -> list[Any]:
    """``rows 51-100 of 100000 idle jobs (...)`` under a section listed in part."""
    shown, total = len(getattr(queue, section)), queue.count(section)
    if shown == total or queue.limit is None:
        return []
    first = (queue.page - 1) * queue.limit + 1
    span = f"rows {first}-{first + shown - 1}" if shown else f"no rows on page {queue.page}"
    more = f"--page {queue.page + 1} for the next, " if first + shown - 1 < total else ""
    return [Text(f"{span} of {total} {section} jobs ({more}--all for every row)",
                 style="italic")]


def queue_view(queue: Queue) -> Group:
    """showq: ACTIVE JOBS, IDLE JOBS, BLOCKED JOBS, the summary lines and, when there are
    any, the COALLOCATED JOBS with their subjobs.  A section listed in part (one page)
    says which rows it shows and how to see the others."""
    d = queue.summary()
    plural = lambda n, word: f"{n} {word}{'' if n == 1 else 's'}"  # noqa: E731
    active_line = Text(
        f"{plural(d['active_jobs'], 'Active Job')}   {d['procs_active']} of {d['procs_total']} "
        f"Processors Active ({d['procs_percent']:.2f}%)   {d['nodes_active']} of "
        f"{d['nodes_total']} Nodes Active ({d['nodes_percent']:.2f}%)")
    total = Text(f"Total Jobs: {d['total_jobs']}   Active Jobs: {d['active_jobs']}   "
                 f"Idle Jobs: {d['idle_jobs']}   Blocked Jobs: {d['blocked_jobs']}", style="bold")
    parts: list[Any] = [_queue_section("ACTIVE JOBS", queue.active, True),
                        *_page_note(queue, "active"), active_line, Text(),
                        _queue_section("IDLE JOBS", queue.idle, False),
                        *_page_note(queue, "idle"),
                        Text(plural(d["idle_jobs"], "Idle Job")), Text(),
                        _queue_section("BLOCKED JOBS", queue.blocked, False),
                        *_page_note(queue, "blocked"), Text(), total]
    if queue.coallocations:
        parts += [Text(), _coalloc_section(queue.coallocations),
                  Text(plural(d["coallocated_jobs"], "Coallocated Job"))]
    return Group(*parts)


def coalloc_view(r: CoallocReport) -> Group:
    """checkjob of a coallocated job: its record, then one line per subjob."""
    c = r.status
    rows = [("State", c.state.value), ("Contact", c.contact), ("Owner", r.owner or "-"),
            ("Barrier", c.barrier + (f" (timeout {format_duration(r.barrier_timeout)})"
                                     if r.barrier_timeout else "")),
            ("Created", format_time(r.times["created"])),
            ("Released", format_time(r.times["released"]))]
    if c.reason:
        rows.append(("Reason", c.reason))
    subjobs = Table(title="subjobs", title_justify="left")
    for col in ("label", "addr", "RM", "GRAM job", "start type", "comms", "state",
                "in barrier", "exit", "reason"):
        subjobs.add_column(col)
    for sub in c.subjobs:
        subjobs.add_row(sub.label, str(sub.address), sub.rm,
                        "-" if sub.gram_job is None else str(sub.gram_job),
                        sub.start_type.value, sub.comms_type.value, sub.state.value,
                        _entered(sub), "-" if sub.exit_code is None else str(sub.exit_code),
                        sub.reason or "")
    return Group(_kv_table(f"coallocated job {c.id}", rows), subjobs)


def _kv_table(title: str, rows: list[tuple[str, str]]) -> Table:
    table = Table(title=title, title_justify="left", show_header=False, box=None)
    table.add_column(style="bold")
    table.add_column()
    for key, value in rows:
        table.add_row(key, value)
    return table


def job_view(r: JobReport) -> Group:
    """checkjob: state, credentials, times, nodes, reservations, error, why, history."""
    creds = "  ".join(f"{k}: {v}" for k, v in r.credentials.items() if v)
    rows = [("State", f"{_styled(r.state)} (GRAM {r.gram_state})"), ("Contact", r.contact or "-"),
            ("RM", r.rm or "-"), ("Creds", creds or "-"),
            ("WallTime", f"limit {format_duration(r.walltime)}"),
            ("Procs", f"{r.procs} ({r.tasks} task{'s' if r.tasks != 1 else ''})"),
            ("Priority", "-" if r.priority is None else f"{r.priority:g}"),
            ("SubmitTime", format_time(r.times["submit"])),
            ("StartTime", format_time(r.times["start"])), ("EndTime", format_time(r.times["end"])),
            ("Allocated Nodes", ", ".join(f"{n}:{k}" for n, k in r.nodes.items()) or "-"),
            ("Reservations", ", ".join(f"{x['name']} ({x['kind']})" for x in r.reservations) or "-")]
    if r.holds:
        rows.append(("Holds", ", ".join(r.holds)))
    if r.dependencies:
        rows.append(("Depends on", ", ".join(map(str, r.dependencies))))
    if r.coallocation:
        rows.append(("Coallocation", f"{r.coallocation['id']} ({r.coallocation['label'] or '-'})"))
    if r.exit_code is not None:
        rows.append(("Exit code", str(r.exit_code)))
    if r.gram_error or r.failure_reason:
        code = f" ({r.gram_error_code})" if r.gram_error_code is not None else ""
        rows.append(("GRAM error", f"[red]{r.gram_error or '-'}{code}[/] {r.failure_reason or ''}"))
    parts: list[Any] = [_kv_table(f"job {r.job_id}", rows)]
    if r.reasons:
        parts.append(Text("Why it does not start:", style="bold"))
        parts.extend(Text(f"  {x.kind}: {x.message}") for x in r.reasons)
    history = Table(title="history", title_justify="left")
    for col in ("at", "from", "to", "reason"):
        history.add_column(col)
    for h in r.history:
        history.add_row(h["at"] or "-", h["from"] or "-", h["to"], h["reason"] or "")
    parts.append(history)
    return Group(*parts)


def node_view(r: NodeReport) -> Group:
    """checknode: state, configured and available resources, jobs, reservations."""
    c = r.configured
    rows = [("State", f"{r.state.value}"),
            ("Configured", f"PROCS: {c['procs']}  MEM: {c['memory_mb']}M  DISK: {c['disk_mb']}M  "
                           f"SWAP: {c['swap_mb']}M"),
            ("Dedicated", f"PROCS: {r.dedicated_procs}"), ("Reserved now", f"PROCS: {r.reserved_procs}"),
            ("Available", f"PROCS: {r.available_procs}"),
            ("Features", ", ".join(r.features) or "-"), ("Host", r.host or "-"),
            ("Last heartbeat", format_time(r.last_heartbeat))]
    jobs = Table(title="jobs", title_justify="left")
    for col in ("job", "user", "tasks", "procs", "state", "start"):
        jobs.add_column(col)
    for j in r.jobs:
        jobs.add_row(str(j["job_id"]), j["user"] or "-", str(j["tasks"]), str(j["procs"]),
                     j["state"], _iso_time(j["start_time"]))
    res = Table(title="reservations", title_justify="left")
    for col in ("name", "type", "procs", "start", "end"):
        res.add_column(col)
    for x in r.reservations:
        res.add_row(x["name"], x["kind"], str(x["procs"]), _iso_time(x["start"]),
                    _iso_time(x["end"]))
    return Group(_kv_table(f"node {r.name} ({r.rm})", rows), jobs, res)


def _iso_time(text: str | None) -> str:
    return format_time(datetime.fromisoformat(text)) if text else "-"


def reservations_view(rows: list[ResRow], now: datetime, per_node: bool = False) -> Table:
    """showres (``-n``: one line per node of each reservation)."""
    table = Table(title="reservations")
    cols = ["ReservationID", "RM", "Type", "S", "Start", "End", "Duration"]
    cols += ["Node", "Procs"] if per_node else ["N/P"]
    cols += ["StartTime", "ACL"]
    for col in cols:
        table.add_column(col, justify="right" if col in ("Start", "End", "Duration") else "left")
    for r in rows:
        d = r.to_dict(now)
        acl = " ".join(f"{k}={','.join(v)}" for k, v in r.acl.items() if v) or "-"
        common = [r.name, r.rm or "-", r.kind, d["state"][0],
                  format_duration((r.start - now).total_seconds()),
                  format_duration(INFINITE if r.end is None else (r.end - now).total_seconds()),
                  format_duration(INFINITE if r.end is None else (r.end - r.start).total_seconds())]
        if per_node:
            for node, procs in sorted(r.procs_by_node.items()):
                table.add_row(*common, node, str(procs), format_time(r.start), acl)
        else:
            table.add_row(*common, f"{d['nodes']}/{d['procs']}", format_time(r.start), acl)
    return table


def start_view(r: StartReport) -> Group:
    """showstart: the earliest start and alternatives."""
    head = (f"job {r.job_id} requires {r.procs} procs for {format_duration(r.walltime)}"
            if r.job_id is not None else
            f"request {r.request!r} requires {r.procs} procs for {format_duration(r.walltime)}")
    table = Table(title=f"{head} on {r.rm}", title_justify="left")
    for col in ("", "start in", "start time", "nodes"):
        table.add_column(col)
    for i, e in enumerate(r.estimates):
        label = "Earliest start" if i == 0 else "Alternative"
        table.add_row(label, format_duration((e.start - r.now).total_seconds()),
                      format_time(e.start), ", ".join(f"{n}:{k}" for n, k in e.allocation.items()))
    parts: list[Any] = [table]
    if r.note:
        parts.append(Text(r.note, style="italic"))
    return Group(*parts)


def backfill_view(rm: str, rows: list[WindowRow], now: datetime) -> Group:
    """showbf: ``N procs available for D`` lines."""
    lines: list[Any] = [Text(f"backfill window on {rm}  {format_time(now)}", style="bold")]
    if not rows:
        lines.append(Text("  no procs available"))
    for w in rows:
        span = ("with no timelimit" if w.duration == INFINITE
                else f"for {format_duration(w.duration)}")
        lines.append(Text(f"  {w.procs} procs on {w.nodes} node{'s' if w.nodes != 1 else ''} "
                          f"available {span}"))
    return Group(*lines)


def stats_view(s: Stats) -> Table:
    """showstats: one line per credential (or the whole system)."""
    title = f"statistics{' of ' + s.rm if s.rm else ''}" + (f" per {s.by}" if s.by else "")
    table = Table(title=title)
    for col in (s.by or "scope", "Active Jobs", "Active Procs", "Jobs", "Done", "Failed",
                "ProcHours", "FS usage %", "Mean wait", "AvgXF", "MaxXF"):
        table.add_column(col, justify="left" if col == (s.by or "scope") else "right")
    f = lambda v: "-" if v is None else f"{v:.2f}"  # noqa: E731
    for row in (s.rows or []) + [s.total]:
        name = "TOTAL" if row is s.total else (row.key or "-")
        table.add_row(name, str(row.active_jobs), str(row.active_procs), str(row.jobs),
                      str(row.succeeded), str(row.failed), f"{row.proc_hours:.3f}",
                      f"{row.share:.1f}", format_duration(row.mean_wait),
                      f(row.mean_xfactor), f(row.max_xfactor))
    return table


def priority_view(rm: str, rows: list[PriorityRow]) -> Table:
    """diagnose -p: each idle job's total priority and weighted components."""
    comps = sorted({c for r in rows for c in r.components})
    table = Table(title=f"job priorities on {rm}")
    for col in ["Job", "User", "Priority"] + comps:
        table.add_column(col, justify="left" if col in ("Job", "User") else "right")
    for r in rows:
        table.add_row(str(r.job_id), r.user or "-", f"{r.total:.1f}",
                      *[f"{r.components.get(c, 0.0):.1f}" for c in comps])
    return table


def diagnosis_view(rows: list[JobDiagnosis]) -> Table:
    """diagnose -j: one line per reason a job waits."""
    table = Table(title="why jobs do not start")
    for col in ("Job", "RM", "User", "State", "Reason", "Detail"):
        table.add_column(col)
    for d in rows:
        for i, reason in enumerate(d.reasons or []):
            first = i == 0
            table.add_row(str(d.job_id) if first else "", (d.rm or "-") if first else "",
                          (d.user or "-") if first else "", d.state if first else "",
                          reason.kind, reason.message)
    return table
