"""Starting chains and kicking their steps: no step waits on another.

A step that succeeds on its last attempt enqueues the next one with its result;
the plan of the remaining steps travels with each message (``ChainCursor``). A
workflow record in Redis makes "enqueue next" happen once per step. A step may
be a group: its continuation carries the chain on with the ``GroupResult``.
"""

import hashlib
import json
import logging
import secrets
from collections.abc import Sequence
from typing import Any, overload

from taskiq_fanin.chains import chain_index, record, tasks
from taskiq_fanin.chains.chain_validation import validate_chain, validate_kick
from taskiq_fanin.chains.cursor import ChainCursor, PendingStep
from taskiq_fanin.chains.membership import settle_member
from taskiq_fanin.context import FanInContext, new_delivery
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import IdInUseError, shown
from taskiq_fanin.domain.labels import MemberRef, retry_labels
from taskiq_fanin.domain.results import ChainState
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec, named_steps, step_name
from taskiq_fanin.groups import workers_seen
from taskiq_fanin.groups.group_validation import GroupPlan, validate_group
from taskiq_fanin.groups.planning import plan_group
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.replies import Started

logger = logging.getLogger("taskiq_fanin")

#: Stands for "no previous result": the first step, or one the sweep repeats.
NOTHING: Any = object()


async def start(
    ctx: FanInContext,
    spec: ChainSpec,
    *,
    chain_id: str,
    member: MemberRef | None = None,
    depth: int = 1,
    checked: bool = False,
    token: str | None = None,
) -> bool:
    """Write the chain's record and kick its first step; False if it existed.

    ``checked``: the library starts a plan it checked already (a group's chain
    member, compensations): see :func:`validate_chain`. ``token``: the chain's,
    when a caller that may retry chose it: starting again with it kicks the
    first step again while the chain has not moved (a kick twice is harmless).
    A group of the same id refuses it (``IdInUseError``): nothing is left of it.
    """
    validate_chain(ctx, spec, depth=depth, checked=checked)
    spec = named_steps(spec)  # its group steps are named after it
    first = spec.steps[0]
    cursor = ChainCursor(
        id=chain_id,
        token=token or secrets.token_hex(8),
        index=0,
        rest=spec.steps[1:],
        on_error=spec.on_error,
        member=member.label_value if member is not None else None,
        depth=depth,
        undo=first.compensation if isinstance(first, Signature) else None,
        keep_going=spec.keep_going,
    )
    # The sweep looks at the chain once its deadline passes with no move; the
    # entry goes first, so that no record is ever out of the index.
    indexed = await chain_index.add(ctx, chain_id, ms(ctx.config.deadline))
    started = await ctx.chain_scripts.start(
        record.keys_of(ctx, chain_id),
        token=cursor.token,
        names=json.dumps([step_name(step) for step in spec.steps]),
        steps=len(spec.steps),
        ttl_ms=ms(ctx.config.ttl),
        pending=pending_json(cursor, first, NOTHING),
        deadline_ms=ms(ctx.config.deadline),
        member=cursor.member or "",
        version=spec.version or "",
        workflow=spec.name or "",
    )
    if started is Started.ID_IN_USE:
        if indexed:
            await chain_index.remove(ctx, chain_id)
        raise IdInUseError(workflow_id=shown(chain_id), holder="group")
    if started is Started.CREATED:
        await kick_step(ctx, cursor, first, previous=NOTHING)
        if isinstance(first, Signature):  # is any worker on its queue?
            await workers_seen.warn_if_unserved(
                ctx, first.task_name, f"Chain {chain_id}"
            )
    return started is Started.CREATED


async def start_member(
    ctx: FanInContext,
    spec: ChainSpec,
    *,
    chain_id: str,
    member: MemberRef,
    depth: int,
    earlier: Sequence[str] = (),
) -> bool:
    """Start a chain that is member ``member`` of a group (the group engine's port).

    ``earlier``: the ids of the chains the member was before (the sweep re-drives
    it): one of them that has ended, its member unrecorded (its worker died in
    between), or cancelled, is recorded instead; it does not start over.
    """
    for earlier_id in earlier:
        found = await ctx.chain_scripts.read(record.keys_of(ctx, earlier_id))
        if found.state not in (ChainState.MISSING, ChainState.RUNNING):
            await settle_member(ctx, found, delivery=new_delivery())
            return False
    return await start(
        ctx,
        spec,
        chain_id=chain_id,
        member=member,
        depth=depth,
        checked=True,
        token=member_token(member, chain_id),
    )


def member_token(member: MemberRef, chain_id: str) -> str:
    """The token of a chain that is a group member: the same at every kick of it.

    A planner that retries, one that takes over, or an outcome releasing a
    window again starts it again under this token: told the chain is its own
    and has not moved, it kicks the first step again (harmless) rather than
    leave a chain whose first kick failed to the sweep a deadline on.
    """
    seed = f"{member.token}:{chain_id}".encode()
    return hashlib.sha256(seed).hexdigest()[:16]


async def kick_step(
    ctx: FanInContext,
    cursor: ChainCursor,
    step: Signature | GroupSpec,
    *,
    previous: Any,
    delivery: str | None = None,
    plan: GroupPlan | None = None,
    attempt: int = 0,
) -> None:
    """Enqueue one step: a task with the previous result, or a group.

    ``delivery``: of the step that kicks this one, which may retry; a group
    step planned again under it goes on dispatching its members. ``plan``: a
    group step's, when :func:`prepare_step` has made it already. ``attempt``:
    the sweep's copy of a task step goes as the attempt after a lost one.
    """
    label = cursor.label()  # the rest of the plan, serialized once
    if isinstance(step, Signature):
        called = _with_previous(step, previous)
        retry = retry_labels(attempt, sweep_copy=attempt > 0)
        await (
            called.with_labels(**label, **retry)
            .kicker(ctx.kicker_for(called.task_name))
            .with_task_id(cursor.step_id)
            .kiq(*called.args, **called.kwargs)
        )
        return
    if plan is None:
        if delivery is None and cursor.index == 0:
            delivery = first_group_token(cursor)
        plan = _group_plan(ctx, cursor, step, previous, label=label, delivery=delivery)
    await plan_group(ctx, plan)


