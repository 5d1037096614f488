"""Every error taskiq-fanin raises or records, under ``FanInError``.

Catch ``FanInError`` for any of them; ``model/errors.py`` says which are bad
input (raised before anything is written) and which are met later, in a worker
or as a recorded outcome.
"""

from taskiq_fanin.model.errors import (
    ArgumentsMismatchError,
    ChainCancelledError,
    ChainGivenUpError,
    FanInError,
    GroupResultsExpiredError,
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
    NotReplicatedError,
    RunningElsewhereError,
    UnknownTaskError,
)
from taskiq_fanin.model.planning_errors import GroupLostError

__all__ = [
    "ArgumentsMismatchError",
    "ChainCancelledError",
    "ChainGivenUpError",
    "FanInError",
    "GroupLostError",
    "GroupResultsExpiredError",
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
    "MemberNotSerializableError",
    "MemberTooLargeError",
    "MiddlewareNotFoundError",
    "NestingTooDeepError",
    "NotATaskError",
    "NotReplicatedError",
    "RunningElsewhereError",
    "UnknownTaskError",
]
