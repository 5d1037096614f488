"""Planning a validated group: write its ledger, then dispatch every member.

Nothing is dispatched until the ledger is durable (invariant 1). Planning a
group id again dispatches nothing, unless its first planner died mid-way: then
the members without an outcome are kicked again (kicking one twice is safe).
"""

import asyncio
from collections.abc import Awaitable
from dataclasses import dataclass

from redis.asyncio import RedisCluster

from taskiq_fanin import metrics
from taskiq_fanin.context import CLAIMANT, FanInContext
from taskiq_fanin.groups import index
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.groups.validation import GroupPlan
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.errors import IdInUseError, shown
from taskiq_fanin.model.ids import redriven_member_id
from taskiq_fanin.model.labels import CANCELLABLE_LABEL, DEPTH_LABEL, MemberRef
from taskiq_fanin.model.results import GroupState
from taskiq_fanin.model.signature import Signature
from taskiq_fanin.model.spec import ChainSpec, member_from_ledger
from taskiq_fanin.store.keys import GroupKeys
from taskiq_fanin.store.records import meta_options
from taskiq_fanin.store.replies import Created


@dataclass(frozen=True)
class Planned:
    """What planning did."""

    group_id: str
    #: False when a group with this id already existed and nothing was dispatched.
    created: bool


#: States of a group that is over: planning its id again indexes nothing.
FINISHED = frozenset({GroupState.COMPLETED.value, GroupState.CANCELLED.value})


async def plan_group(ctx: FanInContext, plan: GroupPlan) -> Planned:
    """Write the group's meta and ledger, then dispatch every member.

    A chain of the same id refuses it (``IdInUseError``): nothing is left of it.
    """
    keys = GroupKeys(ctx.config.prefix, plan.group_id)
    deadline_ms = ms(plan.options.deadline)

    claimant = f"{CLAIMANT}#plan-{plan.token}"

    def create() -> Awaitable[tuple[Created, str, str]]:
        return ctx.scripts.create_group(
            keys,
            token=plan.token,
            options=meta_options(plan.options, depth=plan.depth),
            members=plan.ledger,
            planner_lease_ms=ms(ctx.config.lease),
            claimant=claimant,
        )

    # The index may be stale (the sweep prunes it), but it must never miss a
    # group whose ledger exists: it is written first. On one server both go in
    # one pipeline, which Redis runs in order; a cluster may run them on two
    # nodes in any order, so there the index is written before the ledger.
    if isinstance(ctx.redis, RedisCluster):
        indexed = await index.add(ctx, plan.group_id, deadline_ms)
        made = await create()
    else:
        got_index, got_group = await asyncio.gather(
            index.add(ctx, plan.group_id, deadline_ms), create(), return_exceptions=True
        )
        if isinstance(got_index, BaseException):
            # Refused, while the ledger may be written: once more, alone (it
            # raises if refused again), so that no ledger stays out of the index.
            got_index = await index.add(ctx, plan.group_id, deadline_ms)
        if isinstance(got_group, BaseException):
            raise got_group
        indexed, made = got_index, got_group
    created, token, state = made
    if created in (Created.ID_IN_USE, Created.EXISTS):
        await _not_created(ctx, plan.group_id, created, state, indexed=indexed)
        return Planned(group_id=plan.group_id, created=False)
    if created is Created.EXISTS_UNPLANNED:
        # An earlier planner died mid-dispatch: finish its work from the ledger.
        members = await _undispatched(ctx, keys)
    else:
        members = dict(enumerate(plan.members))
    await dispatch_members(
        ctx,
        plan.group_id,
        token,
        members,
        depth=plan.depth,
        cancellable=plan.options.cancellable,
    )
    await ctx.scripts.mark_planned(keys, token=token)
    metrics.GROUPS_PLANNED.inc()
    # An empty group is complete at once: its planner (or the same planner
    # again, after the reply was lost) finalises it now.
    ours = created is Created.CREATED or token == plan.token
    if state == GroupState.CLAIMED.value and not plan.members and ours:
        await finalise(ctx, plan.group_id, token, claimant=claimant)
    return Planned(group_id=plan.group_id, created=created is Created.CREATED)


async def _not_created(
    ctx: FanInContext, group_id: str, created: Created, state: str, *, indexed: bool
) -> None:
    """Take back an index entry nothing needs; raise if a chain holds the id."""
    if created is Created.ID_IN_USE:
        if indexed:
            await index.remove(ctx, group_id)  # nothing of the group was written
        raise IdInUseError(workflow_id=shown(group_id), holder="chain")
    if indexed and state in FINISHED:
        await index.remove(ctx, group_id)  # over: nothing to sweep


async def _undispatched(
    ctx: FanInContext, keys: GroupKeys
) -> dict[int, Signature | ChainSpec]:
    """Members in the ledger that have no outcome yet."""
    inspected = await ctx.scripts.inspect_group(keys)
    if inspected is None or not inspected.missing:
        return {}
    entries = await ctx.redis.hmget(keys.plan, [str(i) for i in inspected.missing])
    return {
        index: member_from_ledger(entry)
        for index, entry in zip(inspected.missing, entries, strict=True)
        if entry is not None
    }


async def dispatch_members(
    ctx: FanInContext,
    group_id: str,
    token: str,
    members: dict[int, Signature | ChainSpec],
    *,
    depth: int,
    cancellable: bool = False,
    attempt: int = 0,
) -> None:
    """Kick members with their group label and deterministic task ids.

    Kicking a member twice is harmless: its outcome is recorded once. A member
    that is a chain starts under the id ``<group>~<index>`` (``~r<attempt>`` added
    when the sweep re-drives it: a re-driven chain starts over, unless one of its
    earlier chains has ended: that one is recorded instead).
    """
    limit = asyncio.Semaphore(ctx.config.dispatch_concurrency)
    labels = {DEPTH_LABEL: str(depth)}
    if cancellable:
        labels[CANCELLABLE_LABEL] = "1"

    async def kick(index: int, member: Signature | ChainSpec) -> None:
        ref = MemberRef(group_id=group_id, index=index, token=token)
        async with limit:
            if isinstance(member, ChainSpec):
                ids = [
                    ref.task_id,
                    *(
                        redriven_member_id(ref.task_id, n)
                        for n in range(1, attempt + 1)
                    ),
                ]
                await ctx.start_chain(
                    ctx,
                    member,
                    chain_id=ids[-1],
                    member=ref,
                    depth=depth + 1,
                    earlier=ids[:-1],
                )
                return
            await (
                member.with_labels(**ref.label(), **labels)
                .kicker(ctx.kicker)
                .with_task_id(ref.task_id)
                .kiq(*member.args, **member.kwargs)
            )

    await asyncio.gather(*(kick(index, member) for index, member in members.items()))
