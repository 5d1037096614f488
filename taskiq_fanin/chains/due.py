"""When a running chain's step counts as stuck: one answer for sweep and listing.

A chain is due a step span after its record last moved, unless it waits on a
group step that is on time: a windowed group runs for as long as its width
takes, its deadline sliding while its window moves (``recordOutcome``), and a
chain waiting on it is not stuck while it is not, nor while the group's
finaliser and continuation (which move the chain on) are. The sweep
(``chain_stuck``) and ``list_chains(stuck=True)`` / ``ChainStatus.overdue()``
both ask here, so that ``list --stuck`` agrees with ``sweep --fail-on-stuck``.
"""

from dataclasses import dataclass

from taskiq_fanin.chains.cursor import PendingStep
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.results import ChainState, GroupState
from taskiq_fanin.domain.spec import GroupSpec
from taskiq_fanin.groups import reading
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import ChainRecord


@dataclass(frozen=True)
class StepDue:
    """When the step counts as stuck (ms, Redis's clock)."""

    at: int
    #: Waiting on its group step, on time: when that group's keys expire (the
    #: chain's record must outlive them, ``keepChain``); else ``None``.
    group_expires_at: int | None = None


def deadline_ms(ctx: FanInContext, chain: ChainRecord) -> int:
    """How long the chain's step may take: as started (the config's, if unsaid)."""
    if chain.deadline_ms is None:
        return ms(ctx.config.deadline)
    return chain.deadline_ms


async def step_due(ctx: FanInContext, chain: ChainRecord, now: int) -> StepDue:
    """When a running chain's step counts as stuck, its group step seen to.

    Past its own deadline at ``now``, a chain at a group step whose group is on
    time (open and within its deadline, its finaliser's lease held, its
    continuation within its span: as the group sweep judges it) is due when
    the group is. A group that is stuck is the group sweep's to handle, by its
    own policy: the chain is due by its own deadline.
    """
    own = (chain.updated_at or 0) + deadline_ms(ctx, chain)
    if chain.state is not ChainState.RUNNING or own > now or not chain.pending:
        return StepDue(own)
    kick = PendingStep.model_validate_json(chain.pending)
    if not isinstance(kick.step, GroupSpec) or kick.cursor.index != chain.step:
        return StepDue(own)
    inspected = await ctx.scripts.inspect_group(
        GroupKeys(ctx.config.prefix, kick.cursor.step_id)
    )
    if inspected is None or inspected.meta.state not in _ON_ITS_WAY:
        return StepDue(own)
    meta = inspected.meta
    group_due = reading.due_at(meta, meta.state)
    if group_due > now:
        return StepDue(group_due, meta.expires_at)
    if reading.leased(inspected):
        # Its finaliser or its continuation (which moves the chain on) holds
        # a lease: on time until the lease is looked at again.
        return StepDue(now + ms(ctx.config.finaliser_lease), meta.expires_at)
    return StepDue(own)


#: A group step's states on its way to moving the chain on: while its group is
#: on time in one (by the group sweep's own judgement), the chain is too.
_ON_ITS_WAY = frozenset(
    {GroupState.OPEN, GroupState.CLAIMED, GroupState.DISPATCHED, GroupState.RUNNING}
)
