"""Every error taskiq-fanin raises or records, under ``FanInError``.

Catch ``FanInError`` for any of them; ``domain/exceptions.py`` says which are bad
input (raised before anything is written) and which are met later, in a worker
or as a recorded outcome.
"""

from taskiq_fanin.domain.exceptions import (
    ArgumentsMismatchError,
    ChainCancelledError,
    ChainGivenUpError,
    FanInError,
    GroupLostError,
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
    RedisUnreachableError,
    RunningElsewhereError,
    UnknownTaskError,
)

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
    "RedisUnreachableError",
    "RunningElsewhereError",
    "UnknownTaskError",
]
