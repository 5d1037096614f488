"""What the commands print: rich tables for people, one JSON document for tools."""

import contextlib
import json
import os
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from taskiq_fanin.domain.readable import duration, moment
from taskiq_fanin.domain.results import (
    ChainState,
    ChainStatus,
    GroupStatus,
    MemberError,
    OnErrorState,
)
from taskiq_fanin.storage.keys import sweep_lock_key
from taskiq_fanin.sweep.report import Finding, SweepReport

#: Runs of missing members (``0-29``) a table shows; ``--json`` has them all.
SHOWN_RUNS = 6


class ReaderGoneError(Exception):
    """The pipe's reader stopped reading (``... --json | head -1``)."""


def _reader_gone() -> ReaderGoneError:
    """The reader is gone: stdout goes nowhere from now on.

    So the flush at exit does not fail too, and the command ends as ``head``
    asked.
    """
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return ReaderGoneError()


@contextlib.contextmanager
def to_stdout() -> Iterator[None]:
    """Plain writes to stdout; a reader gone raises ``ReaderGoneError``."""
    try:
        yield
    except BrokenPipeError:
        raise _reader_gone() from None


class StdoutConsole(Console):
    """rich's console on stdout, which says so when the pipe's reader is gone.

    rich's own exits with 1 then (``SystemExit``): an error to a script, where
    ``| head`` only read what it wanted.
    """

    def on_broken_pipe(self) -> None:
        """The reader is gone: nothing more is written, and the command ends."""
        self.quiet = True
        raise _reader_gone()


def print_json(document: object) -> None:
    """Print one JSON document."""
    with to_stdout():
        print(json.dumps(document, indent=2), flush=True)


def print_text(line: str) -> None:
    """Print a line of text."""
    with to_stdout():
        print(line, flush=True)


def print_table(table: RenderableType) -> None:
    """Print a table (or tables); piped, one line per row however wide."""
    console = StdoutConsole()
    if not console.is_terminal:  # a pipe, a file, cron's mail: one line per row
        unbounded = console.options.update_width(sys.maxsize)
        width = console.measure(table, options=unbounded).maximum
        console.width = max(console.width, width)
    # A newer rich calls ``on_broken_pipe``; rich 13.0 (the floor) lets
    # BrokenPipeError through (make test-lowest): both end the same.
    with to_stdout():
        console.print(table)


def add_literal_row(table: Table, *cells: object) -> None:
    """A row whose text is shown as it is, never read as rich markup.

    An error, a name or an id may hold ``[...]``, which rich would fail on or
    restyle (a member's error turned into a terminal hyperlink).
    """
    table.add_row(
        *(cell if isinstance(cell, Text) else _literal(cell) for cell in cells)
    )


def _literal(value: object) -> Text:
    return Text("" if value is None else str(value))


def _title(text: str) -> Text:
    """A table's title, shown as it is (an id may hold ``[``), in its style."""
    return Text(text, style="table.title")


def status_doc(status: GroupStatus, now: datetime) -> dict[str, Any]:
    """The model as JSON, with its age and lateness at one ``now``."""
    return {
        "kind": "group",
        **status.model_dump(mode="json"),
        "age_seconds": status.age_seconds(now),
        "overdue": status.overdue(now),
    }


def chain_doc(status: ChainStatus, now: datetime) -> dict[str, Any]:
    """The model as JSON (steps counted from 0, as in Python), with its age."""
    return {
        "kind": "chain",
        **status.model_dump(mode="json"),
        "current": status.current,
        "age_seconds": status.age_seconds(now),
    }


def _overdue_by(status: GroupStatus, now: datetime) -> str:
    if status.deadline is None or not status.overdue(now):
        return ""
    return duration((now - status.deadline).total_seconds())


