"""Times as the command line and the web page both say them."""

from datetime import datetime, timezone

import pytest

from taskiq_fanin.domain.readable import duration, moment


@pytest.mark.parametrize(
    ("seconds", "digits", "said"),
    [
        (None, 1, "-"),
        (4.24, 1, "4.2s"),
        (4.6, 0, "5s"),
        (59.9, 1, "59.9s"),
        (187, 1, "3m07s"),
        (7500, 1, "2h05m"),
        (7500, 0, "2h05m"),
    ],
)
def test_a_duration_reads_in_the_largest_units_that_fit(
    seconds: float | None, digits: int, said: str
) -> None:
    assert duration(seconds, digits=digits) == said


def test_a_moment_is_said_in_utc_to_the_second() -> None:
    at = datetime(2026, 12, 6, 4, 5, 6, 789000, tzinfo=timezone.utc)
    assert moment(at) == "2026-12-06 04:05:06 UTC"
    assert moment(None) == "-"
