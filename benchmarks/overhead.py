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
        [--durability replicated] [--json PATH]

``--durability replicated`` runs both sides with a replica of each server
(started here, on loopback) and the middleware waiting for it (``WAIT``).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._cli import Benchmark, flag
from benchmarks._overhead_run import Sample, command_costs, one_run, summarize_size
from benchmarks._report import RESULTS_DIR, Steps, count, sizes
from benchmarks._targets import overhead_checks
from local_redis import RedisProvider, Tally, replica_of

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

    sizes: tuple[int, ...] = flag((2000, 20000), "group sizes N")
    repeats: int = flag(
        FULL_REPEATS, "A/B pairs per size (the wall time ratio is their median)"
    )
    max_async_tasks: int = flag(100)
    #: Fewer slots, for one pair of runs each at the smallest size: a fan-in
    #: that holds its slots waiting for company shows here, not at 100.
    few_slots: tuple[int, ...] = flag(
        (1, 10),
        "one pair of runs at the smallest size with each of these slot counts",
        nargs="*",
    )
    durability: str = flag(
        "acknowledged",
        "the middleware's durability; replicated: both sides with a replica",
    )
    #: Plain kicks in flight at once: the library's own dispatch default.
    kick_concurrency: int = 64
    #: Children in the untimed warm-up that precedes every timed run.
    warmup: int = 500
    #: Group size of the MONITOR counting pass (0 skips it).
    count_n: int = flag(2000, "size of the MONITOR counting pass (0: skip)")
    #: Seconds one run may take before it counts as stuck.
    timeout: float = 600.0
    results_dir: Path = RESULTS_DIR

    @property
    def steps(self) -> int:
        """Runs, for the progress bar."""
        counting = 4 if self.count_n else 0
        few = 2 * len(self.few_slots)
        return 2 * self.repeats * len(self.sizes) + few + counting


async def count_commands(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """The untimed MONITOR pass: per-completion and per-group command counts.

    Runs both sides at two group sizes; the difference between the sizes is the
    cost of one more child, and what is left is the group's fixed cost. The
    fan-in keeps its keys on a Redis of its own when one can be started.
    """
    sizes = (options.count_n // 2, options.count_n)
    with (
        provider.second() as (fanin_url, separate),
        _replicated(options, fanin_url if separate else None),
    ):
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
        step, tag = f"{slots} slots", f"s{slots}"
        samples = await _pair(
            provider, options, steps, n, step=step, tag=tag, slots=slots
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
        label = f"{side}-{n}-{tag}"
        samples.append(
            (await one_run(provider, options, side, n, label=label, slots=slots))[0]
        )
        steps.advance()
    return samples


async def run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    """Every size, A/B interleaved, then the counting pass; the JSON document."""
    with _replicated(options, provider.url):
        return await _run(provider, options, steps)


def _replicated(
    options: Options, url: str | None
) -> contextlib.AbstractContextManager[Any]:
    """A replica of the server at ``url`` when the run waits for one."""
    if options.durability != "replicated" or url is None:
        return contextlib.nullcontext()
    return replica_of(url)


async def _run(
    provider: RedisProvider, options: Options, steps: Steps
) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for n in options.sizes:
        samples: list[Sample] = []
        for repeat in range(1, options.repeats + 1):
            step = f"run {repeat}/{options.repeats}"
            samples += await _pair(
                provider, options, steps, n, step=step, tag=str(repeat)
            )
        rows.append(summarize_size(n, samples))
    few_slots = await _few_slots(provider, options, steps)
    counts = (
        await count_commands(provider, options, steps)
        if options.count_n and provider.can_monitor
        else None
    )
    measures = ("round_trips", "redis_commands")
    for row in rows:
        found = counts or {}
        row.update({f"{m}_per_child": found.get(f"{m}_per_child") for m in measures})
        for m in measures if counts else ():
            per_group = found[f"{m}_per_group"] / row["n"]
            row[f"{m}_per_child_amortized"] = round(
                found[f"{m}_per_child"] + per_group, 4
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
        "durability": options.durability,
    }


def describe(options: Options) -> str:
    """What ran: "overhead 5 pairs at N = 2,000 and 20,000"."""
    return f"overhead {count(options.repeats, 'pair')} at N = {sizes(options.sizes)}"


BENCHMARK = Benchmark(
    "overhead",
    __doc__,
    run,
    Options(),
    overhead_checks,
    LEGEND,
    # Fewer pairs than make bench's, at its smaller size only: the summary and
    # the chart say so.
    quick={"sizes": (2000,), "repeats": 3, "count_n": 400, "warmup": 200},
    describe=describe,
)

if __name__ == "__main__":
    sys.exit(BENCHMARK.main())
