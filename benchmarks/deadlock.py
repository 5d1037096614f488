"""Waiting parents deadlock a bounded worker; the library's fan-in does not.

Ten albums of five 200 ms resizes on one ``taskiq worker`` with 10 and with 20
slots, three ways: parents that await their children's results, the library's
``@group_task`` with a continuation, and a baseline of the same fifty children
with no parent at all; for reference, parents that kick their children with
taskiq alone and end (the hop any parent costs, with nothing after it: the
fan-in's target is measured against it). Each run is timed from the first kick
to the last album finished (baseline and reference: the last child); the median
of the repeats is reported.

    python -m benchmarks.deadlock [--repeats 5] [--wait-timeout 5] [--json PATH]
"""

from __future__ import annotations

import asyncio
import collections
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._cli import Benchmark, flag
from benchmarks._report import RESULTS_DIR, Steps, count, median, rounded
from benchmarks._run import Run, new_settings, worker_run
from benchmarks._targets import deadlock_checks
from benchmarks.apps import deadlock as app
from benchmarks.apps.common import App, BurstBroker
from local_redis import RedisProvider, wait_until

APP = "benchmarks.apps.deadlock"
PATTERNS = ("baseline", "fanin", "waiting")
#: Run beside them for reference, reported apart (``reference_runs``): parents
#: that kick their children with taskiq alone and end, with nothing run after.
REFERENCE_PATTERNS = ("parent",)
#: Patterns whose time ends with the last resize (no album step at the end).
CHILDREN_ONLY = ("baseline", "parent")
#: What the short names in the summary stand for.
LEGEND = (
    "deadlock: waiting = parents await their children; fanin = @group_task;"
    " parent = parents that only kick their children (the hop any parent"
    " costs); baseline = the children alone. Seconds: from the first kick to"
    " the last album (none finished: to the last parent giving up). Waiting"
    " parents run with no guard (no middleware); once more with the"
    " middleware's waiting_guard on, each is refused at once."
)
#: Seconds the untimed warm-up burst may take.
WARMUP_TIMEOUT = 60.0


@dataclass(frozen=True)
class Options:
    """What to run; the defaults are ``make bench``'s."""

    repeats: int = flag(5)
    #: The waiting parents' ``wait_result`` timeout (the seed used 30 s).
    wait_timeout: float = flag(
        5.0, "the waiting parents' wait_result timeout in seconds (seed: 30)"
    )
    slots: tuple[int, ...] = flag((10, 20))
    albums: int = 10
    #: Seconds a fan-in or baseline run may take before it counts as stuck.
    timeout: float = 60.0
    results_dir: Path = RESULTS_DIR

    @property
    def steps(self) -> int:
        """Runs, for the progress bar."""
        return len(PATTERNS + REFERENCE_PATTERNS) * len(self.slots) * self.repeats + 1

    @property
    def children(self) -> int:
        """Resize jobs in one run."""
        return self.albums * app.IMAGES


def ideal_seconds(children: int, slots: int) -> float:
    """The bound the slots allow: full waves of 200 ms resizes."""
    return round(math.ceil(children / slots) * app.RESIZE_SECONDS, 4)


@dataclass(frozen=True)
class Outcome:
    """One run: albums finished, and seconds from the first kick."""

    finished: int
    seconds: float
    gave_up: int
    #: Seconds from the first kick until the first resize began (its end minus
    #: its 200 ms) and until the last resize ended: where the time went.
    first_child_started: float | None = None
    last_child_finished: float | None = None


#: The task each album's parent is, by pattern (baseline: no parent).
PARENTS = {"waiting": "album_waiting", "fanin": "make_album", "parent": "album_parent"}


async def _kick(tasks: App, pattern: str, albums: int) -> None:
    """Kick the whole burst in one transaction: a burst of parents arriving.

    Kicked one by one, the first parents' children could reach the stream ahead
    of the last parents and take slots they would otherwise never get, which
    makes the deadlock (and every timing) depend on how fast the worker reacts.
    """
    broker = tasks.broker
    assert isinstance(broker, BurstBroker)
    if pattern in PARENTS:
        kicks = [getattr(tasks, PARENTS[pattern]).kiq(a) for a in range(albums)]
    else:
        images = range(app.IMAGES)
        kicks = [tasks.resize.kiq(a, i) for a in range(albums) for i in images]
    async with broker.burst():
        await asyncio.gather(*kicks)


