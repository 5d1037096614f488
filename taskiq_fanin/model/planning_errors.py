"""What a caller's ``kiq()`` meets that is neither bad input nor Redis away.

Beside ``model/errors.py`` (the rest of the tree), exported with it from
``taskiq_fanin.errors``.
"""

from taskiq_fanin.model.errors import FanInError


class GroupLostError(FanInError, RuntimeError):
    """A streamed group's plan met Redis without the group: chunks let go are lost.

    Redis lost the group mid-plan (a restart without persistence, a failover
    under ``acknowledged``): its iterator, read once, cannot give those chunks
    again, so what was written is taken back and nothing is kicked. Not Redis
    away: never retried. Plan the group again from its source.
    """

    __template__ = (
        "Group {group_id} was lost from Redis while it was planned (a restart "
        "without persistence, a failover): nothing of it was kicked; build the "
        "group again from its source and plan it again"
    )
    group_id: str
