"""``python -m benchmarks.small_groups`` at tiny sizes: its JSON has every field, sane.

The benchmark runs as ``make bench`` runs it (its own process, real ``taskiq
worker`` processes, one a side) on the tests' Redis; what it wrote then goes
through its table and its chart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

# The chart needs the bench extra; the floors' venv (make test-lowest) has none.
pytest.importorskip("matplotlib", reason="the bench extra is not installed")

from benchmarks import _chart
from benchmarks._targets import small_group_checks
from benchmarks.small_groups import MEASURES, SIDES
from tests import bench_runs

pytestmark = pytest.mark.workers

SIZES = (5, 12)
ROUNDS = 2


def run_benchmark(redis_url: str, out: Path) -> dict[str, Any]:
    args = ["--sizes", *map(str, SIZES), "--rounds", str(ROUNDS)]
    return bench_runs.run_benchmark(
        "benchmarks.small_groups", args, redis_url, out / "s.json", timeout=120
    )


def test_the_small_groups_benchmark_writes_every_measure_of_every_side(
    redis_url: str, tmp_path: Path
) -> None:
    data = run_benchmark(redis_url, tmp_path)

    assert [row["n"] for row in data["runs"]] == list(SIZES)
    for row in data["runs"]:
        assert row["rounds"] == ROUNDS
        for side in SIDES:
            measured = row[side]
            assert 0 < measured["wall_ms"] < 10_000, (side, measured)
            assert 0 < measured["first_member_ms"] <= measured["wall_ms"]
            assert 0 < measured["worker_cpu_us_per_member"] < 1e5, (side, measured)
            continuation = measured["last_to_continuation_ms"]
            if side == "plain":
                assert continuation is None  # plain tasks have none
            else:
                assert 0 < continuation < measured["wall_ms"]
                assert 0.5 < measured["wall_ratio"] < 100
                assert measured["cpu_ratio"] > 0
                assert len(measured["samples"]["wall_ratio"]) == ROUNDS
            timed = [m for m in MEASURES if measured[m] is not None]
            assert all(len(measured["samples"][m]) == ROUNDS for m in timed)
    # The table and the chart read what it wrote.
    checks = small_group_checks(data)
    assert {check.measure for check in checks} >= {
        "wall / plain, N=5",
        "to continuation, N=12",
        "first member, N=5",
        "CPU/member vs plain, N=12",
    }
    _chart.draw(tmp_path / "s.png", {"small_groups": data}, title="t", settings=["s"])
    assert (tmp_path / "s.png").stat().st_size > 0
