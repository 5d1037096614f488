"""Recording a member's terminal outcome, in one script call (invariants 2, 5).

The outcome and its payload are made once, by whoever saw the member end (the
worker, a chain's end), and handed to :func:`record`. The member whose outcome
completes its group finalises it.
"""

import json
import logging
import time
from typing import Any

from pydantic_core import to_json
from taskiq import TaskiqResult

from taskiq_fanin import metrics
from taskiq_fanin.context import CLAIMANT, FanInContext
from taskiq_fanin.domain.config import ms
from taskiq_fanin.domain.exceptions import Skip
from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.domain.results import MemberError
from taskiq_fanin.groups import window
from taskiq_fanin.groups.finalising import finalise
from taskiq_fanin.storage.keys import group_keys
from taskiq_fanin.storage.replies import Outcome, Recorded

logger = logging.getLogger("taskiq_fanin")

#: Codes that say the member's message is not (or no longer) of a group here.
_NOT_OURS = (Recorded.NO_GROUP, Recorded.TOKEN_MISMATCH, Recorded.NOT_MEMBER)


def result_payload(value: Any, limit: int, ref: MemberRef) -> str:
    """A member's result as JSON for the results hash; '' keeps nothing.

    ``None`` is not stored at all (it is what a missing entry reads as), and a result
    that is too large or not JSON is dropped with a warning: the member still counts.
    """
    if value is None:
        return ""
    try:
        payload = to_json(value).decode()
    except (ValueError, TypeError) as exc:  # not JSON: kept out, the member counts
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
    """A failed member's error as a small JSON summary, its message cut to ``limit``."""
    summary = MemberError(
        type=type(error).__name__ if error is not None else "UnknownError",
        message=str(error)[:limit] if error is not None else "",
    )
    return summary.model_dump_json()


def outcome_of(
    ctx: FanInContext, ref: MemberRef, result: TaskiqResult[Any]
) -> tuple[Outcome, str]:
    """A member's outcome and its payload (result or error) as the group keeps it."""
    limit = ctx.config.max_result_bytes
    if isinstance(result.error, Skip):  # its reason, cut as an error's message is
        reason = str(result.error.reason)[:limit]
        return Outcome.SKIPPED, json.dumps(reason, ensure_ascii=False)
    if result.is_err:
        return Outcome.FAILED, error_payload(result.error, limit)
    return Outcome.DONE, result_payload(result.return_value, limit, ref)


async def record(
    ctx: FanInContext, ref: MemberRef, outcome: Outcome, payload: str, *, delivery: str
) -> Recorded:
    """Record a member's terminal outcome; finalise the group if it completed it.

    The outcome and its payload come made (:func:`outcome_of`, or a chain's
    record kept them). ``delivery`` names this delivery of the member: retried
    with the same one after an error, a claim whose reply was lost is finalised
    all the same. An outcome that released the next member of a windowed
    group kicks it here (``groups/window.py``).
    """
    config = ctx.config
    keys = group_keys(config.prefix, ref.group_id)
    recorded, collected, released = await ctx.scripts.record_outcome(
        keys,
        token=ref.token,
        index=ref.index,
        outcome=outcome,
        payload=payload,
        lease_ms=ms(config.finaliser_lease),
        claimant=CLAIMANT,
        delivery=delivery,
        stream_max=config.outcome_stream_max,
    )
    if recorded in _NOT_OURS:
        logger.warning("Group %s member %s: %s", ref.group_id, ref.index, recorded.name)
    elif recorded is Recorded.CONFLICT:
        logger.warning(
            "Group %s member %s: already recorded with the other outcome; %s ignored",
            ref.group_id,
            ref.index,
            outcome.value,
        )
    if recorded in (Recorded.RECORDED, Recorded.CLAIMED, Recorded.COUNTED_CANCELLED):
        metrics.member_recorded(outcome.value)
    if released is not None:
        # Before the member's message is acknowledged: raised, it is retried.
        await window.kick_released(ctx, ref, released)
    if recorded is Recorded.CLAIMED:
        claimed = time.monotonic()
        try:
            await finalise(
                ctx,
                ref.group_id,
                ref.token,
                claimant=f"{CLAIMANT}#{delivery}",  # the lease it took
                collected=collected,
            )
        finally:
            # The members whose outcomes went in the claimant's call were held
            # while it kicked the continuation (transport/outcome_batching.py).
            # Releasing them once the kick is written instead was measured
            # slower (4.1 against 2.8 ms to the continuation, N = 20:
            # benchmarks.latency_steps on 2026-12-04).
            ctx.scripts.claim_handled(keys, token=ref.token)
        metrics.DISPATCH_LATENCY.observe(time.monotonic() - claimed)
    return recorded
