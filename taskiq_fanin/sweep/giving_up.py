"""The sweep giving a group up, a window of its ledger at a time.

Giving up goes over the whole ledger (which members never got an outcome?):
one script call per window of ``GIVE_UP_WINDOW`` indexes, so no call stalls
Redis whatever the group's width, and at most ``GIVE_UP_WINDOWS`` calls a
visit, so a visit's work is bounded too; a wider group is gone on with at the
next visit. The first window stops the group recording outcomes (``giving_up``);
the last claims the finaliser, and the continuation runs with what arrived.
"""

from dataclasses import dataclass

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta

#: Ledger indexes one ``giveUp`` call goes over: about 1 ms of Redis's time
#: (2 ms at most measured, at 100,000 members), at any width.
GIVE_UP_WINDOW = 1_000
#: Calls one visit makes at most: a wider group goes on at the next visit.
GIVE_UP_WINDOWS = 10


@dataclass(frozen=True)
class GiveUpVisit:
    """What one visit's windows did."""

    #: At least one window was gone over (False: the group was not open, or
    #: another sweep's pass is elsewhere).
    applied: bool
    #: The pass is over: the group was claimed and finalised.
    finalised: bool
    #: Members noted lost so far, and where the pass goes on.
    lost: int
    next: int
    #: The pass was found elsewhere than this visit read it: another sweep is
    #: at it (a lock lost or run out).
    raced: bool = False

    def note(self, total: int) -> str:
        """What the finding says of it (nothing once finalised)."""
        if self.raced and not self.applied:
            return "another sweep is giving it up"
        if not self.applied:
            return "no longer open"
        if self.finalised:
            return ""
        return (
            f"giving up: {self.next} of {total} ledger indexes gone over, "
            f"{self.lost} lost so far; the next visit goes on"
        )


async def give_up(
    ctx: FanInContext, group_id: str, meta: GroupMeta, *, claimant: str
) -> GiveUpVisit:
    """Go over the next windows of a group's give-up pass; finalise at its end.

    ``meta``: the group as judged (open: the pass begins at 0; ``giving_up``:
    it goes on where it is).
    """
    keys = GroupKeys(ctx.config.prefix, group_id)
    start = meta.lost_next if meta.state is GroupState.GIVING_UP else 0
    applied, lost = False, meta.lost
    for _ in range(GIVE_UP_WINDOWS):
        window = await ctx.scripts.give_up(
            keys,
            token=meta.token,
            lease_ms=ms(ctx.config.finaliser_lease),
            claimant=claimant,
            start=start,
            stop=start + GIVE_UP_WINDOW,
        )
        if not window.applied:
            # Not open any more, or another sweep's pass is elsewhere.
            raced = window.next >= 0
            return GiveUpVisit(applied, False, window.lost, window.next, raced)
        applied, lost, start = True, window.lost, window.next
        if window.claimed:
            await finalise(ctx, group_id, meta.token, claimant=claimant)
            return GiveUpVisit(applied=True, finalised=True, lost=lost, next=-1)
    return GiveUpVisit(applied=applied, finalised=False, lost=lost, next=start)
