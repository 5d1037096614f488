"""What a group costs as it grows: N no-op members, windowed or not, on a real worker.

For each N (1,000, 10,000 and 100,000) a worker of its own runs an untimed
warm-up group, then timed groups (the median of up to 5, fewer for big N):
plan time (the ``kiq`` call), the worker's CPU per member, the memory of the
group's keys per member at its peak (read by the continuation) and after it
completed, the slowest single command the server ran (SLOWLOG), the kick to the
first member's start, the last member's end to the continuation's start, and
the continuation's message (its stream entry). An untimed group of the same N
under MONITOR then counts client round trips and commands Redis ran on the
fan-in's keys. Every N runs with and without ``max_in_flight`` (skipped, with
the reason, where GroupOptions has no such option). At N = 20 the two
latencies are set beside the seed's hand-written recipe (SADD, SCARD, SET NX)
on the same harness: medians of several groups.

    python -m benchmarks.scale [--sizes 1000,10000,100000] [--window 100] [--json PATH]
"""

from __future__ import annotations

import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._cli import Benchmark, flag
from benchmarks._probes import SLOWER_THAN_US, SlowLog, used
from benchmarks._report import RESULTS_DIR, Steps, count, median, rounded, sizes
from benchmarks._run import Run, new_settings, worker_run
from benchmarks._targets import scale_checks
from benchmarks.apps import overhead as app
from benchmarks.apps.common import App
from local_redis import MonitorTap, RedisProvider
from taskiq_fanin.models import GroupOptions

APP = "benchmarks.apps.overhead"
#: The group option of the windowed runs; GroupOptions may not have it yet.
WINDOW_OPTION = "max_in_flight"
#: What each run measures besides its N and window (``None``: not measured).
MEASURES = (
    "seconds", "plan_seconds", "worker_cpu_us_per_member",
    "round_trips_per_member", "redis_commands_per_member",
    "peak_bytes_per_member", "after_bytes_per_member",
    "longest_redis_command_ms", "longest_redis_command",
    "last_member_to_continuation_ms", "first_member_start_ms",
    "continuation_message_bytes",
)  # fmt: skip
LATENCIES = ("first_member_start_ms", "last_member_to_continuation_ms")
LEGEND = (
    "scale: a group of N no-op members on one worker; all: every member kicked"
    " at once, K: max_in_flight; x: the largest N's cost over the smallest N's;"
    " a/b/c: each N, smallest first; per member: worker CPU and the group's"
    " keys, counts under MONITOR; continuation: the last member's end to its"
    " start; first member: the kick to its start; recipe: the seed's SADD/SET NX."
)


