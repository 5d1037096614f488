"""What a test's ``SLOWLOG`` may hold: the 10 ms bound, less the machine's hiccups.

SLOWLOG times a command from its start to its end on the wall clock, so a
command whose redis-server lost its core meanwhile is logged as slow: on a
2-core runner shared with the worker and the test, a 500-field HSET was logged
at 6 ms and a windowed script at 11 and 18.7 ms (its neighbours at 3 ms). A
command doing a whole group's work is slow every time, and by far more: at
30,000 members a ledger's HSET took 48 ms and a script looping over the group
97 to 300 ms on the same machine. So a test allows a couple of hiccups over
the bound, each well below what a whole group's command takes; the benchmark
reports the slowest command itself (``benchmarks/README.md``).
"""

from collections.abc import Iterable
from typing import Any

BOUND_US = 10_000
"""The library's bound for one command (issue 18): ~10 ms at any group size."""

HICCUPS = 2
"""Commands over the bound a run may log for the machine's sake, not the library's."""

CEILING_US = 40_000
"""No hiccup reaches it: one command over a whole 30,000 group takes 48 ms or more."""


def over_bound(entries: Iterable[dict[str, Any]]) -> list[tuple[int, bytes]]:
    """The logged commands at or over the bound, as (microseconds, command's start)."""
    return [
        (entry["duration"], entry["command"][:60])
        for entry in entries
        if entry["duration"] >= BOUND_US
    ]


def assert_bounded(entries: Iterable[dict[str, Any]]) -> None:
    """Fail on more than HICCUPS commands over the bound, or any at the ceiling."""
    slow = over_bound(entries)
    assert len(slow) <= HICCUPS, slow
    assert all(duration < CEILING_US for duration, _ in slow), slow
