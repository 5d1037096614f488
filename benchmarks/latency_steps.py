"""Where the milliseconds go from a group's last member's end to its continuation.

A group of N no-op members (20) to its continuation, timed at every step on the
way (``benchmarks/apps/latency_steps.py`` says where each note is taken), as
the library does it and as the seed's hand-written recipe (SADD, SCARD, SET NX)
does, its members kicked in one burst (as the library's group arrives) and one
after the other (as the seed, and ``benchmarks.scale``, kick them). One
``taskiq worker`` per side (100 slots, ``RedisStreamBroker``), all started at
once; their groups alternate (A/B/C, the order rotating), one warm-up group
each, then each step's median over the timed groups. The library's groups are
also shown split by whether the claimant's outcome went alone in its script
call or shared it with other members (whose acknowledgements then follow).

    python -m benchmarks.latency_steps [--n 20] [--groups 40] [--json PATH]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rich.table import Table

from benchmarks._cli import interrupted, redis_name, redis_option, session
from benchmarks._report import RESULTS_DIR, console, count, write_json
from benchmarks._run import Run, new_settings, worker_run
from benchmarks.apps import latency_steps as app
from benchmarks.apps.common import App
from local_redis import RedisProvider

APP = "benchmarks.apps.latency_steps"

#: The steps, in the order a group passes them: (note, what happened, parts).
#: A step runs from the side's previous step's note to its own; its parts,
#: where a side has their notes, split it: each (note, what) runs from the
#: previous note of any kind, the last one ending at the step's own note.
STEPS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("body_end", "the claimant's body returns (the start)", ()),
    ("post_execute", "FanInMiddleware.post_execute begins", ()),
    (
        "written",
        "the outcome call is written (recipe: SADD)",
        (
            ("joined", "its outcome joins the batcher"),
            ("wait_over", "its call stops waiting for company"),
            ("in_pipeline", "the pipeline's sender takes the call"),
            ("written", "redis-py writes the pipeline"),
        ),
    ),
    (
        "reply",
        "its reply is read (recipe: SET NX's)",
        (
            ("sadd_back", "SADD's reply"),
            ("scard_back", "SCARD's reply"),
            ("reply", "the script's (SET NX's) reply"),
        ),
    ),
    (
        "kick_begins",
        "the continuation's kick begins",
        (
            ("returned", "the batcher has the reply"),
            ("finalise", "the claimant resumes: finalise begins"),
            ("kick_begins", "GroupResult built: the kick begins"),
        ),
    ),
    ("xadd_sent", "taskiq's kicker built it: XADD sent", ()),
    ("xadd_back", "the XADD returned", ()),
    ("read_back", "the worker's XREADGROUP returns it", ()),
    ("hooks_begin", "taskiq's hooks begin (pre_execute)", ()),
    ("guard_begins", "the run guard (beginContinuation) is sent", ()),
    ("guard_back", "its reply is back", ()),
    ("body_start", "the continuation's body starts", ()),
)
#: Every note in time order, and whether it ends a step.
NOTES = tuple(
    (note, note == step)
    for step, _, parts in STEPS
    for note in [*(part for part, _ in parts if part != step), step]
)


@dataclass(frozen=True)
class Options:
    """What to run."""

    n: int = 20
    groups: int = 40
    max_async_tasks: int = 100
    #: Seconds one group may take before it counts as stuck.
    timeout: float = 60.0
    results_dir: Path = RESULTS_DIR


#: Each side's worker, and how its groups are kicked.
SIDES: dict[str, Callable[[App, int], Awaitable[None]]] = {
    "library": app.kick_library,
    "recipe": lambda tasks, n: app.kick_recipe(tasks, n, burst=True),
    "recipe_one_by_one": lambda tasks, n: app.kick_recipe(tasks, n, burst=False),
    "library_bare": app.kick_library,
}
#: The table's columns: a side's groups, or some of them.
COLUMNS: dict[str, tuple[str, Callable[[dict[str, float]], bool]]] = {
    "library": ("library", lambda _: True),
    "alone": ("library", lambda g: g["call_members"] == 1),
    "shared": ("library", lambda g: g["call_members"] > 1),
    "recipe": ("recipe", lambda _: True),
    "1 by 1": ("recipe_one_by_one", lambda _: True),
    "bare": ("library_bare", lambda _: True),
}
LEGEND = (
    "Columns (groups): library; its groups whose claimant's call was alone, and"
    " shared with other members; the recipe's members kicked in one burst, and one"
    " by one (as benchmarks.scale); bare: the library with none of these notes"
    " (its last member's end to its continuation's body: what the notes cost);"
    " XACKs: the library's shared groups' XACKs of other members in the step."
    " A step runs from the side's previous one."
)
#: Figures under the steps, per group: (name, what).
EXTRAS = (
    ("total", "total: claimant's end to the body's start"),
    ("cpu", "the worker's CPU time in it"),
    ("from_last_end", "the last member's end to it (scale's)"),
    ("members_spread", "the first member's end to the last's"),
    ("read_waited", "share of reads waiting for the XADD"),
    ("read_sent", "that read was sent, from the XADD sent"),
    ("listener_resumed", "its listener resumed, from the XADD sent"),
    ("acks", "XACKs of other members in it"),
    ("call_members", "members in the claimant's call"),
    ("call_waited", "share of claimant calls that waited"),
)
#: Figures that are 0 or 1 per group: their mean is the share of groups.
SHARES = ("read_waited", "call_waited")


def deltas(notes: dict[str, float]) -> dict[str, float]:
    """One group's steps and figures, in ms but for counts and shares.

    ``<note>``: a step, from the side's previous step (``<note>.acks``: the
    XACKs in it); ``<note>.part``: from the previous note of any kind; then the
    figures of :data:`EXTRAS`.
    """
    ms: dict[str, float] = {}
    acks = [at for name, at in notes.items() if name.startswith("ack")]
    step = part = None
    for note, ends_step in NOTES:
        if note not in notes:
            continue
        if part is not None:
            ms[f"{note}.part"] = (notes[note] - notes[part]) / 1e6
        if ends_step and step is not None:
            ms[note] = (notes[note] - notes[step]) / 1e6
            ms[f"{note}.acks"] = sum(notes[step] < at <= notes[note] for at in acks)
        part = note
        step = note if ends_step else step
    start, end = notes["body_start"], notes["body_end"]
    ms.update(
        total=(start - end) / 1e6,
        cpu=(notes["cpu_start"] - notes["cpu_end"]) / 1e6,
        from_last_end=(start - notes["last_body_end"]) / 1e6,
        members_spread=(notes["last_body_end"] - notes["first_body_end"]) / 1e6,
    )
    if "xadd_sent" in notes:  # not bare
        xadd = notes["xadd_sent"]
        ms.update(
            read_waited=float(notes["read_issued"] < xadd),
            read_sent=(notes["read_issued"] - xadd) / 1e6,
            listener_resumed=(notes["listener_resumed"] - xadd) / 1e6,
            acks=sum(end < at <= start for at in acks),
        )
    ms.update({k: notes[k] for k in ("call_members", "call_waited") if k in notes})
    return ms


def timeline(notes: dict[str, float]) -> dict[str, float]:
    """Every note of one group in ms from the claimant's end, in time order."""
    start = notes["body_end"]
    times = {
        name: round((at - start) / 1e6, 3)
        for name, at in notes.items()
        if not name.startswith(("call_", "cpu_"))
    }
    return dict(sorted(times.items(), key=lambda item: item[1]))


