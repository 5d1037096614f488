"""The values beside the top-level ones: options, policies, states, descriptions.

``GroupResult``, ``GroupStatus``, ``ChainStatus``, ``ChainFailure`` and
``MemberError`` are at the top level, ``taskiq_fanin``; here are the option
values they and ``group(...)`` refer to, the types ``group(...)`` and
``chain(...)`` describe a workflow with before it is kicked, and what a
handle's ``progress()`` and ``outcomes()`` hand back.
"""

from taskiq_fanin.api.chains import Chain
from taskiq_fanin.api.groups import Group
from taskiq_fanin.domain.config import Durability, FanInConfig, WaitingGuard
from taskiq_fanin.domain.options import GroupOptions
from taskiq_fanin.domain.results import (
    ChainState,
    FailurePolicy,
    GroupState,
    OnErrorState,
    SweepPolicy,
)
from taskiq_fanin.domain.watching import (
    ChainProgress,
    GroupProgress,
    MemberOutcome,
    StepOutcome,
)
from taskiq_fanin.transport.outcome_batching import OutcomeBatching

__all__ = [
    "Chain",
    "ChainProgress",
    "ChainState",
    "Durability",
    "FailurePolicy",
    "FanInConfig",
    "Group",
    "GroupOptions",
    "GroupProgress",
    "GroupState",
    "MemberOutcome",
    "OnErrorState",
    "OutcomeBatching",
    "StepOutcome",
    "SweepPolicy",
    "WaitingGuard",
]
