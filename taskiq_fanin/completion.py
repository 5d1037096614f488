"""Recording a member's outcome, and enqueueing a completed group's continuation.

The member that completes its group enqueues the continuation exactly once
(invariants 2, 3 and 5).
"""

import asyncio
import logging
import os
import socket
import time
from typing import TYPE_CHECKING, Any

from pydantic_core import to_json
from taskiq import TaskiqResult

from taskiq_fanin import metrics
from taskiq_fanin.keys import GroupKeys, group_keys, index_key
from taskiq_fanin.labels import ContinuationRef, MemberRef
from taskiq_fanin.models import FailurePolicy, GroupResult, MemberError
from taskiq_fanin.scripts import Begin, CollectedOutcomes, Outcome, Recorded, text
from taskiq_fanin.signature import Signature

if TYPE_CHECKING:
    from taskiq_fanin.middleware import FanInMiddleware

logger = logging.getLogger("taskiq_fanin")

#: Who claims a finaliser lease, for inspection.
CLAIMANT = f"{socket.gethostname()}:{os.getpid()}"


def now_ms() -> int:
    """The clock every script is given (scripts never read their own)."""
    return int(time.time() * 1000)


def result_payload(value: Any, limit: int, ref: MemberRef) -> str:
    """A member's result as JSON for the results hash; '' keeps nothing.

    ``None`` is not stored at all (it is what a missing entry reads as), and a result
    that is too large or not JSON is dropped with a warning: the member still counts.
    """
    if value is None:
        return ""
    try:
        payload = to_json(value).decode()
    except Exception as exc:  # noqa: BLE001 - any serializer failure means "drop"
        logger.warning(
            "Group %s member %s: result not kept (%s)", ref.group_id, ref.index, exc
        )
        return ""
    if len(payload) > limit:
        logger.warning(
            "Group %s member %s: result of %d bytes not kept (limit %d)",
            ref.group_id,
            ref.index,
            len(payload),
            limit,
        )
        return ""
    return payload


def error_payload(error: BaseException | None, limit: int) -> str:
    """A failed member's error as a small JSON summary."""
    summary = MemberError(
        type=type(error).__name__ if error is not None else "UnknownError",
        message=str(error)[:limit] if error is not None else "",
    )
    return summary.model_dump_json()


async def record_member(
    fanin: "FanInMiddleware", ref: MemberRef, result: TaskiqResult[Any]
) -> Recorded:
    """Record a member's terminal outcome; finalise the group if it completed it."""
    keys = group_keys(fanin.config.prefix, ref.group_id)
    if result.is_err:
        outcome = Outcome.FAILED
        payload = error_payload(result.error, fanin.config.max_result_bytes)
    else:
        outcome = Outcome.DONE
        payload = result_payload(
            result.return_value, fanin.config.max_result_bytes, ref
        )
    recorded, collected = await fanin.scripts.record_outcome(
        keys,
        token=ref.token,
        index=ref.index,
        outcome=outcome,
        payload=payload,
        now_ms=now_ms(),
        lease_ms=int(fanin.config.lease * 1000),
        claimant=CLAIMANT,
    )
    if recorded in (Recorded.NO_GROUP, Recorded.TOKEN_MISMATCH, Recorded.NOT_MEMBER):
        logger.warning("Group %s member %s: %s", ref.group_id, ref.index, recorded.name)
    elif recorded is Recorded.CONFLICT:
        logger.warning(
            "Group %s member %s: already recorded with the other outcome; %s ignored",
            ref.group_id,
            ref.index,
            outcome.value,
        )
    if recorded in (Recorded.RECORDED, Recorded.CLAIMED):
        metrics.member_recorded(outcome.value)
    if recorded is Recorded.CLAIMED:
        claimed = time.monotonic()
        await finalise(fanin, ref.group_id, ref.token, collected=collected)
        metrics.DISPATCH_LATENCY.observe(time.monotonic() - claimed)
    return recorded


def build_result(group_id: str, collected: CollectedOutcomes) -> GroupResult:
    """The ``GroupResult`` a continuation receives."""
    return GroupResult(
        group_id=group_id,
        total=collected.total,
        succeeded=collected.done,
        results=[collected.results.get(index) for index in collected.done],
        failed={
            index: MemberError.model_validate(collected.errors[index])
            if index in collected.errors
            else MemberError(type="UnknownError", message="")
            for index in collected.failed
        },
        lost=collected.lost,
    )


def choose_continuation(
    collected: CollectedOutcomes, result: GroupResult
) -> tuple[str, Signature | None]:
    """By the failure policy: ('then' | 'on_error' | 'none', signature to kick)."""
    if (result.failed or result.lost) and collected.policy == FailurePolicy.FAIL.value:
        kind, encoded = "on_error", collected.on_error
    else:
        kind, encoded = "then", collected.then
    if not encoded:
        return "none", None
    return kind, Signature.from_ledger(encoded)


