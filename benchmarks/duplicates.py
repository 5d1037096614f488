"""Fan-in by counter against fan-in by set, with children delivered twice.

100 albums of 5 children through a real worker; a seeded 10% of the children are
delivered twice (the very same message sent again, as at-least-once delivery
does). Children take a seeded random time, so a duplicate can finish before the
last distinct child. The counter side is the naive fan-in (INCR reaches 5, kick
the continuation); the set side is the library's group. Both continuations check
at their start whether every distinct child had finished.

    python -m benchmarks.duplicates [--seed 7] [--dup-rate 0.1] [--json PATH]
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from taskiq import TaskiqMessage

from benchmarks._cli import Benchmark, flag
from benchmarks._report import RESULTS_DIR, Steps, console
from benchmarks._run import Run, new_settings, worker_run
from benchmarks._targets import duplicates_checks
from benchmarks.apps import duplicates as app
from benchmarks.apps.common import App
from local_redis import (
    DuplicatingMiddleware,
    RedisProvider,
    stream_drained,
    wait_until,
)
from taskiq_fanin import Signature, group

APP = "benchmarks.apps.duplicates"
SIDES = ("counter", "set")
#: What the short names in the summary stand for.
LEGEND = (
    "duplicates: set = the library's group; counter = each child INCRs and"
    " the one that reads 5 kicks the continuation."
)


@dataclass(frozen=True)
class Options:
    """What to run; the defaults are ``make bench``'s."""

    albums: int = flag(100)
    seed: int = flag(7)
    dup_rate: float = flag(0.1)
    #: Range of a child's work, in seconds (seeded uniform).
    min_seconds: float = 0.01
    max_seconds: float = 0.1
    max_async_tasks: int = 100
    #: Albums kicked together; the next wave waits until this one settled.
    wave: int = 10
    #: Seconds after a wave's last kick by which its groups must have finalised.
    deadline: float = 60.0
    results_dir: Path = RESULTS_DIR

    @property
    def steps(self) -> int:
        """Runs, for the progress bar."""
        return len(SIDES)


@dataclass(frozen=True)
class Child:
    """One planned child: its album, index, work time, and whether it repeats."""

    album: int
    image: int
    seconds: float
    twice: bool


def expected_counter_early(children: Sequence[Child]) -> int:
    """Albums a counter fires early for, if each delivery took exactly its time.

    The counter reaches five at the fifth completion; that comes before the
    slowest distinct child whenever any other child of the album runs twice.
    """
    by_album: dict[int, list[Child]] = {}
    for child in children:
        by_album.setdefault(child.album, []).append(child)
    early = 0
    for members in by_album.values():
        slowest = max(members, key=lambda c: c.seconds)
        early += any(c.twice and c is not slowest for c in members)
    return early


def plan(options: Options) -> list[Child]:
    """The seeded children both sides run, in kick order."""
    rng = random.Random(options.seed)
    children = []
    for album in range(options.albums):
        for image in range(app.IMAGES):
            seconds = round(rng.uniform(options.min_seconds, options.max_seconds), 4)
            children.append(
                Child(album, image, seconds, rng.random() < options.dup_rate)
            )
    return children


def duplicating(children: Sequence[Child]) -> DuplicatingMiddleware:
    """At-least-once delivery, simulated: the chosen children are sent twice.

    After a chosen child's message is sent, the very same message (same task id,
    labels and arguments) is sent again.
    """
    chosen = {(c.album, c.image) for c in children if c.twice}
    names = {"bench.dup.counter_child", "bench.dup.set_child"}

    def choose(message: TaskiqMessage) -> bool:
        args = message.args
        return (
            message.task_name in names
            and len(args) >= 2
            and (int(args[0]), int(args[1])) in chosen
        )

    return DuplicatingMiddleware(choose)


@dataclass
class SideResult:
    """What one side did: fired early, fired twice, never fired, deliveries."""

    early: int
    double: int
    never: int
    deliveries: int
    fires: dict[int, int] = field(default_factory=dict)


