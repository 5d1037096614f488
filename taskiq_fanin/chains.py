"""Running chains: continuation-style sequences in which no step waits on another.

A step that succeeds on its last attempt enqueues the next one with its result;
the plan of the remaining steps travels with each message (the ``fanin_chain``
label, JSON), so no coordinator is needed. A workflow record in Redis makes
"enqueue next" happen once per step, says where the chain is, and keeps the
compensations to run if a later step fails for good or the chain is cancelled.
A step may be a group: its continuation carries the chain on with the
``GroupResult``. A chain may be a group member: it counts as finished when its
last step finishes, or fails for good.
"""

import json
import logging
import secrets
from typing import TYPE_CHECKING, Any

from taskiq import TaskiqResult

from taskiq_fanin import completion
from taskiq_fanin.chain_record import Advanced, ChainState
from taskiq_fanin.chain_spec import (
    Chain,
    ChainCursor,
    ChainFailure,
    GroupStep,
    PendingStep,
    step_name,
    validate_chain,
)
from taskiq_fanin.errors import ChainCancelledError, GroupStepFailedError
from taskiq_fanin.keys import (
    LONGEST_DERIVED_ID,
    ChainKeys,
    chain_index_key,
    validate_group_id,
)
from taskiq_fanin.labels import MemberRef
from taskiq_fanin.models import GroupResult, MemberError
from taskiq_fanin.signature import Signature

if TYPE_CHECKING:
    from taskiq_fanin.middleware import FanInMiddleware

logger = logging.getLogger("taskiq_fanin.chains")

#: The library's own task that carries a chain on past a group step.
CONTINUE_TASK_NAME = "taskiq_fanin.continue_chain"
#: The library's own task that fails a chain whose group step failed (policy fail).
FAIL_TASK_NAME = "taskiq_fanin.fail_chain"


async def start(
    fanin: "FanInMiddleware",
    spec: Chain,
    *,
    chain_id: str,
    member: str | None,
    depth: int,
) -> bool:
    """Write the chain's record and kick its first step; False if it existed."""
    validate_chain(fanin, spec, depth=depth)
    first = spec.steps[0]
    cursor = ChainCursor(
        id=chain_id,
        token=secrets.token_hex(8),
        index=0,
        rest=spec.steps[1:],
        on_error=spec.on_error,
        member=member,
        depth=depth,
        undo=first.compensation if isinstance(first, Signature) else None,
    )
    created = await fanin.chain_record.start(
        ChainKeys(fanin.config.prefix, chain_id),
        token=cursor.token,
        now_ms=completion.now_ms(),
        names=json.dumps([step_name(step) for step in spec.steps]),
        steps=len(spec.steps),
        ttl_ms=int(fanin.config.ttl * 1000),
        pending=pending_json(cursor, first, _NOTHING),
    )
    if created:
        # The sweep looks at the chain once its deadline has passed with no move.
        await fanin.redis.zadd(
            chain_index_key(fanin.config.prefix),
            {chain_id: completion.now_ms() + int(fanin.config.deadline * 1000)},
        )
        await kick_step(fanin, cursor, first, previous=_NOTHING)
    return created


_NOTHING: Any = object()


async def kick_step(
    fanin: "FanInMiddleware",
    cursor: ChainCursor,
    step: "Signature | GroupStep",
    *,
    previous: Any,
) -> None:
    """Enqueue one step: a task with the previous result, or a group."""
    task_id = f"{cursor.id}.{cursor.index}"
    label = cursor.label()  # the rest of the plan, serialized once
    if isinstance(step, Signature):
        args = step.args
        if previous is not _NOTHING and step.pass_result:
            args = (previous, *args)
        await (
            step.with_labels(**label)
            .kicker(fanin.kicking_broker)
            .with_task_id(task_id)
            .kiq(*args, **step.kwargs)
        )
        return
    carry_on = Signature(task_name=CONTINUE_TASK_NAME).with_labels(**label)
    fail = Signature(task_name=FAIL_TASK_NAME).with_labels(**label)
    await fanin.group(
        step.members,
        then=carry_on,
        on_error=fail,
        group_id=task_id,
        failure_policy=step.failure_policy,
        sweep_policy=step.sweep_policy,
        ttl=step.ttl,
        deadline=step.deadline,
        cancellable=step.cancellable,
        depth=cursor.depth + 1,
    )


async def step_may_run(fanin: "FanInMiddleware", cursor: ChainCursor) -> bool:
    """The guard before a step runs: not cancelled, not already past it."""
    keys = ChainKeys(fanin.config.prefix, cursor.id)
    return await fanin.chain_record.guard(keys, cursor.index)