async def finalise(
    fanin: "FanInMiddleware",
    group_id: str,
    token: str,
    *,
    claimant: str = CLAIMANT,
    collected: CollectedOutcomes | None = None,
) -> None:
    """Enqueue the continuation of a claimed group, then release the claim.

    Called by the member that claimed the finaliser lease (with the ``collected``
    outcomes its claim returned), and by the sweep when a lease ran out before
    the dispatch was recorded (or a continuation is overdue); the deterministic
    task id and ``beginContinuation`` keep a second dispatch from running twice.
    """
    keys = GroupKeys(fanin.config.prefix, group_id)
    if collected is None:
        collected = await fanin.scripts.collect_outcomes(keys, token=token)
        if collected is None:
            logger.warning("Group %s vanished before it could be finalised", group_id)
            return
    result = build_result(group_id, collected)
    kind, continuation = choose_continuation(collected, result)
    # The rescore is only a hint for the sweep: it goes beside the kick.
    await asyncio.gather(
        _rescore_to_lease_end(fanin, group_id),
        _kick_continuation(
            fanin,
            group_id,
            token=token,
            kind=kind,
            continuation=continuation,
            result=result,
        ),
    )
    dispatched = await fanin.scripts.mark_dispatched(
        keys,
        token=token,
        now_ms=now_ms(),
        dispatched=kind,
        tombstone_ms=int(fanin.config.tombstone_ttl * 1000),
        claimant=claimant,
    )
    if not dispatched:
        return  # a re-dispatch of an overdue continuation: already counted
    metrics.GROUPS_FINALISED.labels(continuation=kind).inc()
    if continuation is None:
        await _unindex(fanin, group_id)
    # Otherwise the index entry stays at the lease's end: the sweep then finds
    # the group dispatched and looks again at the continuation's deadline.
    logger.info(
        "Group %s finalised: %d done, %d failed, %d lost, continuation %s",
        group_id,
        result.done_count,
        result.failed_count,
        len(result.lost),
        kind,
        extra={
            "fanin_event": "finalised",
            "group_id": group_id,
            "done": result.done_count,
            "failed": result.failed_count,
            "lost": len(result.lost),
            "continuation": kind,
        },
    )


async def _rescore_to_lease_end(fanin: "FanInMiddleware", group_id: str) -> None:
    """Have the sweep look again when the finaliser's lease runs out.

    Should this worker die before the dispatch is recorded, the sweep then finds
    the group sooner than at its deadline. Only a hint: its failure stops
    nothing, and it never puts back an entry already removed.
    """
    lease_end = now_ms() + int(fanin.config.lease * 1000)
    try:
        await fanin.scripts.send(
            lambda pipe: pipe.zadd(
                index_key(fanin.config.prefix), {group_id: lease_end}, xx=True
            )
        )
    except Exception:  # noqa: BLE001 - a hint: the sweep finds the group anyway
        logger.warning("Group %s: rescoring its index entry failed", group_id)


async def _kick_continuation(
    fanin: "FanInMiddleware",
    group_id: str,
    *,
    token: str,
    kind: str,
    continuation: Signature | None,
    result: GroupResult,
) -> None:
    if continuation is None:
        return
    ref = ContinuationRef(group_id=group_id, token=token, kind=kind)
    await (
        continuation.with_labels(**ref.label())
        .kicker(fanin.kicking_broker)
        .with_task_id(ref.task_id)
        .kiq(result, *continuation.args, **continuation.kwargs)
    )


async def _unindex(fanin: "FanInMiddleware", group_id: str) -> None:
    """The group needs no more sweeping: out of the sweep's index."""
    await fanin.scripts.send(
        lambda pipe: pipe.zrem(index_key(fanin.config.prefix), group_id)
    )


async def _state_of(fanin: "FanInMiddleware", group_id: str, token: str) -> str | None:
    """The group's state, if the group exists and has this token."""
    keys = GroupKeys(fanin.config.prefix, group_id)
    meta = await fanin.redis.hmget(keys.meta, ["token", "state"])
    found, state = (text(value) if value is not None else None for value in meta)
    return state if found == token else None


async def may_run_continuation(
    fanin: "FanInMiddleware", ref: ContinuationRef, *, attempt: int
) -> bool:
    """One copy of a continuation runs at a time, and none after it completed.

    ``attempt`` counts the retry middleware's attempts: a later one takes over.
    """
    keys = GroupKeys(fanin.config.prefix, ref.group_id)
    begun = await fanin.scripts.begin_continuation(
        keys, token=ref.token, now_ms=now_ms(), attempt=attempt
    )
    return begun is Begin.RUN


async def complete_continuation(fanin: "FanInMiddleware", ref: ContinuationRef) -> None:
    """The continuation ran to its end: shrink the group to its tombstone."""
    keys = GroupKeys(fanin.config.prefix, ref.group_id)
    # One pipeline, in this order: should the script fail, the group's keys
    # still expire with their TTL, and nothing is left to sweep.
    await asyncio.gather(
        fanin.scripts.mark_completed(
            keys,
            token=ref.token,
            now_ms=now_ms(),
            tombstone_ms=int(fanin.config.tombstone_ttl * 1000),
        ),
        _unindex(fanin, ref.group_id),
    )


async def cancel_group(fanin: "FanInMiddleware", group_id: str) -> bool:
    """Cancel an open group: no continuation runs. False if it is not open."""
    keys = GroupKeys(fanin.config.prefix, group_id)
    cancelled = await fanin.scripts.cancel_group(keys, now_ms=now_ms())
    if cancelled:
        await _unindex(fanin, group_id)
    return cancelled


async def is_cancelled(fanin: "FanInMiddleware", ref: MemberRef) -> bool:
    """True when the member's group has been cancelled (and is still this one)."""
    return await _state_of(fanin, ref.group_id, ref.token) == "cancelled"


async def complete_continuation_of(fanin: "FanInMiddleware", group_id: str) -> None:
    """Complete a group whose continuation will not run (its chain was cancelled)."""
    keys = GroupKeys(fanin.config.prefix, group_id)
    token = await fanin.redis.hget(keys.meta, "token")
    if token is not None:
        await complete_continuation(
            fanin, ContinuationRef(group_id=group_id, token=text(token), kind="then")
        )


async def release_continuation(
    fanin: "FanInMiddleware", ref: ContinuationRef, *, attempt: int
) -> None:
    """An attempt of the continuation ended without completing it: let a retry run."""
    keys = GroupKeys(fanin.config.prefix, ref.group_id)
    await fanin.scripts.release_continuation(keys, token=ref.token, attempt=attempt)
