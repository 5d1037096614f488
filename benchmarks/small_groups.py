"""Small and medium groups beside the hand-written recipe and plain tasks.

Most groups people write have 5 to 500 members: there, a group's fixed cost and
the worker's cost per member decide. N no-op members (20, 200, 2,000) three
ways, one ``taskiq worker`` per side (100 slots, ``RedisStreamBroker``), all
started at once: taskiq's plain tasks; the seed's SADD/SCARD/SET NX recipe
(``002``) with its continuation; this library's ``group(...)`` with its
continuation. The plain tasks and the recipe's members are kicked in one burst
(one MULTI/EXEC), the library's group by ``group(...).kiq()`` (planning
included). Groups of the three sides alternate (the order rotating), one
warm-up round, then the medians of the timed rounds.

Per group: the wall time from the kick to the last task's start (plain: the
last member's end; the fan-ins: the continuation's start), and its ratio to the
plain run of the same round; the kick to the first member's start; the last
member's end to the continuation's start; the worker's CPU per member over the
group (the continuation's and every acknowledgement included, by the worker's
own clock: ``CpuMarks``), beside the plain run's.

    python -m benchmarks.small_groups [--sizes 20 200 2000] [--rounds 11] [--json PATH]
"""

from __future__ import annotations

import contextlib
import sys
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._cli import Benchmark, flag
from benchmarks._report import RESULTS_DIR, Steps, count, median, rounded, sizes
from benchmarks._run import Run, new_settings, worker_run
from benchmarks._targets import small_group_checks
from benchmarks.apps import overhead as app
from benchmarks.apps.common import App
from local_redis import RedisProvider

APP = "benchmarks.apps.overhead"
#: The sides, in the first round's order.
SIDES = ("plain", "recipe", "library")
#: Per group and side; the continuation's latency only where there is one.
MEASURES = (
    "wall_ms",
    "first_member_ms",
    "last_to_continuation_ms",
    "worker_cpu_us_per_member",
)
LEGEND = (
    "small groups: N no-op members as plain tasks, as the seed's recipe and as"
    " a library group, one worker a side, groups alternated; wall: the kick to"
    " the last task's start, over the plain run of the same round; first: the"
    " kick to the first member's start; continuation: the last member's end to"
    " the continuation's start; CPU: the worker's per member."
)


@dataclass(frozen=True)
class Options:
    """What to run; the defaults are ``make bench``'s."""

    sizes: tuple[int, ...] = flag((20, 200, 2000), "group sizes N")
    rounds: int = flag(11, "timed rounds per size (each: one group per side)")
    max_async_tasks: int = flag(100)
    #: Seconds one group may take before it counts as stuck.
    timeout: float = 120.0
    results_dir: Path = RESULTS_DIR

    @property
    def steps(self) -> int:
        """Rounds (the warm-up's included), for the progress bar."""
        return (self.rounds + 1) * len(self.sizes)


async def one_group(
    run: Run, tasks: App, side: str, n: int, *, timeout: float
) -> dict[str, float | None]:
    """Kick one group of ``n`` the ``side`` way, wait until drained; its measures."""
    cpu = CpuMarks(run, tasks, timeout)
    await cpu.mark("a")
    await cpu.mark("b")
    kicked = time.time()
    if side == "library":
        await app.kick_group(tasks, n, measure=True, memory=False)
        run.entries += n + 1
    else:
        group_id = uuid.uuid4().hex[:8]
        async with tasks.broker.burst():  # type: ignore[attr-defined]
            for index in range(n):
                if side == "recipe":
                    await tasks.recipe_member.kiq(group_id, index, n)
                else:
                    await tasks.noop.kiq(index)
        run.entries += n + 1 if side == "recipe" else n
    await run.drain(timeout, f"small_groups {side} n={n}")
    await cpu.mark("c")
    if side == "plain":  # no continuation: the worker writes the notes when asked
        await tasks.notes.kiq()
        run.entries += 1
        await run.drain(timeout, "small_groups plain notes")
    notes = await run.record("then", clear=True)
    end = notes["last_end"] if side == "plain" else notes["then_start"]
    return {
        "wall_ms": (end - kicked) * 1000,
        "first_member_ms": (notes["first_start"] - kicked) * 1000,
        "last_to_continuation_ms": (
            None
            if side == "plain"
            else (notes["then_start"] - notes["last_end"]) * 1000
        ),
        "worker_cpu_us_per_member": await cpu.used() / n * 1e6,
    }