def _members(indexes: list[int]) -> str:
    """Member indexes as runs (``0-29, 31``), the first few of them."""
    runs: list[list[int]] = []
    for index in indexes:
        if runs and index == runs[-1][1] + 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    shown = [f"{a}-{b}" if b > a else str(a) for a, b in runs[:SHOWN_RUNS]]
    more = sum(b - a + 1 for a, b in runs[SHOWN_RUNS:])
    return ", ".join(shown) + (f" (+{more} more)" if more else "")


def status_table(status: GroupStatus, now: datetime) -> Table:
    """One group, a row per field."""
    table = Table(
        title=_title(f"Group {status.group_id}"), show_header=False, box=box.SIMPLE
    )
    table.add_column(style="bold")
    table.add_column()
    overdue = _overdue_by(status, now)
    policies = [p.value for p in (status.failure_policy, status.sweep_policy) if p]
    for name, value in (
        ("state", status.state.value + (f" (overdue {overdue})" if overdue else "")),
        ("name", status.name or "-"),
        ("total", status.total),
        ("done", status.done),
        ("failed", status.failed),
        ("skipped", status.skipped),
        ("version", status.version or "-"),
        ("lost", status.lost),
        ("pending", status.pending),
        ("in flight", status.in_flight),
        ("waiting", status.waiting),
        ("max in flight", status.max_in_flight or "-"),
        ("planned", "yes" if status.planned else "no"),
        ("redrives", status.redrives),
        ("created", moment(status.created)),
        ("deadline", moment(status.deadline)),
        ("finished", moment(status.finished)),
        ("age", duration(status.age_seconds(now))),
        ("policies (failure, sweep)", ", ".join(policies) or "-"),
    ):
        add_literal_row(table, name, str(value))
    return table


def _error(error: MemberError | None) -> str:
    """A recorded error summary as ``Type: message``."""
    if error is None:
        return "-"
    return f"{error.type}: {error.message}" if error.message else error.type


def _step(status: ChainStatus, index: int | None) -> str:
    """Step ``index`` (from 0) as people count it: ``2 of 4 (group of 3)``."""
    if index is None:
        return "-"
    names = status.step_names
    name = f" ({names[index]})" if index < len(names) else ""
    return f"{index + 1} of {status.steps}{name}"


def _step_state(status: ChainStatus, index: int) -> str:
    """What became of one step, judged from where the chain is."""
    if index < status.step:
        return "done"
    if index > status.step:
        return "waiting" if status.state is ChainState.RUNNING else "not run"
    return {
        ChainState.RUNNING: "current",
        ChainState.FAILED: "failed",
        ChainState.CANCELLED: "cancelled",
    }.get(status.state, "-")


def chain_table(status: ChainStatus, now: datetime) -> RenderableType:
    """One chain: a row per field, then a row per step, the current one marked."""
    fields = Table(
        title=_title(f"Chain {status.chain_id}"), show_header=False, box=box.SIMPLE
    )
    fields.add_column(style="bold")
    fields.add_column()
    where = _step(status, status.step)
    if status.state is ChainState.DONE:
        where = f"all {status.steps} done"
    elif status.state is not ChainState.RUNNING:
        where = f"stopped at {where}"
    rows = [
        ("state", status.state.value),
        ("step", where),
        ("started", moment(status.started)),
        ("updated", moment(status.updated)),
        ("finished", moment(status.finished)),
        ("age", duration(status.age_seconds(now))),
        ("failed step", _step(status, status.failed_step)),
        ("error", _error(status.error)),
    ]
    if status.on_error_state is not OnErrorState.NONE:
        rows.append(("on error", status.on_error_state.value))
    if status.version is not None:
        rows.append(("version", status.version))
    if status.name is not None:
        rows.append(("name", status.name))
    for name, value in rows:
        add_literal_row(fields, name, value)
    steps = Table(box=box.SIMPLE_HEAD)
    steps.add_column("", no_wrap=True)  # the marker of the current step
    steps.add_column("#", justify="right")
    steps.add_column("step")
    steps.add_column("state")
    for index, name in enumerate(status.step_names):
        state = _step_state(status, index)
        marker = ">" if state == "current" else ""
        add_literal_row(steps, marker, str(index + 1), name, state)
    return Group(fields, steps)


