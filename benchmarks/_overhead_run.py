"""One run of the overhead benchmark, and its JSON rows from the samples and counts.

``one_run`` times one side (a group, or the same tasks kicked plainly) on a
worker of its own; ``summarize_size`` and ``command_costs`` turn the samples
and the MONITOR tallies into the rows ``overhead.json`` holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from benchmarks._probes import redis_cpu, used
from benchmarks._report import median, rounded
from benchmarks._run import new_settings, worker_run
from benchmarks.apps import overhead as app
from benchmarks.apps.common import App
from local_redis import MonitorTap, RedisProvider, Tally, commandstats_calls


class Options(Protocol):
    """What one run reads of a benchmark's options (``overhead.Options`` has
    them): this module does not import the benchmark that drives it."""

    @property
    def warmup(self) -> int: ...
    @property
    def kick_concurrency(self) -> int: ...
    @property
    def timeout(self) -> float: ...
    @property
    def durability(self) -> str: ...
    @property
    def max_async_tasks(self) -> int: ...
    @property
    def results_dir(self) -> Path: ...


APP = "benchmarks.apps.overhead"
#: Whose CPU time a sample reads, and what a tally splits its commands into.
CPU_PARTS = ("worker", "redis", "client")
TALLY_PARTS = ("client", "lua", "polling")
#: A tally's counts, by the names the JSON gives them.
COSTS = {"round_trips": "round_trips", "executed": "redis_commands"}


@dataclass
class Sample:
    """One timed run of one side."""

    side: str
    n: int
    seconds: float
    kick_seconds: float
    cpu: dict[str, float | None] = field(default_factory=dict)
    peak_bytes: int | None = None


async def _kick(
    tasks: App, side: str, n: int, *, concurrency: int, measure: bool
) -> int:
    """Kick ``n`` children the ``side`` way; returns the stream entries expected."""
    if side == "fanin":
        await app.kick_group(tasks, n, measure=measure)
        return n + 1
    limit = asyncio.Semaphore(concurrency)

    async def kick(index: int) -> None:
        async with limit:
            await tasks.noop.kiq(index)

    await asyncio.gather(*(kick(index) for index in range(n)))
    return n


async def one_run(
    provider: RedisProvider,
    options: Options,
    side: str,
    n: int,
    *,
    label: str,
    fanin_url: str | None = None,
    measure: bool = True,
    tap: bool = False,
    slots: int | None = None,
) -> tuple[Sample, dict[str, Tally]]:
    """Kick ``n`` children as ``side`` ('fanin' or 'plain') and wait for the drain.

    An untimed warm-up of the same side runs first in the same worker, so that
    neither side pays for opening connections. With ``tap``, MONITOR counts
    every command from the first timed kick to the drain.
    """
    fanin = fanin_url or provider.url
    settings = new_settings(
        provider.url,
        "ovh",
        fanin_url=fanin if side == "fanin" else "",
        durability=options.durability,
    )
    tasks = app.build(settings)
    async with (
        worker_run(
            APP,
            tasks.broker,
            settings,
            max_async_tasks=slots or options.max_async_tasks,
            results_dir=options.results_dir,
            label=f"overhead-{label}",
        ) as run,
        contextlib.AsyncExitStack() as stack,
    ):
        run.entries += await _kick(
            tasks,
            side,
            min(n, options.warmup),
            concurrency=options.kick_concurrency,
            measure=False,
        )
        await run.drain(options.timeout, f"overhead {label}: warm-up")
        urls = {"broker": provider.url, "fanin": fanin} if tap else {}
        taps = {
            role: await stack.enter_async_context(
                MonitorTap(url, settings.fanin_prefix)
            )
            for role, url in urls.items()
            if role == "broker" or url != provider.url
        }
        stats = {role: await commandstats_calls(t.url) for role, t in taps.items()}
        redis_before = await redis_cpu(run.client)
        worker_before = run.worker.cpu_seconds()
        client_before = time.process_time()
        started = time.perf_counter()
        run.entries += await _kick(
            tasks, side, n, concurrency=options.kick_concurrency, measure=measure
        )
        kicked = time.perf_counter()
        await run.drain(options.timeout, f"overhead {label}")
        seconds = time.perf_counter() - started
        cpu = {
            "worker": used(worker_before, run.worker.cpu_seconds()),
            "redis": used(redis_before, await redis_cpu(run.client)),
            "client": time.process_time() - client_before,
        }
        tallies = {role: await t.stop() for role, t in taps.items()}
        for role, tally in tallies.items():
            tally.commandstats = await commandstats_calls(taps[role].url) - stats[role]
        peak = None
        if side == "fanin" and measure:
            raw = await run.client.hget(settings.record("then"), "bytes")
            peak = int(raw) if raw is not None else None
    sample = Sample(side, n, seconds, kicked - started, cpu, peak)
    return sample, tallies


def _per_task_us(samples: Sequence[Sample], part: str) -> float | None:
    """Median CPU microseconds per child of one part, over the repeats."""
    per_child = []
    for sample in samples:
        seconds = sample.cpu.get(part)
        if seconds is None:
            return None
        per_child.append(seconds / sample.n * 1e6)
    return round(statistics.median(per_child), 1)


def summarize_size(n: int, samples: Sequence[Sample]) -> dict[str, Any]:
    """One JSON row: medians of the repeats, and what they were."""
    fanin = [s for s in samples if s.side == "fanin"]
    plain = [s for s in samples if s.side == "plain"]
    fanin_seconds = median([s.seconds for s in fanin])
    plain_seconds = median([s.seconds for s in plain])
    peaks = [s.peak_bytes for s in fanin if s.peak_bytes is not None]
    pair_ratios = [f.seconds / p.seconds for f, p in zip(fanin, plain, strict=True)]
    sides = {"fanin": fanin, "plain": plain}
    worker = {side: _per_task_us(runs, "worker") for side, runs in sides.items()}
    return {
        "n": n,
        "fanin_seconds": fanin_seconds,
        "plain_seconds": plain_seconds,
        "ratio": round(fanin_seconds / plain_seconds, 4),
        "pairs": len(pair_ratios),
        "pair_ratio_median": median(pair_ratios),
        "pair_ratio_range": rounded([min(pair_ratios), max(pair_ratios)]),
        "worker_cpu_ratio": round(worker["fanin"] / worker["plain"], 4)
        if worker["fanin"] is not None and worker["plain"]
        else None,
        "bytes_per_member": round(median(peaks) / n, 1) if peaks else None,
        "pair_ratios": rounded(pair_ratios),
        "samples": {
            f"{side}_{what}": rounded(getattr(s, what) for s in runs)
            for what in ("seconds", "kick_seconds")
            for side, runs in sides.items()
        },
        "cpu_us_per_child": {
            side: {part: _per_task_us(runs, part) for part in CPU_PARTS}
            for side, runs in sides.items()
        },
    }


def command_costs(
    tallies: dict[tuple[str, int], Tally],
    sizes: tuple[int, int],
    separate: bool,
    stats_check: dict[str, int],
) -> dict[str, Any]:
    small, large = sizes

    def delta(n: int, measure: str) -> int:
        fanin, plain = tallies["fanin", n], tallies["plain", n]
        return int(getattr(fanin, measure) - getattr(plain, measure))

    costs: dict[str, Any] = {}
    for measure, name in COSTS.items():
        per_child = (delta(large, measure) - delta(small, measure)) / (large - small)
        costs[f"{name}_per_child"] = round(per_child, 4)
        costs[f"{name}_per_group"] = round(delta(large, measure) - per_child * large, 2)
    script_inner = {
        n: sum(tallies["fanin", n].lua.values()) - sum(tallies["plain", n].lua.values())
        for n in sizes
    }
    return {
        "method": (
            "MONITOR on every server, untimed; per child = (group run - plain run) at "
            f"n={large} minus the same at n={small}, divided by {large - small}; "
            "per group = what is left. Stream polling (XREADGROUP, XAUTOCLAIM and its "
            "lock) is excluded: it runs per fetched batch and varies with timing."
        ),
        "sizes": list(sizes),
        "fanin_on_own_server": separate,
        **costs,
        "script_commands_per_child": round(
            (script_inner[large] - script_inner[small]) / (large - small), 4
        ),
        "commandstats_check": stats_check or None,
        "by_command": {
            f"{side}-{n}": {part: dict(getattr(t, part)) for part in TALLY_PARTS}
            for (side, n), t in tallies.items()
        },
    }