def medians(groups: Sequence[dict[str, float]]) -> dict[str, float]:
    """Each figure's median over the groups that have it (a mean for ``SHARES``)."""
    names = dict.fromkeys(name for one in groups for name in one)
    found = {name: [one[name] for one in groups if name in one] for name in names}
    return {
        name: round((statistics.mean if name in SHARES else statistics.median)(v), 3)
        for name, v in found.items()
    }


async def run(provider: RedisProvider, options: Options) -> dict[str, Any]:
    """Start a worker per side, alternate their groups, read each group's notes."""
    samples: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    timelines: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    async with contextlib.AsyncExitStack() as stack:
        runs: dict[str, tuple[App, Run]] = {}
        for side in SIDES:
            library = side.startswith("library")
            fanin = provider.url if library else ""
            name = app.BARE if side == "library_bare" else "latency"
            settings = new_settings(provider.url, name, fanin_url=fanin)
            tasks = app.build(settings, burst=not library)
            started = worker_run(
                APP,
                tasks.broker,
                settings,
                max_async_tasks=options.max_async_tasks,
                results_dir=options.results_dir,
                label=f"latency-{side}",
            )
            runs[side] = tasks, await stack.enter_async_context(started)
        order = list(SIDES)
        for repeat in range(options.groups + 1):  # the first: a warm-up
            for side in order:
                tasks, one = runs[side]
                await SIDES[side](tasks, options.n)
                one.entries += options.n + 1
                await one.drain(options.timeout, f"latency steps, {side}")
                notes = await one.record("steps", clear=True)
                if repeat:
                    samples[side].append(deltas(notes))
                    timelines[side].append(timeline(notes))
            order = order[1:] + order[:1]  # A/B/C, B/C/A, ...
            console.print(f"group {repeat}/{options.groups} of each side", end="\r")
    columns = {}
    for column, (side, chosen) in COLUMNS.items():
        groups = [one for one in samples[side] if chosen(one)]
        columns[column] = {"groups": len(groups), **(medians(groups) if groups else {})}
    return {
        "n": options.n,
        "groups": options.groups,
        "max_async_tasks": options.max_async_tasks,
        "medians": columns,
        "samples": samples,
        "timelines": timelines,
    }


