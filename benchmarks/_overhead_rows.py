"""The overhead benchmark's JSON rows, from its timed samples and its counts."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks._report import median
from local_redis import Tally


@dataclass
class Sample:
    """One timed run of one side."""

    side: str
    n: int
    seconds: float
    kick_seconds: float
    cpu: dict[str, float | None] = field(default_factory=dict)
    peak_bytes: int | None = None


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


def command_costs(
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