async def _kick_album(tasks: App, side: str, album: int, members: list[Child]) -> None:
    if side == "counter":
        for c in members:
            await tasks.counter_child.kiq(c.album, c.image, c.seconds)
    else:
        signatures = [
            Signature.of(tasks.set_child, c.album, c.image, c.seconds) for c in members
        ]
        await group(signatures, then=Signature.of(tasks.set_publish, album)).kiq(
            tasks.broker
        )


async def one_side(
    provider: RedisProvider, options: Options, side: str, children: list[Child]
) -> SideResult:
    """Run every album the ``side`` way and read what the continuations saw.

    Albums go in waves that fit the worker's slots: with a backlog, a
    continuation would start only after everything queued before it, long after
    the slowest child, and no fan-in could fire early however wrong it is.
    """
    settings = new_settings(
        provider.url, "dup", fanin_url=provider.url if side == "set" else ""
    )
    duplicator = duplicating(children)
    tasks = app.build(settings, duplicator)
    by_album: dict[int, list[Child]] = {}
    for child in children:
        by_album.setdefault(child.album, []).append(child)
    albums = sorted(by_album)
    async with worker_run(
        APP,
        tasks.broker,
        settings,
        max_async_tasks=options.max_async_tasks,
        results_dir=options.results_dir,
        label=f"duplicates-{side}",
    ) as run:
        sent = 0
        for first in range(0, len(albums), options.wave):
            for album in albums[first : first + options.wave]:
                await _kick_album(tasks, side, album, by_album[album])
                sent += len(by_album[album])
            if not await _settle(
                run, sent + len(duplicator.duplicated), options.deadline
            ):
                break  # what never finalised is counted below
        return await _read(run, options, sent + len(duplicator.duplicated))


async def _settle(run: Run, deliveries: int, timeout: float) -> bool:
    """Wait until every delivery so far has run, and what they kicked too."""

    async def settled() -> bool:
        ran = int(await run.client.get(run.settings.record("deliveries")) or 0)
        # Every delivery started; once the stream is drained too, every
        # continuation those deliveries kicked has run as well.
        return ran >= deliveries and await stream_drained(
            run.client, run.settings.queue, run.entries + deliveries
        )

    return await wait_until(settled, timeout=timeout, check=run.worker.check_alive)


async def _read(run: Run, options: Options, deliveries: int) -> SideResult:
    rec = run.settings.record
    fires = {
        int(album): int(count)
        for album, count in (await run.client.hgetall(rec("fires"))).items()
    }
    early = await run.client.scard(rec("early"))
    ran = int(await run.client.get(rec("deliveries")) or 0)
    if ran != deliveries:
        console.print(f"[yellow]{ran} deliveries ran of {deliveries} sent[/]")
    return SideResult(
        early=early,
        double=sum(1 for count in fires.values() if count > 1),
        never=options.albums - len(fires),
        deliveries=ran,
        fires=fires,
    )


async def run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Both sides on the same seeded children; the JSON document."""
    children = plan(options)
    results: dict[str, SideResult] = {}
    for side in SIDES:
        steps.now(f"{side} fan-in, {options.albums} albums")
        results[side] = await one_side(provider, options, side, children)
        steps.advance()
    steps.finish()
    duplicated = sum(1 for c in children if c.twice)
    return {
        "albums": options.albums,
        "children": len(children),
        "deliveries": len(children) + duplicated,
        **{
            side: {
                "early": r.early,
                "double": r.double,
                "never": r.never,
                "deliveries_run": r.deliveries,
            }
            for side, r in results.items()
        },
        "seed": options.seed,
        "dup_rate": options.dup_rate,
        "duplicated_children": duplicated,
        "albums_with_a_duplicate": len({c.album for c in children if c.twice}),
        "expected_counter_early": expected_counter_early(children),
        "child_seconds": [options.min_seconds, options.max_seconds],
        "max_async_tasks": options.max_async_tasks,
        "albums_per_wave": options.wave,
        "redis": provider.kind,
    }


BENCHMARK = Benchmark(
    "duplicates",
    __doc__,
    run,
    Options(),
    duplicates_checks,
    LEGEND,
    quick={"albums": 40},
    describe=lambda options: f"duplicates {options.albums} albums",
)

if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
