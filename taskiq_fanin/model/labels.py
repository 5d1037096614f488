"""The taskiq labels that tie a message to its group.

taskiq ships labels as strings (a dict label arrives as its repr), so each role is
one compact string label, parsed defensively: a malformed label means "not ours".
"""

from dataclasses import dataclass
from typing import Any

#: On a member: ``<group id>/<member index>/<group token>``.
MEMBER_LABEL = "fanin_member"
#: On a member: how deep it is nested in groups and chains (for the bound).
DEPTH_LABEL = "fanin_depth"
#: On a member of a group planned with ``cancellable=True``: check before running.
CANCELLABLE_LABEL = "fanin_cancellable"
#: On a continuation: ``<group id>/<group token>/<then or on_error>``.
CONTINUATION_LABEL = "fanin_continuation"


@dataclass(frozen=True)
class MemberRef:
    """Which group, and which member of it, a message is."""

    group_id: str
    index: int
    token: str

    @property
    def label_value(self) -> str:
        """The member label's value: ``<group id>/<index>/<token>``."""
        return f"{self.group_id}/{self.index}/{self.token}"

    def label(self) -> dict[str, str]:
        """The label that carries this reference."""
        return {MEMBER_LABEL: self.label_value}

    @property
    def task_id(self) -> str:
        """Deterministic task id: a re-driven member is the same task."""
        return f"{self.group_id}.{self.index}"

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "MemberRef | None":
        """Parse the member label, or ``None`` if absent or malformed."""
        return cls.parse(str(labels.get(MEMBER_LABEL, "")))

    @classmethod
    def parse(cls, value: str) -> "MemberRef | None":
        """Parse a member label's value, or ``None`` if malformed."""
        parts = value.split("/")
        if len(parts) != 3 or not parts[1].isdigit():
            return None
        return cls(group_id=parts[0], index=int(parts[1]), token=parts[2])


@dataclass(frozen=True)
class ContinuationRef:
    """The group whose continuation a message is."""

    group_id: str
    token: str
    kind: str  # 'then' | 'on_error'

    def label(self) -> dict[str, str]:
        """The label that carries this reference."""
        return {CONTINUATION_LABEL: f"{self.group_id}/{self.token}/{self.kind}"}

    @property
    def task_id(self) -> str:
        """Deterministic task id: the sweep's re-dispatch is the same task."""
        return f"{self.group_id}.{self.kind}"

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "ContinuationRef | None":
        """Parse the continuation label, or ``None`` if absent or malformed."""
        parts = str(labels.get(CONTINUATION_LABEL, "")).split("/")
        if len(parts) != 3:
            return None
        return cls(group_id=parts[0], token=parts[1], kind=parts[2])


#: The label taskiq's retry middlewares count a task's attempts in.
RETRIES_LABEL = "_retries"


def attempt_of(labels: dict[str, Any]) -> int:
    """Which attempt of its task a message is: 0 first, 1 the first retry, ..."""
    try:
        return int(labels.get(RETRIES_LABEL, 0))
    except (TypeError, ValueError):
        return 0
