"""``python -m benchmarks.scale`` at a tiny size: its JSON has every field, sane.

The benchmark runs as ``make bench`` runs it (its own process, real ``taskiq
worker`` processes) on the tests' Redis; what it wrote then goes through its
table and its chart. A windowed run is measured where ``GroupOptions`` has
``max_in_flight``, and recorded as skipped, with the reason, where it has not.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# The chart needs the bench extra; the floors' venv (make test-lowest) has none.
pytest.importorskip("matplotlib", reason="the bench extra is not installed")

from benchmarks import _chart
from benchmarks._targets import scale_checks
from benchmarks.scale import LATENCIES, MEASURES, window_missing
from tests import bench_runs

pytestmark = pytest.mark.workers

N = 50
#: Every measure must be a number in these bounds (``None`` only where noted).
BOUNDS: dict[str, tuple[float, float]] = {
    "seconds": (0, 60),
    "plan_seconds": (0, 10),
    "worker_cpu_us_per_member": (1, 1e5),
    "round_trips_per_member": (0.01, 10),
    "redis_commands_per_member": (0.5, 100),
    "peak_bytes_per_member": (1, 1e5),
    "after_bytes_per_member": (0, 1e5),
    "last_member_to_continuation_ms": (0, 10_000),
    "first_member_start_ms": (0, 10_000),
    "continuation_message_bytes": (100, 1e5),
}


def run_benchmark(redis_url: str, out: Path) -> dict[str, Any]:
    """The benchmark at N = 50, a window of 10, 5 members beside the recipe."""
    args = [
        "--sizes",
        str(N),
        "--window",
        "10",
        "--recipe-n",
        "5",
        "--recipe-repeats",
        "2",
    ]
    return bench_runs.run_benchmark(
        "benchmarks.scale", args, redis_url, out / "scale.json", timeout=90
    )


def check_measured(row: dict[str, Any]) -> None:
    for name, (low, high) in BOUNDS.items():
        assert isinstance(row[name], int | float), (name, row[name])
        assert low <= row[name] <= high, (name, row[name])
    assert row["redis_commands_per_member"] >= row["round_trips_per_member"]
    assert row["peak_bytes_per_member"] > row["after_bytes_per_member"]
    assert row["plan_seconds"] < row["seconds"]
    longest = row["longest_redis_command"]
    assert longest is not None  # SLOWLOG was read
    # No value: most groups had nothing as slow as the log's threshold.
    slowest = row["samples"]["longest_redis_command_ms"]
    if row["longest_redis_command_ms"] is None:
        assert sum(1 for ms in slowest if ms) <= len(slowest) // 2
    else:
        assert 0 < row["longest_redis_command_ms"] <= longest["ms"]
        assert longest["command"]


def test_the_scale_benchmark_writes_every_measure_of_every_run(
    redis_url: str, tmp_path: Path
) -> None:
    data = run_benchmark(redis_url, tmp_path)

    assert [(row["n"], row["windowed"]) for row in data["runs"]] == [
        (N, False),
        (N, True),
    ]
    for row in data["runs"]:
        assert set(MEASURES) <= set(row)
        if row["skipped"] is None:
            check_measured(row)
        else:
            assert row["windowed"]
            assert row["skipped"] == window_missing()
            assert all(row[name] is None for name in MEASURES)
    assert (data["runs"][1]["skipped"] is None) == (window_missing() is None)
    recipe = data["recipe"]
    for side in ("fanin", "recipe"):
        for name in LATENCIES:
            assert 0 < recipe[side][name] < 10_000
            assert len(recipe[side]["samples"][name]) == 2
    # The table and the chart read what it wrote.
    assert any(check.met is not None for check in scale_checks(data))
    _chart.draw(tmp_path / "scale.png", {"scale": data}, title="t", settings=["s"])
    assert (tmp_path / "scale.png").stat().st_size > 0
