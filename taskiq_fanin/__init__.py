"""taskiq-fanin: groups and continuations for taskiq, fanned in through Redis.

No task ever waits on another: members record their own outcomes, and the one
that completes its group enqueues the continuation, exactly once.

Here are the verbs, the handles, what continuations and status hand back, the
middleware and the error base. The rest is in a few submodules, each with its
own ``__all__``: ``taskiq_fanin.errors`` (every error), ``taskiq_fanin.models``
(options, policies, states), ``taskiq_fanin.sweeping`` (the sweep task and its
report) and ``taskiq_fanin.inspection`` (status by kind, listings).
"""

from taskiq_fanin.api.cancellation import is_cancelled, raise_if_cancelled
from taskiq_fanin.api.chains import ChainHandle, chain, chain_handle
from taskiq_fanin.api.control import cancel, status
from taskiq_fanin.api.group_task import group_task
from taskiq_fanin.api.groups import GroupHandle, group, group_handle
from taskiq_fanin.api.sweep_task import sweep
from taskiq_fanin.domain.exceptions import FanInError, Skip
from taskiq_fanin.domain.group_result import GroupResult
from taskiq_fanin.domain.results import (
    ChainFailure,
    ChainStatus,
    GroupStatus,
    MemberError,
)
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.worker.middleware import FanInMiddleware

__all__ = [
    "ChainFailure",
    "ChainHandle",
    "ChainStatus",
    "FanInError",
    "FanInMiddleware",
    "GroupHandle",
    "GroupResult",
    "GroupStatus",
    "MemberError",
    "Signature",
    "Skip",
    "cancel",
    "chain",
    "chain_handle",
    "group",
    "group_handle",
    "group_task",
    "is_cancelled",
    "raise_if_cancelled",
    "status",
    "sweep",
]
