"""Progress while the benchmarks run, and the table and JSON they leave behind."""

from __future__ import annotations

import contextlib
import json
import os
import statistics
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

#: Where ``make bench`` writes its JSON, chart and worker logs.
RESULTS_DIR = Path("bench-results")

#: A terminal's width, or COLUMNS; piped into a file or CI log without
#: COLUMNS, 120 (the table itself fits 80).
console = Console(width=None if sys.stdout.isatty() or "COLUMNS" in os.environ else 120)


@contextlib.contextmanager
def progress_bars() -> Iterator[Progress]:
    """A live progress display: one bar per benchmark."""
    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=console) as progress:
        yield progress


class Steps:
    """One benchmark's bar: what it is doing now, and how many runs are done."""

    def __init__(self, progress: Progress | None, name: str, total: int) -> None:
        self.progress = progress
        self.name = name
        self.task: TaskID | None = None
        if progress is not None:
            self.task = progress.add_task(name, total=total)

    def now(self, what: str) -> None:
        """Say what the benchmark is doing."""
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, description=f"{self.name}: {what}")

    def advance(self) -> None:
        """One more run finished."""
        if self.progress is not None and self.task is not None:
            self.progress.advance(self.task)

    def finish(self) -> None:
        """The benchmark is done (whatever the planned count said)."""
        if self.progress is not None and self.task is not None:
            total = self.progress.tasks[self.task].total
            self.progress.update(
                self.task, description=f"{self.name}: done", completed=total
            )


def count(number: int, noun: str) -> str:
    """``3 pairs``, ``1 pair``."""
    return f"{number} {noun}" + ("" if number == 1 else "s")


def sizes(numbers: Sequence[int]) -> str:
    """``1,000, 10,000 and 100,000``."""
    shown = [f"{n:,}" for n in numbers]
    return " and ".join([", ".join(shown[:-1]), shown[-1]] if len(shown) > 1 else shown)


def run_date() -> str:
    """Now, to the minute, with the local time zone."""
    return datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")


def median(values: Sequence[float]) -> float:
    """The median, rounded for JSON a person reads too."""
    return round(statistics.median(values), 4)


def rounded(values: Iterable[float]) -> list[float]:
    """Every value, rounded as :func:`median` rounds."""
    return [round(value, 4) for value in values]


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write ``data`` as indented JSON, creating the directory."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2) + "\n")


@dataclass(frozen=True)
class Check:
    """One line of the summary: a target beside what was measured.

    ``met`` is ``None`` for a figure that is reported but has no target, or that
    this Redis cannot measure.
    """

    benchmark: str
    measure: str
    target: str
    measured: str
    met: bool | None


def checks_table(
    checks: Sequence[Check], title: str, notes: Sequence[str] = ()
) -> Table:
    """The summary a person reads at a glance, in 80 columns.

    Each benchmark's rows follow a line with its name (a column of names would
    take 12 of the 80); ``notes`` go under the table: the run's settings and
    what the short names in the rows stand for.
    """
    table = Table(
        title=title,
        title_justify="left",
        caption="\n".join(notes) or None,
        caption_justify="left",
        caption_style="none",
    )
    table.add_column("measure")
    table.add_column("target")
    table.add_column("measured", justify="right")
    table.add_column("met", justify="center")
    mark = {True: "[green]yes[/]", False: "[red]NO[/]", None: "[dim]-[/]"}
    for index, check in enumerate(checks):
        following = checks[index + 1] if index + 1 < len(checks) else None
        if index == 0 or checks[index - 1].benchmark != check.benchmark:
            table.add_row(f"[bold]{check.benchmark}[/]")
        table.add_row(
            check.measure,
            check.target,
            check.measured,
            mark[check.met],
            end_section=following is None or following.benchmark != check.benchmark,
        )
    return table


def print_checks(
    checks: Sequence[Check],
    title: str = "taskiq-fanin benchmarks",
    notes: Sequence[str] = (),
) -> None:
    """Print the summary table and a line counting missed targets."""
    console.print(checks_table(checks, title, notes))
    missed = [c for c in checks if c.met is False]
    if missed:
        console.print(f"[red]{len(missed)} target(s) missed.[/]")
    else:
        console.print("[green]Every target met.[/]")