async def _outcome(run: Run, pattern: str, albums: int, started: float) -> Outcome:
    """Read the stamps the tasks left and turn them into an outcome."""
    children = await run.record("children")
    gave_up: dict[str, float] = {}
    if pattern in CHILDREN_ONLY:
        per_album = collections.Counter(key.split(":")[0] for key in children)
        finished = sum(1 for n in per_album.values() if n == app.IMAGES)
        ends = list(children.values())
    else:
        done = await run.record("albums")
        gave_up = await run.record("gave_up")
        finished = len(done)
        # With no album finished, the run lasted until the last parent gave up.
        ends = list(done.values()) or list(gave_up.values())
    seconds = (max(ends) - started) if ends else time.time() - started
    child_ends = [end - started for end in children.values()]
    if not child_ends:
        return Outcome(finished, seconds, len(gave_up))
    first = min(child_ends) - app.RESIZE_SECONDS
    return Outcome(finished, seconds, len(gave_up), first, max(child_ends))


#: Stream entries one album adds: parent, children and continuation, as used.
ENTRIES_PER_ALBUM = {
    "baseline": app.IMAGES,
    "fanin": 1 + app.IMAGES + 1,
    "waiting": 1 + app.IMAGES,
    "parent": 1 + app.IMAGES,
}
_RECORDS = ("albums", "gave_up", "children")


