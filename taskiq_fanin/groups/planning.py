"""Planning a validated group: write its ledger in chunks, then dispatch every member.

Nothing is dispatched until the whole ledger is durable and sealed (invariant
1). The group is created with its first chunk, the further chunks appended,
and a plan that cannot go on (a bad member, the caller's iterator raising,
Redis having lost the group) abandoned before anything was kicked. Planning a
group id again dispatches nothing, unless its first planner died mid-way
(writing chunks or kicking): then what the ledger holds is sealed and its
members without an outcome are kicked (kicking one twice is safe).
"""

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass

from redis.asyncio import RedisCluster
from redis.exceptions import RedisError

from taskiq_fanin import metrics
from taskiq_fanin.context import CLAIMANT, FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import (
    GroupLostError,
    GroupPlanConflictError,
    IdInUseError,
    shown,
)
from taskiq_fanin.domain.results import GroupState
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, group_name
from taskiq_fanin.groups import group_index, ledger, workers_seen
from taskiq_fanin.groups.dispatching import dispatch_members
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.groups.group_validation import GroupPlan
from taskiq_fanin.storage import releases
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import meta_options
from taskiq_fanin.storage.replies import Created, Creation

logger = logging.getLogger("taskiq_fanin.planning")


@dataclass(frozen=True)
class Planned:
    """What planning did."""

    group_id: str
    #: False when a group with this id already existed (another plan's) and
    #: nothing was dispatched.
    created: bool


#: States of a group that is over: planning its id again indexes nothing.
FINISHED = frozenset({GroupState.COMPLETED.value, GroupState.CANCELLED.value})


async def plan_group(
    ctx: FanInContext,
    plan: GroupPlan,
    *,
    chunks: AsyncGenerator[ledger.Chunk, None] | None = None,
    retried: bool = False,
) -> Planned:
    """Write the group's meta and ledger chunk by chunk, then dispatch every member.

    No member is kicked before the whole ledger is durable and sealed. A chain
    of the same id refuses it (``IdInUseError``): nothing is left of it.
    ``chunks``: the plan's, for a try that may not be the first
    (``ledger.Replay``); ``retried``: a try that fails with Redis away is
    tried again (a group whose plan failed otherwise is then taken back by the
    next try). A group this plan's token created counts as created, however
    many tries it took.
    """
    keys = GroupKeys(ctx.config.prefix, plan.group_id)
    deadline_ms = ms(plan.options.deadline)
    claimant = f"{CLAIMANT}#plan-{plan.token}"
    parts = chunks if chunks is not None else ledger.chunks(ctx, plan)
    first = await anext(parts)  # a bad member in it raises: nothing is written

    options = _meta_of(plan, first)

    def create() -> Awaitable[Creation]:
        return ctx.scripts.create_group(
            keys,
            token=plan.token,
            options=options,
            members=first.entries,
            planner_lease_ms=ms(ctx.config.finaliser_lease),
            claimant=claimant,
            sealed=first.last and not plan.options.open,
        )

    indexed, made = await _index_and_create(ctx, plan.group_id, deadline_ms, create)
    created, token, state = made.created, made.token, made.state
    ours = created is Created.CREATED or token == plan.token
    # An empty group is complete at once: its planner (or the same planner
    # again, after the reply was lost) finalises it.
    empty = first.last and not first.entries
    claimed = state == GroupState.CLAIMED.value and empty and ours
    in_hand: dict[int, Signature | ChainSpec] | None = None
    if created in (Created.ID_IN_USE, Created.EXISTS, Created.OTHER_PLAN):
        await parts.aclose()
        await _not_created(ctx, plan.group_id, created, state, indexed=indexed)
        if claimed:  # planned by an earlier try, which did not finalise it
            await finalise(ctx, plan.group_id, token, claimant=claimant)
        return Planned(group_id=plan.group_id, created=ours)
    if created is Created.CREATED:
        whole, total = await write_rest(
            ctx,
            keys,
            token,
            parts,
            len(first.entries),
            sealed=first.last,
            retried=retried,
            seals=not plan.options.open,
        )
        # The planner holds every member when they were listed (or streamed
        # in one chunk); else they are read back from the ledger.
        if whole and (plan.stream is None or first.last):
            in_hand = dict(enumerate(plan.members or first.members))
    else:
        total = await take_over(
            ctx,
            keys,
            made,
            own_token=plan.token,
            first=first,
            parts=parts,
            retried=retried,
            seals=not plan.options.open,
        )
    try:
        await _dispatch(ctx, plan, token, in_hand, total)
    except Exception:
        await _release(ctx, keys, token)
        raise
    await ctx.scripts.mark_planned(keys, token=token)
    metrics.GROUPS_PLANNED.inc()
    await _warn_if_unserved(ctx, plan.group_id, in_hand)
    if claimed:
        await finalise(ctx, plan.group_id, token, claimant=claimant)
    return Planned(group_id=plan.group_id, created=ours)


