"""What a group costs next to the same tasks kicked plainly.

N no-op children kicked as one library group with a continuation, beside the
same N kicked as plain tasks (a worker without the fan-in middleware), on the
same worker settings; A/B interleaved pairs, medians of the repeats. Each side
is timed from its first kick until its stream is drained (every entry delivered
and acknowledged, the continuation's included), and the worker's CPU time is
read over the same span: the target is on the worker's CPU per task, the wall
time ratio (the median of the pairs, with their spread) is reported. A separate
untimed pass counts the commands with MONITOR; the timed group runs also read
the group's memory at its peak, from the continuation.

    python -m benchmarks.overhead [--sizes 2000 20000] [--repeats 5] [--few-slots 1 10]
        [--json PATH]
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from benchmarks._overhead_rows import Sample, command_costs, summarize_size
from benchmarks._report import (
    RESULTS_DIR,
    Steps,
)
from benchmarks._run import Flag, new_settings, run_alone, worker_run
from benchmarks._targets import overhead_checks
from benchmarks.apps import overhead as app
from local_redis import MonitorTap, RedisProvider, Tally, commandstats_calls
from taskiq_fanin import Signature, group

APP = "benchmarks.apps.overhead"

#: Pairs the full run times per size: the wall time ratio is their median.
FULL_REPEATS = 5
#: What the short names in the summary stand for.
LEGEND = (
    "overhead: a group of N no-op members over N plain tasks; CPU: the"
    " worker's, per task; wall: the median of the A/B pairs (min-max);"
    " memory: Redis's, at the group's peak."
)
#: Wall time ratios of other fan-ins (the same N no-op members, against the
#: same N plain tasks), constants of ours: measured side by side, once, not by
#: this benchmark. The chart and benchmarks/README.md say so (PEERS_SOURCE).
PEERS = {
    "seed's SADD/SCARD/SET NX recipe": 1.24,
    "Celery 5.7 chord": 1.17,
    "taskiq-pipelines map": 2.54,
}
#: Where PEERS come from, shown beside them.
PEERS_SOURCE = (
    "measured side by side on a 2-core machine on 2026-11-29 (taskiq 0.13,"
    " Celery 5.7, taskiq-pipelines 0.1.4, real workers, N = 2,000)"
)


@dataclass(frozen=True)
class Options:
    """What to run; the defaults are ``make bench``'s."""

    sizes: tuple[int, ...] = (2000, 20000)
    #: A/B pairs per size.
    repeats: int = FULL_REPEATS
    max_async_tasks: int = 100
    #: Fewer slots, for one pair of runs each at the smallest size: a fan-in
    #: that holds its slots waiting for company shows here, not at 100.
    few_slots: tuple[int, ...] = (1, 10)
    #: Plain kicks in flight at once: the library's own dispatch default.
    kick_concurrency: int = 64
    #: Children in the untimed warm-up that precedes every timed run.
    warmup: int = 500
    #: Group size of the MONITOR counting pass (0 skips it).
    count_n: int = 2000
    #: Seconds one run may take before it counts as stuck.
    timeout: float = 600.0
    results_dir: Path = RESULTS_DIR

    @property
    def steps(self) -> int:
        """Runs, for the progress bar."""
        counting = 4 if self.count_n else 0
        few = 2 * len(self.few_slots)
        return 2 * self.repeats * len(self.sizes) + few + counting


