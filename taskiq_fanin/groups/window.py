"""A windowed group's members, kicked as the window moves.

A group planned with ``max_in_flight`` K has only its first K members kicked;
each outcome recorded releases the next ledger index inside the same
``recordOutcome`` call (no round trip of its own), and the member that
recorded it kicks the released member before its message is acknowledged.
Ledger rows become messages here, for the window's kicks and the sweep's
re-drives alike: the one way to turn a ledger row back into a kick.
"""

from collections.abc import Mapping

from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.domain.spec import member_from_ledger
from taskiq_fanin.groups.dispatching import dispatch_members
from taskiq_fanin.storage.releases import Released


async def kick_rows(
    ctx: FanInContext,
    group_id: str,
    token: str,
    rows: Mapping[int, str],
    *,
    depth: int,
    cancellable: bool,
    attempt: int = 0,
) -> None:
    """Kick the members of these ledger rows (index -> row), as planning does."""
    members = {index: member_from_ledger(row) for index, row in rows.items() if row}
    await dispatch_members(
        ctx,
        group_id,
        token,
        members,
        depth=depth,
        cancellable=cancellable,
        attempt=attempt,
    )


async def kick_released(ctx: FanInContext, ref: MemberRef, released: Released) -> None:
    """Kick the member ``ref``'s outcome released; raises if the broker refuses.

    Raised, the recording is retried (the same delivery is told the same
    member again), and at last the message is left unacknowledged: a
    redelivery kicks it once the release's lease ran out, or the sweep does.
    """
    await kick_rows(
        ctx,
        ref.group_id,
        ref.token,
        {released.index: released.entry},
        depth=released.depth,
        cancellable=released.cancellable,
    )
