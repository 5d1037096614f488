"""A group's end to end duration, observed once, where its end is applied.

The scripts that end a group (``markCompleted``, ``markDispatched`` with no
continuation, ``cancelGroup``) say ``APPLIED`` to the one call that moved it:
that caller reads the meta's own times (Redis's clock) and observes the
duration, labelled by the group's workflow name and the state it ended in. A
duplicate delivery is told ``UNCHANGED`` and observes nothing.
"""

import logging

from redis.exceptions import RedisError

from taskiq_fanin import metrics
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.spec import UNNAMED
from taskiq_fanin.storage.keys import GroupKeys
from taskiq_fanin.storage.records import GroupMeta, read_fields

logger = logging.getLogger("taskiq_fanin")


async def group_ended(ctx: FanInContext, group_id: str) -> None:
    """Observe the duration of a group whose end this caller applied.

    One ``HMGET``, only with ``prometheus_client`` installed. Best effort: the
    group has ended whatever this read meets, so a Redis error is logged and
    loses this one observation, nothing else.
    """
    if not metrics.ENABLED:
        return
    keys = GroupKeys(ctx.config.prefix, group_id)
    try:
        meta = await read_fields(
            ctx.redis,
            keys.meta,
            GroupMeta,
            "token",
            "state",
            "workflow",
            "created_at",
            "completed_at",
            "cancelled_at",
        )
    except (RedisError, OSError):
        logger.warning("Group %s: its duration was not observed", group_id)
        return
    ended = meta.finished_at
    if meta.created_at is None or ended is None:
        return  # gone meanwhile (its tombstone expired)
    if not metrics.first_end(f"group:{keys.meta}:{meta.token}"):
        return
    metrics.workflow_ended(
        "group",
        meta.workflow or UNNAMED,
        meta.state.value,
        (ended - meta.created_at) / 1000,
    )
