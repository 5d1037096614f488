"""``progress()``'s rate and time left, from a status and the outcome stream's
entries it is counted between, without Redis: the outcomes of the last ten
seconds (or since the group was planned when that is sooner) by the counts the
entries carry, whatever their number."""

from datetime import datetime, timedelta, timezone

from taskiq_fanin import GroupStatus
from taskiq_fanin.groups.pace import RATE_SECONDS, progress_of
from taskiq_fanin.models import GroupState
from taskiq_fanin.storage.outcome_stream import PaceMarks, StreamEntry

PLANNED = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)


def _ms(seconds: float) -> int:
    return int((PLANNED + timedelta(seconds=seconds)).timestamp() * 1000)


def _entry(seconds: float, ordinal: int | None) -> StreamEntry:
    at = _ms(seconds)
    return StreamEntry(
        cursor=f"{at}-0", at_ms=at, index=0, outcome="done", payload="", ordinal=ordinal
    )


def _marks(kept: list[tuple[float, int | None]], at: float) -> PaceMarks:
    """What ``pace_marks`` reads off a stream keeping ``kept`` (oldest first)."""
    since = _ms(at - RATE_SECONDS)
    before = [entry for entry in kept if _ms(entry[0]) <= since]
    return PaceMarks(
        before=_entry(*before[-1]) if before else None,
        oldest=_entry(*kept[0]) if kept else None,
        newest=_entry(*kept[-1]) if kept else None,
    )


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
    kept = [(1.0, 1), (1.0, 2), (1.0, 3), (2.0, 4), (2.0, 5), (2.0, 6)]
    progress = progress_of(_status(15, 6, at=2.0), _marks(kept, at=2.0))

    assert progress.rate == 3.0
    assert progress.eta_seconds == 3.0  # 9 left


def test_an_older_group_counts_the_outcomes_of_the_last_ten_seconds() -> None:
    """One outcome a second for a minute: those after 50 s, 51 to 60."""
    kept = [(float(n), n) for n in range(1, 61)]
    progress = progress_of(_status(100, 60, at=60.0), _marks(kept, at=60.0))

    assert progress.rate == 1.0
    assert progress.eta_seconds == 40.0


def test_a_group_whose_outcomes_all_came_lately_counts_them_over_ten_seconds() -> None:
    """Planned long ago, its 20 outcomes all in the last 10 s: 2 a second."""
    kept = [(95.25 + n * 0.25, n + 1) for n in range(20)]
    assert progress_of(_status(40, 20, at=100.0), _marks(kept, at=100.0)).rate == 2.0


def test_a_burst_counts_every_outcome_of_it_however_many() -> None:
    """1,000 outcomes in the first second, read at 5 s: 200 a second since planning.

    Counted from the 256 latest entries, this read about 60 a second.
    """
    kept = [(n / 1000, n + 1) for n in range(1000)]
    assert progress_of(_status(5000, 1000, at=5.0), _marks(kept, at=5.0)).rate == 200.0


def test_a_stream_trimmed_past_the_look_back_counts_after_its_oldest_entry() -> None:
    """1,000 a second for 30 s, the stream keeping its latest 10,000 outcomes."""
    kept = [(30.0 - n / 1000, 30_000 - n) for n in range(9_999, -1, -1)]
    marks = _marks(kept, at=30.0)
    assert marks.before is None  # the look-back's start is gone from the stream
    rate = progress_of(_status(100_000, 30_000, at=30.0), marks).rate

    assert rate is not None
    assert abs(rate - 1000) < 1


def test_too_few_outcomes_give_no_rate() -> None:
    kept = [(3.0, 1), (4.0, 2)]
    progress = progress_of(_status(10, 2, at=5.0), _marks(kept, at=5.0))
    assert (progress.rate, progress.eta_seconds) == (None, None)


def test_without_counts_on_the_stream_the_rate_is_the_average_since_planning() -> None:
    """No stream kept (``outcome_stream_max=0``), or entries an older version wrote."""
    no_counts = [(float(n), None) for n in range(1, 21)]
    for marks in (PaceMarks(None, None, None), _marks(no_counts, at=40.0)):
        assert progress_of(_status(40, 20, at=40.0), marks).rate == 0.5
