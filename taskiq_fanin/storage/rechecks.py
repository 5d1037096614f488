"""The sweep's recheck of a lost continuation, before it kicks it again.

A group's overdue continuation (``checkContinuation``) and a failed chain's
lost ``on_error`` (``checkOnError``) go the same way: a check that writes
nothing (lost, or its re-kicks used up, on Redis's clock), the kick, and only
once the kick returned a count of it (``countRedispatch``, ``countRekick``):
what is counted was sent, so a kick that failed spends nothing. Check then
count is safe as sweeps are serialised by the sweep's lock (``sweep/run.py``):
none acts between one's check and its count; two racing anyway (the lock ran
out) at worst kick one extra copy, which its run guard keeps to one run.
"""

import enum
from typing import Any, NamedTuple


class Lost(enum.IntEnum):
    """Result of ``checkContinuation`` and ``checkOnError``."""

    #: Not lost after all: missing, another token's, over, its lease held, or
    #: within its span to begin.
    ON_ITS_WAY = 0
    #: Lost: kick it again (then count the kick).
    LOST = 1
    #: Lost, but its re-kicks are used up (``max_redrives``): reported only.
    CAPPED = 2


class Recheck(NamedTuple):
    """What a check answered."""

    lost: Lost
    #: Its re-kicks so far.
    redrives: int
    #: The attempt a copy goes as (after the recorded one, if a copy began).
    attempt: int


def recheck(reply: list[Any]) -> Recheck:
    """A check's reply."""
    code, redrives, attempt = reply
    return Recheck(Lost(code), int(redrives), int(attempt))