def _meta_of(plan: GroupPlan, first: ledger.Chunk) -> dict[str, str | int]:
    """The group's options as its meta keeps them, and what its members are."""
    # A derived id's plan is the library's own, redone: never refused.
    digest = ledger.digest(plan, first) if plan.named_by_caller else ""
    # Its name, else one from its continuation or first member (of a streamed
    # group, known from the first chunk on).
    head = first.members[0] if first.members else None
    options = plan.options.model_copy(update={"name": group_name(plan.options, head)})
    return meta_options(options, depth=plan.depth, digest=digest)


async def _warn_if_unserved(
    ctx: FanInContext, group_id: str, in_hand: dict[int, Signature | ChainSpec] | None
) -> None:
    """Whether a worker with the middleware serves a member's queue (listed groups)."""
    first = next(iter(in_hand.values()), None) if in_hand else None
    if isinstance(first, Signature):
        await workers_seen.warn_if_unserved(ctx, first.task_name, f"Group {group_id}")


async def _index_and_create(
    ctx: FanInContext,
    group_id: str,
    deadline_ms: int,
    create: Callable[[], Awaitable[Creation]],
) -> tuple[bool, Creation]:
    """Index the group and create it: whether it was indexed now, and the reply.

    The index may be stale (the sweep prunes it), but it must never miss a
    group whose ledger exists: it is written first. On one server both go in
    one pipeline, which Redis runs in order; a cluster may run them on two
    nodes in any order, so there the index is written before the ledger.
    """
    if isinstance(ctx.redis, RedisCluster):
        indexed = await group_index.add(ctx, group_id, deadline_ms)
        return indexed, await create()
    got_index, got_group = await asyncio.gather(
        group_index.add(ctx, group_id, deadline_ms), create(), return_exceptions=True
    )
    if isinstance(got_index, BaseException):
        # Refused, while the ledger may be written: once more, alone (it
        # raises if refused again), so that no ledger stays out of the index.
        got_index = await group_index.add(ctx, group_id, deadline_ms)
    if isinstance(got_group, BaseException):
        raise got_group
    return got_index, got_group


async def _release(ctx: FanInContext, keys: GroupKeys, token: str) -> None:
    """A kick failed: give up the lease, so planning again dispatches the rest now.

    Best effort: should Redis be away too, the lease runs out as a dead planner's.
    """
    try:
        await ctx.scripts.release_planner(keys, token=token)
    except (RedisError, OSError):
        logger.warning(
            "Group %s: its failed planner's lease was not released", keys.group_id
        )


async def _dispatch(
    ctx: FanInContext,
    plan: GroupPlan,
    token: str,
    in_hand: dict[int, Signature | ChainSpec] | None,
    total: int,
) -> None:
    """Kick the members: those ``in_hand`` when the planner holds them all.

    Else read back from the sealed ledger of ``total`` members a page at a
    time (those with no outcome yet). Of a windowed group, only its released
    ones: the first ``max_in_flight``, or as far as its outcomes released.
    """

    async def kick(members: dict[int, Signature | ChainSpec]) -> None:
        await dispatch_members(
            ctx,
            plan.group_id,
            token,
            members,
            depth=plan.depth,
            cancellable=plan.options.cancellable,
        )

    window = plan.options.max_in_flight
    if in_hand is not None:
        # A new group: nothing of it is recorded yet, its first window is kicked.
        first = range(min(window, len(in_hand))) if window else None
        await kick({i: in_hand[i] for i in first} if first is not None else in_hand)
        return
    keys = GroupKeys(ctx.config.prefix, plan.group_id)
    released = await releases.released(ctx.scripts.send, keys)  # its window, if any
    async for page in ledger.undispatched(ctx, keys, min(total, released)):
        await kick(page)


async def _not_created(
    ctx: FanInContext, group_id: str, created: Created, state: str, *, indexed: bool
) -> None:
    """Take back an index entry nothing needs; raise if a chain holds the id."""
    if created is Created.ID_IN_USE:
        if indexed:
            await group_index.remove(ctx, group_id)  # nothing of the group was written
        raise IdInUseError(workflow_id=shown(group_id), holder="chain")
    if indexed and state in FINISHED:
        await group_index.remove(ctx, group_id)  # over: nothing to sweep
    if created is Created.OTHER_PLAN:
        raise GroupPlanConflictError(group_id=shown(group_id))


