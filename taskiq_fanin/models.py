"""The values beside the top-level ones: options, policies, states, descriptions.

``GroupResult``, ``GroupStatus``, ``ChainStatus``, ``ChainFailure`` and
``MemberError`` are at the top level, ``taskiq_fanin``; here are the option
values they and ``group(...)`` refer to, and the types ``group(...)`` and
``chain(...)`` describe a workflow with before it is kicked.
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
from taskiq_fanin.transport.outcome_batching import OutcomeBatching

__all__ = [
    "Chain",
    "ChainState",
    "Durability",
    "FailurePolicy",
    "FanInConfig",
    "Group",
    "GroupOptions",
    "GroupState",
    "OnErrorState",
    "OutcomeBatching",
    "SweepPolicy",
    "WaitingGuard",
]