def list_table(statuses: list[GroupStatus], now: datetime, title: str) -> Table:
    """Groups, a row each."""
    table = Table(title=_title(title), box=box.SIMPLE_HEAD)
    table.add_column("group", no_wrap=True)  # whole, to be copied
    table.add_column("state")
    for header in ("done/failed/total", "pending", "age", "overdue"):
        table.add_column(header, justify="right")
    for status in statuses:
        add_literal_row(
            table,
            status.group_id,
            status.state.value,
            f"{status.done}/{status.failed}/{status.total}",
            str(status.pending),
            duration(status.age_seconds(now)),
            _overdue_by(status, now),
        )
    return table


def chain_list_table(statuses: list[ChainStatus], now: datetime, title: str) -> Table:
    """Chains, a row each, at the step each is at (counted from 1)."""
    table = Table(title=_title(title), box=box.SIMPLE_HEAD)
    table.add_column("chain", no_wrap=True)  # whole, to be copied
    table.add_column("state")
    table.add_column("step")
    table.add_column("version")
    for header in ("age", "overdue"):
        table.add_column(header, justify="right")
    for status in statuses:
        age = None if status.started is None else (now - status.started).total_seconds()
        late = ""
        if status.due is not None and status.overdue(now):
            late = duration((now - status.due).total_seconds())
        add_literal_row(
            table,
            status.chain_id,
            status.state.value,
            _step(status, status.step),
            status.version or "-",
            duration(age),
            late,
        )
    return table


def versions_table(statuses: list[ChainStatus], title: str) -> Table:
    """How many of the chains listed run each version: may an old one go?"""
    counted = Counter(status.version or "-" for status in statuses)
    table = Table(title=_title(title), box=box.SIMPLE_HEAD)
    table.add_column("version")
    table.add_column("chains", justify="right")
    for version, number in sorted(counted.items()):
        add_literal_row(table, version, str(number))
    return table


def sweep_table(findings: list[Finding], dry_run: bool) -> Table:
    """A sweep's findings, a row each, with what was (or would be) done."""
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("group", no_wrap=True)
    for header in ("kind", "action", "done/failed/total", "missing members"):
        table.add_column(header)
    for header in ("age", "overdue"):
        table.add_column(header, justify="right")
    table.add_column("note")
    for finding in findings:
        action = finding.action.value
        if dry_run:
            action = f"would {action}"
        elif not finding.applied:
            action = f"{action} (not applied)"
        add_literal_row(
            table,
            finding.group_id,
            finding.kind.value,
            action,
            f"{finding.done}/{finding.failed}/{finding.total}",
            _members(finding.missing),
            duration(finding.age_seconds),
            duration(finding.overdue_seconds),
            finding.note,
        )
    return table


def sweep_summary(report: SweepReport, prefix: str) -> str:
    """One line: what the sweep examined and found."""
    if report.skipped:
        lock = sweep_lock_key(prefix)
        return f"Another sweep holds the lock ({lock}): nothing was done."

    def count(number: int, noun: str, plural: str = "") -> str:
        return f"{number} {noun if number == 1 else plural or noun + 's'}"

    examined = count(report.examined, "due group or chain", "due groups or chains")
    summary = (
        f"Examined {examined}: "
        f"{count(len(report.findings), 'finding')}, {len(report.stuck)} stuck."
    )
    if not report.tasks_checked:
        summary += (
            " Tasks your workers do not know could not be told: this sweep's"
            " broker knows none of your tasks (pass --broker, with your tasks"
            " imported)."
        )
    return f"Dry run, nothing written. {summary}" if report.dry_run else summary
