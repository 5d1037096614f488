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
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import ResponseError

from benchmarks._report import (
    RESULTS_DIR,
    Check,
    Steps,
    median,
)
from benchmarks._run import Flag, new_settings, run_alone, worker_run
from benchmarks.apps import overhead as app
from local_redis import MonitorTap, RedisProvider, Tally, commandstats_calls
from taskiq_fanin import Signature, group

APP = "benchmarks.apps.overhead"

#: The most worker CPU a group's member may cost next to a plain task (ratio).
#: Wall time is reported, not a target: on a shared machine the same side's
#: run varies by far more than the difference between the sides.
TARGET_CPU_RATIO = 1.10
#: Pairs the full run times per size: the wall time ratio is their median.
FULL_REPEATS = 5
#: What the short names in the summary stand for.
LEGEND = (
    "overhead: a group of N no-op members over N plain tasks; CPU: the"
    " worker's, per task; wall: the median of the A/B pairs (min-max);"
    " memory: Redis's, at the group's peak."
)
#: Client round trips one child completion may cost.
TARGET_ROUND_TRIPS = 1.0
#: Commands a Celery 5.7 chord runs in Redis per completion; ours must be fewer.
CELERY_CHORD_COMMANDS = 12
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


@dataclass
class Sample:
    """One timed run of one side."""

    side: str
    n: int
    seconds: float
    kick_seconds: float
    cpu: dict[str, float | None] = field(default_factory=dict)
    peak_bytes: int | None = None


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
    worker = {
        side: _per_task_us(runs, "worker")
        for side, runs in (("fanin", fanin), ("plain", plain))
    }
    return {
        "n": n,
        "fanin_seconds": fanin_seconds,
        "plain_seconds": plain_seconds,
        "ratio": round(fanin_seconds / plain_seconds, 4),
        "pairs": len(pair_ratios),
        "pair_ratio_median": median(pair_ratios),
        "pair_ratio_range": [round(min(pair_ratios), 4), round(max(pair_ratios), 4)],
        "worker_cpu_ratio": round(worker["fanin"] / worker["plain"], 4)
        if worker["fanin"] is not None and worker["plain"]
        else None,
        "bytes_per_member": round(median(peaks) / n, 1) if peaks else None,
        "pair_ratios": [round(ratio, 4) for ratio in pair_ratios],
        "samples": {
            "fanin_seconds": [round(s.seconds, 4) for s in fanin],
            "plain_seconds": [round(s.seconds, 4) for s in plain],
            "fanin_kick_seconds": [round(s.kick_seconds, 4) for s in fanin],
            "plain_kick_seconds": [round(s.kick_seconds, 4) for s in plain],
        },
        "cpu_us_per_child": {
            side: {
                part: _per_task_us(group_, part)
                for part in ("worker", "redis", "client")
            }
            for side, group_ in (("fanin", fanin), ("plain", plain))
        },
    }


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
    return _command_costs(tallies, sizes, separate, stats_check)


def _command_costs(
    tallies: dict[tuple[str, int], Tally],
    sizes: tuple[int, int],
    separate: bool,
    stats_check: dict[str, int],
) -> dict[str, Any]:
    small, large = sizes

    def delta(n: int, measure: str) -> int:
        return int(
            getattr(tallies["fanin", n], measure)
            - getattr(tallies["plain", n], measure)
        )

    costs: dict[str, Any] = {}
    for measure in ("round_trips", "executed"):
        per_child = (delta(large, measure) - delta(small, measure)) / (large - small)
        per_group = delta(large, measure) - per_child * large
        costs[measure] = {
            "per_child": round(per_child, 4),
            "per_group": round(per_group, 2),
        }
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
        "round_trips_per_child": costs["round_trips"]["per_child"],
        "round_trips_per_group": costs["round_trips"]["per_group"],
        "redis_commands_per_child": costs["executed"]["per_child"],
        "redis_commands_per_group": costs["executed"]["per_group"],
        "script_commands_per_child": round(
            (script_inner[large] - script_inner[small]) / (large - small), 4
        ),
        "commandstats_check": stats_check or None,
        "by_command": {
            f"{side}-{n}": {
                "client": dict(t.client),
                "lua": dict(t.lua),
                "polling": dict(t.polling),
            }
            for (side, n), t in tallies.items()
        },
    }


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


