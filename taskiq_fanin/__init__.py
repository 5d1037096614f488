"""taskiq-fanin: groups and continuations for taskiq, fanned in through Redis.

No task ever waits on another: members record their own outcomes, and the one
that completes its group enqueues the continuation, exactly once.
"""

from taskiq_fanin.api import Group, group, group_task, status
from taskiq_fanin.errors import (
    EmptyGroupError,
    FanInError,
    GroupTooWideError,
    InvalidGroupError,
    InvalidGroupIdError,
    InvalidOptionError,
    MemberNotSerializableError,
    MiddlewareNotFoundError,
    UnknownTaskError,
)
from taskiq_fanin.middleware import FanInMiddleware
from taskiq_fanin.models import (
    FailurePolicy,
    GroupResult,
    GroupState,
    GroupStatus,
    MemberError,
)
from taskiq_fanin.planning import GroupHandle
from taskiq_fanin.signature import Signature, signature

__all__ = [
    "EmptyGroupError",
    "FailurePolicy",
    "FanInError",
    "FanInMiddleware",
    "Group",
    "GroupHandle",
    "GroupResult",
    "GroupState",
    "GroupStatus",
    "GroupTooWideError",
    "InvalidGroupError",
    "InvalidGroupIdError",
    "InvalidOptionError",
    "MemberError",
    "MemberNotSerializableError",
    "MiddlewareNotFoundError",
    "Signature",
    "UnknownTaskError",
    "group",
    "group_task",
    "signature",
    "status",
]