def first_group_token(cursor: ChainCursor) -> str:
    """The token of a chain's first step when it is a group: the same at every kick.

    No step's delivery kicks it: the chain's starter does, and a starter that
    retries (or the sweep repeating the step) plans it again under this token,
    going on where the last try stopped (``member_token``'s reason).
    """
    seed = f"{cursor.token}:{cursor.step_id}".encode()
    return hashlib.sha256(seed).hexdigest()[:16]


def prepare_step(
    ctx: FanInContext,
    cursor: ChainCursor,
    step: Signature | GroupSpec,
    previous: Any,
    *,
    delivery: str,
) -> GroupPlan | None:
    """Raise the error :func:`kick_step` would meet with this input, kicking nothing.

    Asked before the chain moves on to ``step``: a previous result the step
    cannot take (not JSON, or making a group member too large) fails the step
    that returned it, rather than leaving the chain moved on with nothing kicked.
    A group step's plan, checked, is handed back for the kick to use.
    """
    if isinstance(step, Signature):
        what = f"step {cursor.index + 1} of the chain"
        validate_kick(what, _with_previous(step, previous))
        return None
    label = cursor.label()
    return _group_plan(ctx, cursor, step, previous, label=label, delivery=delivery)


def _group_plan(
    ctx: FanInContext,
    cursor: ChainCursor,
    step: GroupSpec,
    previous: Any,
    *,
    label: dict[str, str],
    delivery: str | None,
) -> GroupPlan:
    # The group's continuations carry the chain on: every other option is the step's.
    options = step.options.model_copy(
        update={
            "then": Signature(task_name=tasks.CONTINUE_TASK_NAME).with_labels(**label),
            "on_error": Signature(task_name=tasks.FAIL_TASK_NAME).with_labels(**label),
        }
    )
    members = tuple(_with_previous(member, previous) for member in step.members)
    spec = GroupSpec(members=members, options=options, group_id=cursor.step_id)
    return validate_group(
        ctx,
        spec,
        depth=cursor.depth + 1,
        token=delivery,
        chain_step=True,
        derived_id=True,
    )


@overload
def _with_previous(member: Signature, previous: Any) -> Signature: ...
@overload
def _with_previous(member: ChainSpec, previous: Any) -> ChainSpec: ...
def _with_previous(
    member: Signature | ChainSpec, previous: Any
) -> Signature | ChainSpec:
    """A step, or a group step's member, taking the previous step's result first.

    ``Signature.immutable()`` opts out; a chain member takes it at its first
    step; the first step of a chain (``NOTHING``) takes none.
    """
    if previous is NOTHING:
        return member
    if isinstance(member, Signature):
        return member.prepend(previous) if member.pass_result else member
    first = member.steps[0] if member.steps else None
    if isinstance(first, Signature) and first.pass_result:
        steps = (first.prepend(previous), *member.steps[1:])
        return member.model_copy(update={"steps": steps})
    return member


def pending_json(
    cursor: ChainCursor, step: Signature | GroupSpec, previous: Any
) -> str:
    """A step's kick as JSON, kept in the record until the next one replaces it."""
    has_previous = previous is not NOTHING
    kick = PendingStep(
        cursor=cursor,
        step=step,
        previous=previous if has_previous else None,
        has_previous=has_previous,
    )
    return kick.model_dump_json(fallback=repr)


async def next_step_again(ctx: FanInContext, cursor: ChainCursor) -> None:
    """Kick again the step after ``cursor``'s, whose kick was lost.

    A copy of the cursor's step came back (``beginStep``'s ``KICK_NEXT``): the
    chain moved past it a lease ago and no copy of the next step began, as when
    Redis went away between the advance and its kick for longer than the
    hook's ``retry_for``. Kicked as the record keeps it, unless the chain has
    moved since; a kick that meets Redis away raises, and the copy comes back.
    """
    found = await ctx.chain_scripts.read(record.keys_of(ctx, cursor.id))
    moved_on = found.state is ChainState.RUNNING and found.step == cursor.index + 1
    if not (moved_on and found.token == cursor.token and found.pending):
        return
    kick = PendingStep.model_validate_json(found.pending)
    if isinstance(kick.step, GroupSpec):
        # A group step begins no run lease: planned, it is the group's to run.
        group_meta = GroupKeys(ctx.config.prefix, kick.cursor.step_id).meta
        if await ctx.redis.exists(group_meta):
            return
    logger.info(
        "Chain %s: step %d's kick was lost: kicked again", cursor.id, cursor.index + 2
    )
    await repeat(ctx, found.pending)


async def repeat(ctx: FanInContext, pending: str, *, attempt: int = 0) -> None:
    """Kick again a step as the record kept it (a stuck chain's, for the sweep).

    Its deterministic task id and the step guard keep a copy that was only slow
    from moving the chain twice. ``attempt``: as which it goes (a copy of it
    began and was lost: the one after, which takes no held lease over).
    """
    kick = PendingStep.model_validate_json(pending)
    previous = kick.previous if kick.has_previous else NOTHING
    await kick_step(ctx, kick.cursor, kick.step, previous=previous, attempt=attempt)
