"""``progress()``'s rate and time left, from a status and its latest outcomes'
times, without Redis: over the last ten seconds, or since the group was planned
when that is sooner; a full sample over the time after its oldest outcome."""

from datetime import datetime, timedelta, timezone

from taskiq_fanin import GroupStatus
from taskiq_fanin.groups.pace import RATE_SECONDS, SAMPLE, progress_of
from taskiq_fanin.models import GroupState

PLANNED = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def _ms(seconds: float) -> int:
    return int((PLANNED + timedelta(seconds=seconds)).timestamp() * 1000)


def _status(total: int, done: int, at: float) -> GroupStatus:
    return GroupStatus(
        group_id="g",
        state=GroupState.OPEN,
        total=total,
        done=done,
        created=PLANNED,
        read_at=PLANNED + timedelta(seconds=at),
    )


def test_a_young_group_counts_its_first_outcomes_since_it_was_planned() -> None:
    """A window of 3, members of 1 s: three end at 1 s, three at 2 s."""
    times = [_ms(2.0)] * 3 + [_ms(1.0)] * 3  # newest first
    progress = progress_of(_status(15, 6, at=2.0), times)

    assert progress.rate == 3.0
    assert progress.eta_seconds == 3.0  # 9 left


def test_an_older_group_counts_the_last_ten_seconds() -> None:
    """One outcome a second for a minute: the stream goes back past the look-back."""
    times = [_ms(60.0 - n) for n in range(60)]
    progress = progress_of(_status(100, 60, at=60.0), times)

    assert progress.rate == (RATE_SECONDS + 1) / RATE_SECONDS  # 60, 59 .. 50
    assert progress.eta_seconds is not None
    assert 35 < progress.eta_seconds < 40


def test_a_group_whose_outcomes_all_came_lately_counts_them_over_ten_seconds() -> None:
    """Planned long ago, its 20 outcomes all in the last 10 s: 2 a second."""
    times = [_ms(100.0 - n * 0.25) for n in range(20)]
    assert progress_of(_status(40, 20, at=100.0), times).rate == 2.0


def test_a_full_sample_counts_the_outcomes_after_its_oldest() -> None:
    """1,000 a second, read as the newest lands: the latest 256 span 0.255 s."""
    times = [_ms(30.0 - n / 1000) for n in range(SAMPLE)]
    rate = progress_of(_status(100_000, 30_000, at=30.0), times).rate

    assert rate is not None
    assert abs(rate - 1000) < 1


def test_too_few_outcomes_give_no_rate() -> None:
    progress = progress_of(_status(10, 2, at=5.0), [_ms(4.0), _ms(3.0)])
    assert (progress.rate, progress.eta_seconds) == (None, None)
