"""A chain's end to end duration and its steps' queue waits, each observed once.

A chain's end is applied once by the script that makes it (``finishChain``
told ``DONE``, ``endFailingChain`` applied, ``cancelChain`` cancelling it now):
that caller reads the record's own times (Redis's clock) and observes the
duration from the chain's start, labelled by its workflow name and end state.
A step's queue wait is what ``beginStep`` tells the first copy of a step to
begin (``ChainScripts.begin_step_waited``): from the previous step's end (or
the chain's start) to now, on Redis's clock; ``record.begin_step`` observes it.
"""

import logging

from redis.exceptions import RedisError

from taskiq_fanin import metrics
from taskiq_fanin.chains.record import keys_of
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.spec import UNNAMED
from taskiq_fanin.storage.records import ChainRecord, read_fields

logger = logging.getLogger("taskiq_fanin")


async def chain_ended(ctx: FanInContext, chain_id: str) -> None:
    """Observe the duration of a chain whose end this caller applied.

    One ``HMGET``, only with ``prometheus_client`` installed; best effort (a
    Redis error loses this observation, nothing else).
    """
    if not metrics.ENABLED:
        return
    key = keys_of(ctx, chain_id).record
    try:
        found = await read_fields(
            ctx.redis,
            key,
            ChainRecord,
            "token",
            "state",
            "workflow",
            "started_at",
            "finished_at",
        )
    except (RedisError, OSError):
        logger.warning("Chain %s: its duration was not observed", chain_id)
        return
    if found.started_at is None or found.finished_at is None:
        return  # gone meanwhile
    if not metrics.first_end(f"chain:{key}:{found.token}"):
        return
    metrics.workflow_ended(
        "chain",
        found.workflow or UNNAMED,
        found.state.value,
        (found.finished_at - found.started_at) / 1000,
    )