def _pairs(row: dict[str, Any]) -> str:
    """The wall time ratio: the median of the pairs and their spread."""
    low, high = row["pair_ratio_range"]
    if row["pairs"] == 1:
        return f"{low:.2f} (1 pair)"
    return f"{row['pair_ratio_median']:.2f} ({low:.2f}-{high:.2f})"


def _cpu(row: dict[str, Any]) -> str:
    """Worker CPU per member / per plain task: the ratio and the two."""
    if row["worker_cpu_ratio"] is None:
        return "not measurable here"
    cpu = row["cpu_us_per_child"]
    fanin, plain = cpu["fanin"]["worker"], cpu["plain"]["worker"]
    return f"{row['worker_cpu_ratio']:.2f}: {fanin:.0f} / {plain:.0f} us"


def checks(data: dict[str, Any]) -> list[Check]:
    """The overhead targets beside what was measured."""
    result: list[Check] = []
    # An embedded fakeredis runs every script through lupa in the benchmark's
    # own process: its times and the worker's CPU say nothing about the library.
    timed = data.get("redis") != "fakeredis"
    for row in data["runs"]:
        ratio = row["worker_cpu_ratio"]
        result.append(
            Check(
                "overhead",
                f"worker CPU ratio, N={row['n']:,}",
                f"<= {TARGET_CPU_RATIO:.2f}",
                _cpu(row),
                ratio <= TARGET_CPU_RATIO if timed and ratio is not None else None,
            )
        )
    for row in data["runs"]:
        pairs = row["pairs"]
        result.append(
            Check(
                "overhead",
                f"wall ratio, N={row['n']:,}, {pairs} pair"
                + ("s" if pairs != 1 else ""),
                "reported",
                _pairs(row),
                None,
            )
        )
    for row in data.get("few_slots", []):
        slots = row["max_async_tasks"]
        result.append(
            Check(
                "overhead",
                f"wall ratio, N={row['n']:,}, {slots} slot"
                + ("s" if slots != 1 else ""),
                "reported",
                f"{row['ratio']:.2f}: {row['fanin_seconds']:.2f} / "
                f"{row['plain_seconds']:.2f} s",
                None,
            )
        )
    first = data["runs"][0]
    trips = first.get("round_trips_per_child")
    commands = first.get("redis_commands_per_child")
    result.append(
        Check(
            "overhead",
            "round trips per completion",
            f"<= {TARGET_ROUND_TRIPS:g}",
            "not measurable here" if trips is None else f"{trips:.2f}",
            None if trips is None else trips <= TARGET_ROUND_TRIPS,
        )
    )
    result.append(
        Check(
            "overhead",
            "Redis commands per completion",
            f"< {CELERY_CHORD_COMMANDS}",
            "not measurable here"
            if commands is None
            else f"{commands:.2f} (Celery: {CELERY_CHORD_COMMANDS})",
            None if commands is None else commands < CELERY_CHORD_COMMANDS,
        )
    )
    for row in data["runs"]:
        memory = row.get("bytes_per_member")
        result.append(
            Check(
                "overhead",
                f"memory per member, N={row['n']:,}",
                "reported",
                "not measurable here" if memory is None else f"{memory:.0f} B",
                None,
            )
        )
    return result


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
        checks=checks,
        defaults=Options(),
        flags=FLAGS,
        legend=LEGEND,
        argv=argv,
    )


if __name__ == "__main__":
    sys.exit(main())