async def step_finished(
    fanin: "FanInMiddleware", cursor: ChainCursor, result: TaskiqResult[Any]
) -> None:
    """A step's last attempt ended: carry the chain on, finish it, or fail it."""
    keys = ChainKeys(fanin.config.prefix, cursor.id)
    record = fanin.chain_record
    if result.is_err:
        summary = completion.error_payload(result.error, fanin.config.max_result_bytes)
        compensations = await record.fail(
            keys,
            token=cursor.token,
            step=cursor.index,
            now_ms=completion.now_ms(),
            error=summary,
        )
        await _end_member(fanin, cursor, result)  # idempotent: before the record
        if compensations is not None:
            await _after_failure(fanin, cursor, summary, compensations)
        return
    if not cursor.rest:
        await _end_member(fanin, cursor, result)  # idempotent: before the record
        await record.finish(
            keys, token=cursor.token, step=cursor.index, now_ms=completion.now_ms()
        )
        return
    following = cursor.rest[0]
    after = cursor.model_copy(
        update={
            "index": cursor.index + 1,
            "rest": cursor.rest[1:],
            "undo": following.compensation
            if isinstance(following, Signature)
            else None,
        }
    )
    advanced = await record.advance(
        keys,
        token=cursor.token,
        step=cursor.index,
        now_ms=completion.now_ms(),
        compensation=cursor.undo.to_ledger() if cursor.undo else "",
        ttl_ms=int(fanin.config.ttl * 1000),
        pending=pending_json(after, following, result.return_value),
    )
    if advanced is Advanced.CANCELLED:
        # Cancelled while this step ran: its own effect is undone too.
        if cursor.undo is not None:
            await _compensate(
                fanin, f"{cursor.id}.undo{cursor.index}", [cursor.undo.to_ledger()]
            )
        await _end_member(fanin, cursor, cancelled_result())
        return
    if advanced is not Advanced.ADVANCED:
        return
    await kick_step(fanin, after, following, previous=result.return_value)


async def cancel(fanin: "FanInMiddleware", chain_id: str) -> bool:
    """Cancel a running chain: its completed steps' compensations run.

    False if the chain is not running (over, or unknown).
    """
    keys = ChainKeys(
        fanin.config.prefix, validate_group_id(chain_id, longest=LONGEST_DERIVED_ID)
    )
    cancelled = await fanin.chain_record.cancel(keys, now_ms=completion.now_ms())
    if cancelled is None:
        return False
    step, compensations = cancelled
    # If the chain is at a group step, that group continues nothing now.
    await completion.cancel_group(fanin, f"{chain_id}.{step}")
    await _compensate(fanin, f"{chain_id}.undo", compensations)
    return True


async def _after_failure(
    fanin: "FanInMiddleware",
    cursor: ChainCursor,
    summary: str,
    compensations: list[str],
) -> None:
    if cursor.on_error is not None:
        names = await fanin.chain_record.status(
            ChainKeys(fanin.config.prefix, cursor.id)
        )
        failure = ChainFailure(
            chain_id=cursor.id,
            step=cursor.index,
            step_name=names.step_names[cursor.index] if names.step_names else "",
            error=MemberError.model_validate_json(summary),
        )
        await (
            cursor.on_error.kicker(fanin.kicking_broker)
            .with_task_id(f"{cursor.id}.on_error")
            .kiq(failure, *cursor.on_error.args, **cursor.on_error.kwargs)
        )
    await _compensate(fanin, f"{cursor.id}.undo", compensations)


async def _compensate(
    fanin: "FanInMiddleware", undo_id: str, compensations: list[str]
) -> None:
    """Run the compensations, last completed step first, as a chain of their own."""
    if not compensations:
        return
    steps = [Signature.from_ledger(raw).immutable() for raw in reversed(compensations)]
    await start(
        fanin,
        Chain(steps=tuple(steps)),
        chain_id=undo_id,
        member=None,
        depth=1,
    )


async def _end_member(
    fanin: "FanInMiddleware", cursor: ChainCursor, result: TaskiqResult[Any]
) -> None:
    """A chain that is a group member has ended: record the member's outcome."""
    if cursor.member is None:
        return
    ref = MemberRef.from_labels({"fanin_member": cursor.member})
    if ref is not None:
        await completion.record_member(fanin, ref, result)


def cancelled_result() -> TaskiqResult[Any]:
    """The outcome recorded for a chain member whose chain was cancelled."""
    return TaskiqResult(
        is_err=True,
        log=None,
        return_value=None,
        execution_time=0.0,
        error=ChainCancelledError(),
    )


async def skipped(
    fanin: "FanInMiddleware", cursor: ChainCursor, continuation: bool
) -> None:
    """Close what a step the guard skipped leaves open, if its chain was cancelled.

    That is the group whose continuation the step was, and the group member the
    chain is.
    """
    keys = ChainKeys(fanin.config.prefix, cursor.id)
    if await fanin.chain_record.state(keys) is not ChainState.CANCELLED:
        return
    if continuation:
        group_id = f"{cursor.id}.{cursor.index}"
        await completion.complete_continuation_of(fanin, group_id)
    await _end_member(fanin, cursor, cancelled_result())


async def continue_chain(result: GroupResult) -> GroupResult:
    """The continuation of a group step: hands the GroupResult to the next step."""
    return result


async def fail_chain(result: GroupResult) -> None:
    """The error continuation of a group step (policy fail): fails the chain."""
    raise GroupStepFailedError(
        group_id=result.group_id, failed=result.failed_count, lost=len(result.lost)
    )


def pending_json(
    cursor: ChainCursor, step: "Signature | GroupStep", previous: Any
) -> str:
    """A step's kick as JSON, kept in the record until the next one replaces it."""
    has_previous = previous is not _NOTHING
    kick = PendingStep(
        cursor=cursor,
        step=step,
        previous=previous if has_previous else None,
        has_previous=has_previous,
    )
    return kick.model_dump_json(fallback=repr)


async def redrive(fanin: "FanInMiddleware", chain_id: str) -> bool:
    """Kick again the step a stuck chain is at, as it was first kicked.

    Its deterministic task id and the step guard keep a copy that was only slow
    from moving the chain twice. False when nothing was recorded to repeat.
    """
    raw = await fanin.chain_record.pending(ChainKeys(fanin.config.prefix, chain_id))
    if not raw:
        return False
    kick = PendingStep.model_validate_json(raw)
    previous = kick.previous if kick.has_previous else _NOTHING
    await kick_step(fanin, kick.cursor, kick.step, previous=previous)
    return True