async def _redis_cpu(client: Redis) -> float | None:
    """CPU seconds the Redis server has used (``None``: no INFO, as on fakeredis)."""
    try:
        info = await client.info("cpu")
    except ResponseError:
        return None
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _used(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


async def _kick(
    tasks: app.OverheadApp, side: str, n: int, *, concurrency: int, measure: bool
) -> int:
    """Kick ``n`` children the ``side`` way; returns the stream entries expected."""
    if side == "fanin":
        members = [Signature.of(tasks.noop, index) for index in range(n)]
        await group(members, then=Signature.of(tasks.then, measure)).kiq(tasks.broker)
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
        provider.url, "ovh", fanin_url=fanin if side == "fanin" else ""
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
        if not await run.wait_drained(options.timeout):
            msg = f"overhead {label}: warm-up not drained in {options.timeout:g}s"
            raise TimeoutError(msg)
        taps: dict[str, MonitorTap] = {}
        if tap:
            for role, url in (("broker", provider.url), ("fanin", fanin)):
                if role == "broker" or url != provider.url:
                    tap_ = MonitorTap(url, settings.fanin_prefix)
                    taps[role] = await stack.enter_async_context(tap_)
        stats_before = {
            role: await commandstats_calls(t.url) for role, t in taps.items()
        }
        redis_before = await _redis_cpu(run.client)
        worker_before = run.worker_cpu()
        client_before = time.process_time()
        started = time.perf_counter()
        run.entries += await _kick(
            tasks, side, n, concurrency=options.kick_concurrency, measure=measure
        )
        kicked = time.perf_counter()
        if not await run.wait_drained(options.timeout):
            msg = f"overhead {label}: not drained in {options.timeout:g}s"
            raise TimeoutError(msg)
        seconds = time.perf_counter() - started
        worker_after = run.worker_cpu()
        cpu = {
            "worker": _used(worker_before, worker_after),
            "redis": _used(redis_before, await _redis_cpu(run.client)),
            "client": time.process_time() - client_before,
        }
        tallies = {role: await t.stop() for role, t in taps.items()}
        for role, tally in tallies.items():
            tally.commandstats = (
                await commandstats_calls(taps[role].url) - stats_before[role]
            )
        peak = None
        if side == "fanin" and measure:
            raw = await run.client.hget(settings.record("memory"), "bytes")
            peak = int(raw) if raw is not None else None
    sample = Sample(side, n, seconds, kicked - started, cpu, peak)
    return sample, tallies


async def count_commands(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """The untimed MONITOR pass: per-completion and per-group command counts.

    Runs both sides at two group sizes; the difference between the sizes is the
    cost of one more child, and what is left is the group's fixed cost. The
    fan-in keeps its keys on a Redis of its own when one can be started.
    """
    sizes = (options.count_n // 2, options.count_n)
    with provider.second() as (fanin_url, separate):
        tallies: dict[tuple[str, int], Tally] = {}
        stats_check: dict[str, int] = {}
        for n in sizes:
            for side in ("plain", "fanin"):
                steps.now(f"counting pass: {side}, n={n}")
                _, by_role = await one_run(
                    provider,
                    options,
                    side,
                    n,
                    label=f"count-{side}-{n}",
                    fanin_url=fanin_url,
                    measure=False,
                    tap=True,
                )
                if separate and side == "fanin" and n == sizes[1]:
                    # Alone on its server, the fan-in's every command is counted
                    # by INFO commandstats too: the two counts must agree.
                    stats_check = {
                        "commandstats": by_role["fanin"].commandstats,
                        "monitor": by_role["fanin"].executed
                        + sum(by_role["fanin"].polling.values()),
                    }
                tallies[side, n] = sum(by_role.values(), Tally())
                steps.advance()
    return command_costs(tallies, sizes, separate, stats_check)


async def _few_slots(
    provider: RedisProvider, options: Options, steps: Steps
) -> list[dict[str, Any]]:
    """One pair of runs at the smallest size for each of ``options.few_slots``.

    With few slots, the time a member's outcome spends waiting for others of
    its group is time its slot does no work: these rows show it if it happens.
    """
    n = min(options.sizes)
    rows = []
    for slots in options.few_slots:
        samples = await _pair(
            provider,
            options,
            steps,
            n,
            step=f"{slots} slots",
            tag=f"s{slots}",
            slots=slots,
        )
        rows.append({"max_async_tasks": slots, **summarize_size(n, samples)})
    return rows


async def _pair(
    provider: RedisProvider,
    options: Options,
    steps: Steps,
    n: int,
    *,
    step: str,
    tag: str,
    slots: int | None = None,
) -> list[Sample]:
    """One plain run, then one fan-in run, of ``n`` children (A, then B)."""
    samples = []
    for side in ("plain", "fanin"):
        steps.now(f"n={n}, {side}, {step}")
        sample, _ = await one_run(
            provider, options, side, n, label=f"{side}-{n}-{tag}", slots=slots
        )
        samples.append(sample)
        steps.advance()
    return samples


async def run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Every size, A/B interleaved, then the counting pass; the JSON document."""
    rows: list[dict[str, Any]] = []
    for n in options.sizes:
        samples: list[Sample] = []
        for repeat in range(1, options.repeats + 1):
            samples += await _pair(
                provider,
                options,
                steps,
                n,
                step=f"run {repeat}/{options.repeats}",
                tag=str(repeat),
            )
        rows.append(summarize_size(n, samples))
    few_slots = await _few_slots(provider, options, steps)
    counts = (
        await count_commands(provider, options, steps)
        if options.count_n and provider.can_monitor
        else None
    )
    for row in rows:
        row["round_trips_per_child"] = (
            counts["round_trips_per_child"] if counts else None
        )
        row["redis_commands_per_child"] = (
            counts["redis_commands_per_child"] if counts else None
        )
        if counts:
            row["round_trips_per_child_amortized"] = round(
                counts["round_trips_per_child"]
                + counts["round_trips_per_group"] / row["n"],
                4,
            )
            row["redis_commands_per_child_amortized"] = round(
                counts["redis_commands_per_child"]
                + counts["redis_commands_per_group"] / row["n"],
                4,
            )
    steps.finish()
    return {
        "runs": rows,
        "repeats": options.repeats,
        "max_async_tasks": options.max_async_tasks,
        "few_slots": few_slots,
        "kick_concurrency": options.kick_concurrency,
        "counting": counts,
        "peers_ratio": PEERS,
        "redis": provider.kind,
    }


FLAGS = (
    Flag("--sizes", nargs="+", help="group sizes N"),
    Flag("--repeats", help="A/B pairs per size (the wall time ratio is their median)"),
    Flag("--max-async-tasks"),
    Flag(
        "--few-slots",
        nargs="*",
        help="one pair of runs at the smallest size with each of these slot counts",
    ),
    Flag("--count-n", help="size of the MONITOR counting pass (0: skip)"),
)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the overhead benchmark alone."""
    return run_alone(
        "overhead",
        __doc__,
        run,
        checks=overhead_checks,
        defaults=Options(),
        flags=FLAGS,
        legend=LEGEND,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
