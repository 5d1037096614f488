"""Starting chains and kicking their steps: no step waits on another.

A step that succeeds on its last attempt enqueues the next one with its result;
the plan of the remaining steps travels with each message (``ChainCursor``). A
workflow record in Redis makes "enqueue next" happen once per step. A step may
be a group: its continuation carries the chain on with the ``GroupResult``.
"""

import json
import secrets
from typing import Any

from taskiq_fanin.chains import record, tasks
from taskiq_fanin.chains.cursor import ChainCursor, PendingStep
from taskiq_fanin.context import FanInContext
from taskiq_fanin.groups.planning import plan_group
from taskiq_fanin.groups.validation import validate_chain, validate_group
from taskiq_fanin.model.config import ms
from taskiq_fanin.model.labels import MemberRef
from taskiq_fanin.model.signature import Signature
from taskiq_fanin.model.spec import ChainSpec, GroupSpec, step_name
from taskiq_fanin.store.keys import chain_index_key

#: Stands for "no previous result": the first step, or one the sweep repeats.
NOTHING: Any = object()


async def start(
    ctx: FanInContext,
    spec: ChainSpec,
    *,
    chain_id: str,
    member: MemberRef | None = None,
    depth: int = 1,
) -> bool:
    """Write the chain's record and kick its first step; False if it existed."""
    validate_chain(ctx, spec, depth=depth)
    first = spec.steps[0]
    cursor = ChainCursor(
        id=chain_id,
        token=secrets.token_hex(8),
        index=0,
        rest=spec.steps[1:],
        on_error=spec.on_error,
        member=member.label_value if member is not None else None,
        depth=depth,
        undo=first.compensation if isinstance(first, Signature) else None,
    )
    created = await ctx.chain_scripts.start(
        record.keys_of(ctx, chain_id),
        token=cursor.token,
        now_ms=ctx.now_ms(),
        names=json.dumps([step_name(step) for step in spec.steps]),
        steps=len(spec.steps),
        ttl_ms=ms(ctx.config.ttl),
        pending=pending_json(cursor, first, NOTHING),
    )
    if created:
        # The sweep looks at the chain once its deadline has passed with no move.
        await ctx.redis.zadd(
            chain_index_key(ctx.config.prefix),
            {chain_id: ctx.now_ms() + ms(ctx.config.deadline)},
        )
        await kick_step(ctx, cursor, first, previous=NOTHING)
    return created


async def start_member(
    ctx: FanInContext, spec: ChainSpec, *, chain_id: str, member: MemberRef, depth: int
) -> bool:
    """Start a chain that is member ``member`` of a group (the group engine's port)."""
    return await start(ctx, spec, chain_id=chain_id, member=member, depth=depth)


async def kick_step(
    ctx: FanInContext,
    cursor: ChainCursor,
    step: Signature | GroupSpec,
    *,
    previous: Any,
) -> None:
    """Enqueue one step: a task with the previous result, or a group."""
    label = cursor.label()  # the rest of the plan, serialized once
    if isinstance(step, Signature):
        args = step.args
        if previous is not NOTHING and step.pass_result:
            args = (previous, *args)
        await (
            step.with_labels(**label)
            .kicker(ctx.kicker)
            .with_task_id(cursor.step_id)
            .kiq(*args, **step.kwargs)
        )
        return
    # The group's continuations carry the chain on: every other option is the step's.
    options = step.options.model_copy(
        update={
            "then": Signature(task_name=tasks.CONTINUE_TASK_NAME).with_labels(**label),
            "on_error": Signature(task_name=tasks.FAIL_TASK_NAME).with_labels(**label),
        }
    )
    spec = GroupSpec(members=step.members, options=options, group_id=cursor.step_id)
    await plan_group(ctx, validate_group(ctx, spec, depth=cursor.depth + 1))


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


async def redrive(ctx: FanInContext, chain_id: str) -> bool:
    """Kick again the step a stuck chain is at, as it was first kicked.

    Its deterministic task id and the step guard keep a copy that was only slow
    from moving the chain twice. False when nothing was recorded to repeat.
    """
    raw = await record.pending(ctx, chain_id)
    if not raw:
        return False
    kick = PendingStep.model_validate_json(raw)
    previous = kick.previous if kick.has_previous else NOTHING
    await kick_step(ctx, kick.cursor, kick.step, previous=previous)
    return True