def warmup_albums(pattern: str, albums: int, slots: int) -> int:
    """Albums in the untimed warm-up burst: all of them, unless that deadlocks.

    Waiting parents get only as many albums as fit beside their children.
    """
    if pattern == "waiting":
        return max(1, min(albums, slots // (1 + app.IMAGES)))
    return albums


async def warm_up(run: Run, tasks: App, pattern: str, albums: int) -> None:
    """Run one untimed burst in the same worker, then forget its records.

    A fresh worker opens its Redis connections on first use; a worker that has
    been running a while has them. Without this, the first burst of every run
    would pay for connecting (a few round trips per connection), and the
    patterns that open more connections at once would pay more.
    """
    await _kick(tasks, pattern, albums)
    run.entries += albums * ENTRIES_PER_ALBUM[pattern]
    await run.drain(WARMUP_TIMEOUT, f"deadlock warm-up ({pattern})")
    await run.client.delete(*(run.settings.record(name) for name in _RECORDS))


async def one_run(
    provider: RedisProvider, options: Options, pattern: str, slots: int, label: str
) -> Outcome:
    """Kick the albums the ``pattern`` way on a worker with ``slots`` slots."""
    settings = new_settings(
        provider.url,
        "dl",
        fanin_url=provider.url if pattern == "fanin" else "",
        results=pattern == "waiting",
        wait_timeout=options.wait_timeout,
    )
    tasks = app.build(settings, burst=True)
    async with worker_run(
        APP,
        tasks.broker,
        settings,
        max_async_tasks=slots,
        results_dir=options.results_dir,
        label=f"deadlock-{label}",
    ) as run:
        albums = options.albums
        await warm_up(run, tasks, pattern, warmup_albums(pattern, albums, slots))

        alone = pattern in CHILDREN_ONLY
        records = ("children",) if alone else ("albums", "gave_up")

        async def over() -> bool:
            ended = [await run.client.hlen(settings.record(r)) for r in records]
            return sum(ended) >= (options.children if alone else albums)

        # Parents give up after a wait per child; the others have a deadline.
        limit = (
            options.wait_timeout * app.IMAGES + options.timeout
            if pattern == "waiting"
            else options.timeout
        )
        started = time.time()
        await _kick(tasks, pattern, albums)
        await wait_until(over, timeout=limit, check=run.worker.check_alive)
        return await _outcome(run, pattern, albums, started)


async def guarded_run(provider: RedisProvider, options: Options) -> dict[str, Any]:
    """The waiting parents once more, on a worker with the middleware's guard on.

    ``waiting_guard="raise"`` (the default): each parent's ``wait_result()``
    raises ``WaitingInsideTaskError`` at once, and its children run on; the
    runs above are the pattern with no guard (no middleware on their worker).
    """
    slots = min(options.slots)
    settings = new_settings(
        provider.url, "dlg", fanin_url=provider.url, results=True, waiting_guard="raise"
    )
    tasks = app.build(settings, burst=True)
    async with worker_run(
        APP,
        tasks.broker,
        settings,
        max_async_tasks=slots,
        results_dir=options.results_dir,
        label="deadlock-guarded",
    ) as run:
        albums = options.albums

        async def refused() -> bool:
            return await run.client.hlen(settings.record("refused")) >= albums

        started = time.time()
        await _kick(tasks, "waiting", albums)
        run.entries += albums * ENTRIES_PER_ALBUM["waiting"]
        await wait_until(refused, timeout=options.timeout, check=run.worker.check_alive)
        stamps = await run.record("refused")
        await run.drain(options.timeout, "deadlock, guarded")
    errors = sorted({key.split(":")[1] for key in stamps})
    return {
        "slots": slots,
        "albums": albums,
        "refused": len(stamps),
        "errors": errors,
        "seconds_to_last_refusal": round(max(stamps.values()) - started, 4),
    }


def _phases(results: Sequence[Outcome]) -> dict[str, float | None]:
    """Medians of when the first resize began and the last one ended."""
    phases: dict[str, float | None] = {}
    for name in ("first_child_started", "last_child_finished"):
        values = [getattr(o, name) for o in results if getattr(o, name) is not None]
        phases[name] = median(values) if values else None
    return phases


def summarize(
    options: Options, outcomes: dict[tuple[str, int], list[Outcome]]
) -> dict[str, Any]:
    """The JSON document: medians of the repeats, and what they were."""
    runs: list[dict[str, Any]] = []
    reference_runs: list[dict[str, Any]] = []
    for (pattern, slots), results in outcomes.items():
        finished = [o.finished for o in results]
        (reference_runs if pattern in REFERENCE_PATTERNS else runs).append(
            {
                "pattern": pattern,
                "slots": slots,
                "albums_finished": int(sorted(finished)[(len(finished) - 1) // 2]),
                "albums": options.albums,
                "seconds": median([o.seconds for o in results]),
                "samples": {
                    "seconds": rounded(o.seconds for o in results),
                    "albums_finished": finished,
                    "parents_gave_up": [o.gave_up for o in results],
                },
                "phases": _phases(results),
            }
        )
    return {
        "runs": runs,
        "reference_runs": reference_runs,
        "ideal_seconds": {
            str(slots): ideal_seconds(options.children, slots)
            for slots in options.slots
        },
        "repeats": options.repeats,
        "statistic": "median of the repeats (samples lists every repeat)",
        "wait_timeout": options.wait_timeout,
        "resize_seconds": app.RESIZE_SECONDS,
        "images_per_album": app.IMAGES,
    }


async def run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Every pattern at every slot count, repeats interleaved; the JSON document."""
    every = [(p, s) for s in options.slots for p in PATTERNS + REFERENCE_PATTERNS]
    outcomes: dict[tuple[str, int], list[Outcome]] = {key: [] for key in every}
    for repeat in range(1, options.repeats + 1):
        for pattern, slots in every:
            steps.now(f"{pattern}, {slots} slots, run {repeat}/{options.repeats}")
            label = f"{pattern}-{slots}-{repeat}"
            outcome = await one_run(provider, options, pattern, slots, label)
            outcomes[pattern, slots].append(outcome)
            steps.advance()
    steps.now("waiting parents, the middleware's guard on")
    guarded = await guarded_run(provider, options)
    steps.advance()
    steps.finish()
    return {**summarize(options, outcomes), "guarded": guarded, "redis": provider.kind}


BENCHMARK = Benchmark(
    "deadlock",
    __doc__,
    run,
    Options(),
    deadlock_checks,
    LEGEND,
    quick={"repeats": 1, "wait_timeout": 2.0},
    describe=lambda options: f"deadlock {count(options.repeats, 'repeat')}",
)

if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