def table(data: dict[str, Any]) -> Table:
    """Step, then each column's median ms; the rows under a step split it."""
    found = data["medians"]
    out = Table(
        title=f"N = {data['n']}: median ms, alternated groups of each side",
        caption=LEGEND,
        caption_justify="left",
    )
    out.add_column("step")
    for column, medians_of in found.items():
        out.add_column(f"{column}\n({medians_of['groups']})", justify="right")
    out.add_column("XACKs", justify="right")

    def cells(name: str) -> list[str]:
        values = [medians_of.get(name) for medians_of in found.values()]
        return ["-" if value is None else f"{value:.3f}" for value in values]

    out.add_row(STEPS[0][1])
    for step, what, parts in STEPS[1:]:
        acks = found["shared"].get(f"{step}.acks")
        out.add_row(what, *cells(step), "" if acks is None else f"{acks:g}")
        for part, said in parts:
            out.add_row(f"[dim]  {said}[/]", *cells(f"{part}.part"))
    out.add_section()
    for name, what in EXTRAS:
        out.add_row(what, *cells(name))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Run, print the table, write the JSON."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.latency_steps",
        description=__doc__.split("\n\n", maxsplit=1)[0],
    )
    parser.add_argument("--n", type=int, default=Options.n, help="members per group")
    parser.add_argument(
        "--groups", type=int, default=Options.groups, help="timed groups per side"
    )
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "latency_steps.json")
    redis_option(parser)
    args = parser.parse_args(argv)
    options = replace(
        Options(), n=args.n, groups=args.groups, results_dir=args.json.parent
    )
    outcome = session(args.redis, lambda provider, _bars: run(provider, options))
    if outcome is None:
        return interrupted()
    provider, data, date = outcome
    data = {"date": date, "redis": redis_name(provider), **data}
    write_json(args.json, data)
    console.print(table(data))
    groups = count(options.groups, "timed group")
    console.print(f"{date}, {data['redis']}; {groups} a side. JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
