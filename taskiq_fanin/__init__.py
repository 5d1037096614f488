"""taskiq-fanin: groups and continuations for taskiq, fanned in through Redis.

No task ever waits on another: members record their own outcomes, and the one
that completes its group enqueues the continuation, exactly once.
"""

from taskiq_fanin.api.chains import Chain, ChainHandle, chain
from taskiq_fanin.api.control import (
    cancel,
    chain_status,
    group_status,
    list_chains,
    list_groups,
    status,
)
from taskiq_fanin.api.group_task import group_task
from taskiq_fanin.api.groups import Group, GroupHandle, group, group_handle
from taskiq_fanin.api.sweeping import SWEEP_TASK_NAME, register_sweep_task, sweep
from taskiq_fanin.model.errors import (
    ArgumentsMismatchError,
    ChainGivenUpError,
    FanInError,
    GroupStepFailedError,
    GroupTaskOrderError,
    GroupTaskReturnError,
    GroupTooWideError,
    IdInUseError,
    InvalidChainError,
    InvalidChainIdError,
    InvalidGroupError,
    InvalidGroupIdError,
    InvalidOptionError,
    InvalidWorkflowIdError,
    MemberNotSerializableError,
    MemberTooLargeError,
    MiddlewareNotFoundError,
    NestingTooDeepError,
    NotATaskError,
    UnknownTaskError,
)
from taskiq_fanin.model.options import GroupOptions
from taskiq_fanin.model.results import (
    ChainFailure,
    ChainState,
    ChainStatus,
    FailurePolicy,
    GroupResult,
    GroupState,
    GroupStatus,
    MemberError,
    SweepPolicy,
)
from taskiq_fanin.model.signature import Signature, signature
from taskiq_fanin.store.outcome_batching import OutcomeBatching
from taskiq_fanin.sweep.report import Finding, FindingKind, SweepAction, SweepReport
from taskiq_fanin.worker.middleware import FanInMiddleware

__all__ = [
    "SWEEP_TASK_NAME",
    "ArgumentsMismatchError",
    "Chain",
    "ChainFailure",
    "ChainGivenUpError",
    "ChainHandle",
    "ChainState",
    "ChainStatus",
    "FailurePolicy",
    "FanInError",
    "FanInMiddleware",
    "Finding",
    "FindingKind",
    "Group",
    "GroupHandle",
    "GroupOptions",
    "GroupResult",
    "GroupState",
    "GroupStatus",
    "GroupStepFailedError",
    "GroupTaskOrderError",
    "GroupTaskReturnError",
    "GroupTooWideError",
    "IdInUseError",
    "InvalidChainError",
    "InvalidChainIdError",
    "InvalidGroupError",
    "InvalidGroupIdError",
    "InvalidOptionError",
    "InvalidWorkflowIdError",
    "MemberError",
    "MemberNotSerializableError",
    "MemberTooLargeError",
    "MiddlewareNotFoundError",
    "NestingTooDeepError",
    "NotATaskError",
    "OutcomeBatching",
    "Signature",
    "SweepAction",
    "SweepPolicy",
    "SweepReport",
    "UnknownTaskError",
    "cancel",
    "chain",
    "chain_status",
    "group",
    "group_handle",
    "group_status",
    "group_task",
    "list_chains",
    "list_groups",
    "register_sweep_task",
    "signature",
    "status",
    "sweep",
]
