"""taskiq-fanin: groups and continuations for taskiq, fanned in through Redis.

No task ever waits on another: members record their own outcomes, and the one
that completes its group enqueues the continuation, exactly once.
"""

from taskiq_fanin.api import Group, cancel, chain, group, group_task, status
from taskiq_fanin.chain_record import ChainState, ChainStatus
from taskiq_fanin.chain_spec import Chain, ChainFailure, ChainHandle
from taskiq_fanin.errors import (
    EmptyGroupError,
    FanInError,
    GroupStepFailedError,
    GroupTooWideError,
    InvalidGroupError,
    InvalidGroupIdError,
    InvalidOptionError,
    MemberNotSerializableError,
    MiddlewareNotFoundError,
    NestingTooDeepError,
    UnknownTaskError,
)
from taskiq_fanin.inspection import list_groups
from taskiq_fanin.middleware import FanInMiddleware
from taskiq_fanin.models import (
    FailurePolicy,
    GroupResult,
    GroupState,
    GroupStatus,
    MemberError,
    SweepPolicy,
)
from taskiq_fanin.planning import GroupHandle
from taskiq_fanin.signature import Signature, signature
from taskiq_fanin.sweep import SWEEP_TASK_NAME, register_sweep_task, sweep
from taskiq_fanin.sweep_report import Finding, FindingKind, SweepAction, SweepReport

__all__ = [
    "SWEEP_TASK_NAME",
    "Chain",
    "ChainFailure",
    "ChainHandle",
    "ChainState",
    "ChainStatus",
    "EmptyGroupError",
    "FailurePolicy",
    "FanInError",
    "FanInMiddleware",
    "Finding",
    "FindingKind",
    "Group",
    "GroupHandle",
    "GroupResult",
    "GroupState",
    "GroupStatus",
    "GroupStepFailedError",
    "GroupTooWideError",
    "InvalidGroupError",
    "InvalidGroupIdError",
    "InvalidOptionError",
    "MemberError",
    "MemberNotSerializableError",
    "MiddlewareNotFoundError",
    "NestingTooDeepError",
    "Signature",
    "SweepAction",
    "SweepPolicy",
    "SweepReport",
    "UnknownTaskError",
    "cancel",
    "chain",
    "group",
    "group_task",
    "list_groups",
    "register_sweep_task",
    "signature",
    "status",
    "sweep",
]