class CpuMarks:
    """The worker's CPU over a group, by marks it writes (``cpu_mark`` tasks).

    Marks a, b, then the group, then c: the CPU between b and c, less that
    between a and b (two marks with nothing between: what the marks cost).
    """

    def __init__(self, run: Run, tasks: App, timeout: float) -> None:
        self.run, self.tasks, self.timeout = run, tasks, timeout

    async def mark(self, name: str) -> None:
        """Have the worker note its CPU as ``name``, and wait until it has."""
        await self.tasks.cpu_mark.kiq(name)
        self.run.entries += 1
        await self.run.drain(self.timeout, f"cpu mark {name}")

    async def used(self) -> float:
        """CPU seconds of the group (its span less the marks' own)."""
        marks = await self.run.record("cpu", clear=True)
        return (marks["c"] - marks["b"]) - (marks["b"] - marks["a"])


def summarize(n: int, samples: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """One size's medians per side, and the ratios of the rounds' pairs."""
    row: dict[str, Any] = {"n": n, "rounds": len(samples["plain"])}
    for side in SIDES:
        taken = samples[side]
        measured: dict[str, Any] = {}
        for name in MEASURES:
            values = [s[name] for s in taken if s[name] is not None]
            measured[name] = round(median(values), 3) if values else None
        measured["samples"] = {
            name: rounded(s[name] for s in taken)
            for name in MEASURES
            if all(s[name] is not None for s in taken)
        }
        if side != "plain":
            ratios = [
                mine["wall_ms"] / plain["wall_ms"]
                for mine, plain in zip(taken, samples["plain"], strict=True)
            ]
            measured["wall_ratio"] = round(median(ratios), 3)
            measured["samples"]["wall_ratio"] = rounded(ratios)
            mine_cpu = measured["worker_cpu_us_per_member"]
            plain_cpu = _median_cpu(samples["plain"])
            measured["cpu_ratio"] = (
                round(mine_cpu / plain_cpu, 3) if mine_cpu and plain_cpu else None
            )
        row[side] = measured
    return row


def _median_cpu(taken: Sequence[dict[str, Any]]) -> float | None:
    values = [s["worker_cpu_us_per_member"] for s in taken]
    return median(values) if all(v is not None for v in values) else None


async def run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Every size, the sides' groups alternated; the JSON document."""
    async with contextlib.AsyncExitStack() as stack:
        runs: dict[str, tuple[Run, App]] = {}
        for side in SIDES:
            fanin = provider.url if side == "library" else ""
            settings = new_settings(provider.url, "small", fanin_url=fanin)
            tasks = app.build(settings, burst=side != "library")
            runs[side] = (
                await stack.enter_async_context(
                    worker_run(
                        APP,
                        tasks.broker,
                        settings,
                        max_async_tasks=options.max_async_tasks,
                        results_dir=options.results_dir,
                        label=f"small-{side}",
                    )
                ),
                tasks,
            )
        rows = []
        for n in options.sizes:
            samples: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
            for round_ in range(options.rounds + 1):
                steps.now(f"n={n:,}, round {round_}/{options.rounds}")
                turn = round_ % len(SIDES)
                for side in SIDES[turn:] + SIDES[:turn]:
                    measured = await one_group(
                        *runs[side], side, n, timeout=options.timeout
                    )
                    if round_:  # the first round warms every worker up
                        samples[side].append(measured)
                steps.advance()
            rows.append(summarize(n, samples))
    steps.finish()
    return {
        "runs": rows,
        "rounds": options.rounds,
        "max_async_tasks": options.max_async_tasks,
        "redis": provider.kind,
    }


def describe(options: Options) -> str:
    """What ran: "small groups at N = 20, 200 and 2,000, 11 rounds"."""
    return (
        f"small groups at N = {sizes(options.sizes)}, {count(options.rounds, 'round')}"
    )


BENCHMARK = Benchmark(
    "small_groups",
    __doc__,
    run,
    Options(),
    small_group_checks,
    LEGEND,
    quick={"sizes": (20, 200), "rounds": 3},
    describe=describe,
)

if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