@dataclass(frozen=True)
class Options:
    """What to run; the defaults are ``make bench``'s."""

    sizes: tuple[int, ...] = flag((1000, 10000, 100000), "group sizes N")
    window: int = flag(100, "max_in_flight of the windowed runs (0: none)")
    count_max: int = flag(
        100_000, "count commands with MONITOR up to this N (0: never)"
    )
    repeats: int = flag(5, "timed groups per N at most (fewer for big N)")
    recipe_n: int = flag(20, "group size beside the seed's recipe (0: skip)")
    recipe_repeats: int = flag(5, "groups per side beside the recipe")
    max_async_tasks: int = flag(100)
    #: Members of the untimed group that warms each worker up.
    warmup: int = 200
    #: Members the timed groups of one N have at most in all (at least one group).
    timed_members: int = 30_000
    #: Seconds one group may take before it counts as stuck.
    timeout: float = 1800.0
    results_dir: Path = RESULTS_DIR

    @property
    def windows(self) -> tuple[int, ...]:
        """0 (every member kicked at once), then the window, if any."""
        return (0, self.window) if self.window else (0,)

    def timed_groups(self, n: int) -> int:
        """Timed groups of ``n`` members: ``repeats``, as many as the budget allows."""
        return max(1, min(self.repeats, self.timed_members // n))

    @property
    def steps(self) -> int:
        """Runs, for the progress bar."""
        return len(self.sizes) * len(self.windows) + (2 if self.recipe_n else 0)


def window_missing() -> str | None:
    """Why the windowed runs cannot run here, or ``None``."""
    if WINDOW_OPTION in GroupOptions.model_fields:
        return None
    return f"GroupOptions has no {WINDOW_OPTION} here (windowed fan-out not built)"


async def _kick(
    tasks: App, n: int, window: int, *, measure: bool
) -> tuple[str, float, float]:
    """A group of ``n`` no-op members, windowed or not (``app.kick_group``)."""
    options: dict[str, Any] = {WINDOW_OPTION: window} if window else {}
    return await app.kick_group(tasks, n, measure=measure, **options)


def _latencies(notes: dict[str, float], kicked: float) -> dict[str, float]:
    ms = {
        "first_member_start_ms": notes["first_start"] - kicked,
        "last_member_to_continuation_ms": notes["then_start"] - notes["last_end"],
    }
    return {name: round(seconds * 1000, 3) for name, seconds in ms.items()}


async def _message_bytes(run: Run) -> int | None:
    """The continuation's message: the stream's last entry, if it is that."""
    entries = await run.client.xrevrange(run.settings.queue, count=1)
    fields = entries[0][1] if entries else None
    data = (fields or {}).get(b"data", b"")
    return len(data) if b"bench.overhead.then" in data else None


def _per_member(value: float | None, n: int, scale: float = 1.0) -> float | None:
    return None if value is None else round(value * scale / n, 4)


async def _timed(
    run: Run, tasks: App, options: Options, n: int, window: int
) -> dict[str, Any]:
    """The timed group: every measure but the counts."""
    async with SlowLog(run.client) as slow:
        cpu_before = run.worker.cpu_seconds()
        group_id, kicked, plan = await _kick(tasks, n, window, measure=True)
        run.entries += n + 1
        await run.drain(options.timeout, f"scale n={n}")
        seconds = time.time() - kicked
        cpu_after = run.worker.cpu_seconds()
        longest = await slow.longest()
    notes = await run.record("then", clear=True)
    measured = "bytes" in notes  # no MEMORY USAGE on fakeredis
    after = await app.group_memory(run.settings, group_id) if measured else {}
    return {
        "seconds": round(seconds, 3),
        "plan_seconds": round(plan, 4),
        "worker_cpu_us_per_member": _per_member(used(cpu_before, cpu_after), n, 1e6),
        "peak_bytes_per_member": _per_member(notes.get("bytes"), n),
        "after_bytes_per_member": _per_member(sum(after.values()), n)
        if measured
        else None,
        "peak_bytes_by_key": {
            name.removeprefix("bytes:"): int(size)
            for name, size in notes.items()
            if name.startswith("bytes:")
        },
        "after_bytes_by_key": after,
        "longest_redis_command_ms": longest and longest["ms"],
        "longest_redis_command": longest,
        **_latencies(notes, kicked),
        "continuation_message_bytes": await _message_bytes(run),
    }


async def _counted(
    run: Run, tasks: App, options: Options, n: int, window: int
) -> dict[str, Any]:
    """An untimed group under MONITOR: the fan-in's round trips and commands.

    Client commands on the fan-in's keys are its round trips (a script call is
    one); the commands scripts ran are all the fan-in's (the broker runs none
    but its lock's, counted as polling).
    """
    async with MonitorTap(run.settings.redis_url, run.settings.fanin_prefix) as tap:
        await _kick(tasks, n, window, measure=False)
        run.entries += n + 1
        await run.drain(options.timeout, f"scale n={n}, counted")
        tally = await tap.stop()
    commands = tally.fanin_client + sum(tally.lua.values())
    return {
        "round_trips_per_member": _per_member(tally.fanin_client, n),
        "redis_commands_per_member": _per_member(commands, n),
    }


async def one_run(
    provider: RedisProvider, options: Options, n: int, window: int
) -> dict[str, Any]:
    """Warm-up, timed group and counted group of ``n`` on a worker of their own."""
    settings = new_settings(provider.url, "scale", fanin_url=provider.url)
    tasks = app.build(settings)
    label = f"scale-{n}-{'k' + str(window) if window else 'all'}"
    async with worker_run(
        APP,
        tasks.broker,
        settings,
        max_async_tasks=options.max_async_tasks,
        results_dir=options.results_dir,
        label=label,
    ) as run:
        warmup = min(n, options.warmup)
        await _kick(tasks, warmup, window, measure=False)
        run.entries += warmup + 1
        await run.drain(options.timeout, f"{label}: warm-up")
        timed = [
            await _timed(run, tasks, options, n, window)
            for _ in range(options.timed_groups(n))
        ]
        counts = dict.fromkeys(("round_trips_per_member", "redis_commands_per_member"))
        if provider.can_monitor and n <= options.count_max:
            counts = await _counted(run, tasks, options, n, window)
    return {**_medians(timed), **counts}


def _medians(timed: list[dict[str, Any]]) -> dict[str, Any]:
    """Each number's median over the timed groups, each group's kept (``samples``).

    The slowest command is each group's, their median; ``longest_redis_command``
    names the slowest of them all. The memory by key is the first group's.
    """
    numbers = [
        name for name, value in timed[0].items() if isinstance(value, float | int)
    ]
    row = {**timed[0], "groups": len(timed)}
    for name in numbers:
        values = [t[name] for t in timed]
        row[name] = None if None in values else median(values)
    # A group that logged nothing had nothing as slow as the log's threshold.
    slowest = [t["longest_redis_command_ms"] or 0.0 for t in timed]
    row["longest_redis_command_ms"] = median(slowest) or None
    logged = [t["longest_redis_command"] for t in timed if t["longest_redis_command"]]
    row["longest_redis_command"] = max(
        logged, key=lambda found: found["ms"] or 0, default=None
    )
    sampled = ("worker_cpu_us_per_member", "longest_redis_command_ms", *LATENCIES)
    row["samples"] = {name: [t[name] for t in timed] for name in sampled}
    return row


async def beside_recipe(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Groups of ``recipe_n`` as the library's and as the seed's recipe.

    One worker per side (the recipe's without the fan-in middleware); the first
    group of each warms it up, the medians are of the rest.
    """
    n, sides = options.recipe_n, {}
    for side in ("fanin", "recipe"):
        steps.now(f"N={n} beside the seed's recipe: {side}")
        fanin = provider.url if side == "fanin" else ""
        settings = new_settings(provider.url, "scale", fanin_url=fanin)
        tasks = app.build(settings)
        samples: list[dict[str, float]] = []
        async with worker_run(
            APP,
            tasks.broker,
            settings,
            max_async_tasks=options.max_async_tasks,
            results_dir=options.results_dir,
            label=f"scale-{side}-{n}",
        ) as run:
            for repeat in range(options.recipe_repeats + 1):
                if side == "fanin":
                    _, kicked, _ = await _kick(tasks, n, 0, measure=True)
                else:  # kicked one after the other, as the seed does
                    gid, kicked = uuid.uuid4().hex[:8], time.time()
                    for index in range(n):
                        await tasks.recipe_member.kiq(gid, index, n)
                run.entries += n + 1
                await run.drain(options.timeout, f"scale {side} n={n}")
                latencies = _latencies(await run.record("then", clear=True), kicked)
                samples += [latencies] if repeat else []
        sides[side] = {
            **{name: median([s[name] for s in samples]) for name in LATENCIES},
            "samples": {name: rounded(s[name] for s in samples) for name in LATENCIES},
        }
        steps.advance()
    return {"n": n, "repeats": options.recipe_repeats, **sides}


async def run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Every N, every window, then the recipe beside the library; the JSON document."""
    missing = window_missing()
    rows: list[dict[str, Any]] = []
    for n in options.sizes:
        for window in options.windows:
            row = {"n": n, "windowed": bool(window), "window": window or None}
            if window and missing:
                rows.append({**row, "skipped": missing, **dict.fromkeys(MEASURES)})
            else:
                steps.now(f"n={n:,}" + (f", max_in_flight={window}" if window else ""))
                measured = await one_run(provider, options, n, window)
                rows.append({**row, "skipped": None, **measured})
            steps.advance()
    recipe = await beside_recipe(provider, options, steps) if options.recipe_n else None
    steps.finish()
    return {
        "runs": rows,
        "recipe": recipe,
        "max_async_tasks": options.max_async_tasks,
        "slowlog_slower_than_ms": SLOWER_THAN_US / 1000,
        "redis": provider.kind,
    }


def describe(options: Options) -> str:
    """What ran: "scale at N = 1,000 and 10,000, max_in_flight=100 too; ..."."""
    window = f", max_in_flight={options.window} too" if options.window else ""
    groups = count(options.recipe_repeats, "group")
    recipe = f"; N = {options.recipe_n} beside the recipe, {groups} a side"
    text = f"scale at N = {sizes(options.sizes)}{window}"
    return text + (recipe if options.recipe_n else "")


BENCHMARK = Benchmark(
    "scale",
    __doc__,
    run,
    Options(),
    scale_checks,
    LEGEND,
    quick={"sizes": (1000,), "recipe_repeats": 3},
    describe=describe,
)

if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