async def take_over(
    ctx: FanInContext,
    keys: GroupKeys,
    made: Creation,
    *,
    own_token: str,
    first: ledger.Chunk,
    parts: AsyncGenerator[ledger.Chunk, None],
    retried: bool,
    seals: bool = True,
) -> int:
    """An earlier planner died mid-way: seal its ledger; the total it holds.

    The same planner again (its token) writes its chunks again, nothing
    changing twice; another only seals what the ledger holds. ``seals``:
    False for a group planned open, whose caller seals it.
    """
    token, written, total = made.token, False, 0
    if not made.sealed and token == own_token:
        written, total = await _write(ctx, keys, token, first, seals=seals)
    if written:
        _, total = await write_rest(
            ctx,
            keys,
            token,
            parts,
            total,
            sealed=first.last,
            retried=retried,
            seals=seals,
        )
        return total
    await parts.aclose()
    _, total = await ctx.scripts.append_ledger(
        keys, token=token, first=0, members=(), seal=seals
    )
    return total


async def _write(
    ctx: FanInContext, keys: GroupKeys, token: str, chunk: ledger.Chunk, *, seals: bool
) -> tuple[bool, int]:
    """Append one chunk; False: the ledger was sealed by another (taken over).

    With the ledger's total after the call. ``seals``: its last chunk seals it.
    """
    return await ctx.scripts.append_ledger(
        keys,
        token=token,
        first=chunk.first,
        members=chunk.entries,
        seal=chunk.last and seals,
    )


async def write_rest(
    ctx: FanInContext,
    keys: GroupKeys,
    token: str,
    parts: AsyncGenerator[ledger.Chunk, None],
    total: int,
    *,
    sealed: bool,
    retried: bool,
    seals: bool = True,
) -> tuple[bool, int]:
    """Append every further chunk; False when the ledger was sealed meanwhile.

    Another planner (or the sweep) sealed it: what it holds is the group, and
    is kicked. An error of the members' source (a bad member, the caller's
    iterator raising), a ledger short of chunks written before (Redis lost the
    group) or a source ending before its last chunk (``sealed``: the first
    was) abandons the group, nothing kicked, and raises. ``total``: the
    ledger's so far; returned with the flag. ``seals``: the last chunk seals
    the ledger (not a group planned open: ``sealed`` then says the last came).
    """
    while True:
        try:
            chunk = await anext(parts)
        except StopAsyncIteration:
            break
        except Exception as error:  # noqa: BLE001  the source's (raised again)
            return await _abandon(ctx, keys, token, error, total=total, retried=retried)
        if total < chunk.first:  # chunks written before it are lost
            lost = GroupLostError(group_id=shown(keys.group_id))
            return await _abandon(ctx, keys, token, lost, total=total, retried=retried)
        written, total = await _write(ctx, keys, token, chunk, seals=seals)
        if not written:
            logger.warning(
                "Group %s: its ledger was sealed by another planner or the "
                "sweep; members after %d are not part of it",
                keys.group_id,
                chunk.first - 1,
            )
            return False, total
        sealed = chunk.last
    if not sealed:
        ended = RuntimeError(f"group {keys.group_id}: its chunks ended unsealed")
        return await _abandon(ctx, keys, token, ended, total=total, retried=retried)
    return True, total


async def _abandon(
    ctx: FanInContext,
    keys: GroupKeys,
    token: str,
    error: Exception,
    *,
    total: int,
    retried: bool,
) -> tuple[bool, int]:
    """Planning cannot go on: take back what was written (nothing was kicked), raise.

    Should the ledger have been sealed meanwhile by another planner or the
    sweep, the group runs as it holds (``total``): ``(False, total)``. Redis away
    while taking it back: raised for a planner that is ``retried`` (the retry
    meets ``error`` again and takes it back), else logged, and ``error`` wins.
    """
    try:
        if not await ctx.scripts.abandon_group(keys, token=token):
            logger.warning(
                "Group %s: its plan failed (%s) after its ledger was sealed by "
                "another planner or the sweep; the group runs as it holds it",
                keys.group_id,
                error,
            )
            return False, total
        await group_index.remove(ctx, keys.group_id)
    except (RedisError, OSError) as cleanup:
        if retried:
            raise
        logger.warning(
            "Group %s: its plan failed (%s); what it wrote was not taken back (%s)",
            keys.group_id,
            error,
            cleanup,
        )
    raise error
