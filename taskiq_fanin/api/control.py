"""Looking at groups and chains by id, and cancelling them.

One id names a group or a chain, never both (creating the second is refused);
ids written before that rule may name both, and every lookup by id goes through
:func:`resolve`, which takes the group first, then the chain.
"""

import enum
from datetime import datetime

from taskiq_fanin.api.broker import Target, context_of
from taskiq_fanin.api.retries import (
    cancel_chain_riding,
    cancel_group_riding,
    deadline,
    riding,
)
from taskiq_fanin.chains import chain_watch, record
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.results import ChainStatus, GroupStatus
from taskiq_fanin.domain.watching import ChainProgress, GroupProgress
from taskiq_fanin.groups import pace, reading
from taskiq_fanin.groups.reading import DEFAULT_LIST_LIMIT
from taskiq_fanin.storage.keys import ChainKeys, GroupKeys, validate_lookup_id


class Kind(enum.Enum):
    """What an id names."""

    GROUP = "group"
    CHAIN = "chain"


async def resolve(ctx: FanInContext, workflow_id: str) -> Kind | None:
    """Whether ``workflow_id`` names a group or a chain (``None``: neither).

    A group first, then a chain: the one order for every lookup by id.
    """
    validate_lookup_id(workflow_id)
    prefix = ctx.config.prefix
    if await ctx.redis.exists(GroupKeys(prefix, workflow_id).meta):
        return Kind.GROUP
    if await ctx.redis.exists(ChainKeys(prefix, workflow_id).record):
        return Kind.CHAIN
    return None


async def group_status(target: Target, group_id: str) -> GroupStatus:
    """Counts, state and times of a group, read from its own keys."""
    return await reading.status(context_of(target), group_id)


async def chain_status(target: Target, chain_id: str) -> ChainStatus:
    """Current step, state, times and error of a chain, from its record."""
    return await record.status(context_of(target), chain_id)


async def status(target: Target, workflow_id: str) -> GroupStatus | ChainStatus:
    """The status of the group, or else the chain, of this id (:func:`resolve`).

    A ``GroupStatus`` in state ``missing`` when neither exists.
    """
    ctx = context_of(target)
    if await resolve(ctx, workflow_id) is Kind.CHAIN:
        return await record.status(ctx, workflow_id)
    return await reading.status(ctx, workflow_id)


async def progress(target: Target, workflow_id: str) -> GroupProgress | ChainProgress:
    """The progress of the group, or else the chain, of this id (:func:`resolve`).

    A ``GroupProgress`` in state ``missing`` when neither exists.
    """
    ctx = context_of(target)
    if await resolve(ctx, workflow_id) is Kind.CHAIN:
        return await chain_watch.chain_progress(ctx, workflow_id)
    return await pace.group_progress(ctx, workflow_id)


async def cancel(target: Target, workflow_id: str) -> bool:
    """Cancel the group, or else the chain, of this id; False if not running.

    The id is looked up as everywhere (:func:`resolve`: a group first).
    A cancelled chain runs no further step (a step about to start sees the flag)
    and the compensations of its completed steps run. A cancelled group runs no
    continuation; members already enqueued still run (their outcomes are
    counted in its status), unless the group was planned with
    ``cancellable=True``, whose members check the flag first. While Redis is
    away it is tried again for the middleware's ``retry_for`` (a try that was
    done tells ``True``), then the error is raised.
    """
    ctx = context_of(target)
    until = deadline(ctx)  # one retry_for for the lookup and the cancel
    kind = await riding(
        ctx,
        lambda: resolve(ctx, workflow_id),
        what=("Finding", workflow_id),
        until=until,
    )
    if kind is Kind.GROUP:
        return await cancel_group_riding(ctx, workflow_id, until=until)
    if kind is Kind.CHAIN:
        return await cancel_chain_riding(ctx, workflow_id, until=until)
    return False


async def list_groups(
    target: Target,
    *,
    stuck: bool = False,
    limit: int = DEFAULT_LIST_LIMIT,
    now: datetime | None = None,
) -> list[GroupStatus]:
    """Groups in the sweep's index that still exist, soonest due first.

    With ``stuck``, only those still open past their deadline.
    """
    return await reading.list_groups(
        context_of(target), stuck=stuck, limit=limit, now=now
    )


async def list_chains(
    target: Target,
    *,
    stuck: bool = False,
    limit: int = DEFAULT_LIST_LIMIT,
    now: datetime | None = None,
) -> list[ChainStatus]:
    """Chains in the sweep's index still running (or failing), soonest due first.

    With ``stuck``, only those running past their deadline at a step: the
    chains a sweep finds as ``chain_stuck`` (``ChainStatus.overdue()``).
    """
    return await record.list_chains(
        context_of(target), stuck=stuck, limit=limit, now=now
    )
