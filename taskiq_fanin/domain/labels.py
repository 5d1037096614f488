"""The taskiq labels that tie a message to its group, parsed strictly.

taskiq ships labels as strings (a dict label arrives as its repr), so each role is
one compact string label. A label that is not exactly what the library writes
(ASCII digits, bounded lengths, known kinds) is "not ours": it is logged once,
and the message runs as a plain task.
"""

import logging
from dataclasses import dataclass
from typing import Any

from taskiq_fanin.domain.ids import (
    chain_on_error_id,
    continuation_task_id,
    is_valid_id,
    member_task_id,
)

logger = logging.getLogger("taskiq_fanin")

#: On a member: ``<group id>/<member index>/<group token>``.
MEMBER_LABEL = "fanin_member"
#: On a member: how deep it is nested in groups and chains (for the bound).
DEPTH_LABEL = "fanin_depth"
#: On a member of a group planned with ``cancellable=True``: check before running.
CANCELLABLE_LABEL = "fanin_cancellable"
#: On a continuation: ``<group id>/<group token>/<then or on_error>``.
CONTINUATION_LABEL = "fanin_continuation"
#: On a chain's error continuation: ``<chain id>/<chain token>``, the chain
#: whose failure it is.
ON_ERROR_OF_LABEL = "fanin_on_error_of"
#: The label taskiq's retry middlewares count a task's attempts in.
RETRIES_LABEL = "_retries"
#: On the sweep's copy of a lost continuation or ``on_error``: the attempt it
#: goes as. That attempt takes no run lease over (no attempt ended), while a
#: retry middleware's later one, which copies the label, does.
SWEEP_COPY_LABEL = "fanin_sweep_copy"

#: The most digits of a count in a label (a group is never this wide).
_LONGEST_COUNT = 9
#: The longest token a group may have (planners write 8 to 16 characters).
_LONGEST_TOKEN = 64
#: The continuations a group can run.
KINDS = frozenset({"then", "on_error"})
#: Malformed label values already logged (each is logged once).
_warned: set[str] = set()
_WARN_AT_MOST = 1024


def count(value: object) -> int | None:
    """A non-negative count written in ASCII digits, or ``None``.

    ``str.isdigit`` alone takes "²" and "٣" (which ``int`` reads as 3).
    """
    text = str(value)
    if 0 < len(text) <= _LONGEST_COUNT and text.isascii() and text.isdigit():
        return int(text)
    return None


def not_ours(label: str, value: str) -> None:
    """Say once that a label of ours is malformed (the message runs as a plain task)."""
    if value in _warned or len(_warned) >= _WARN_AT_MOST:
        return
    _warned.add(value)
    logger.warning("Malformed %s label %r ignored: not ours", label, value[:200])


def _workflow(group_id: str, token: str) -> bool:
    return (
        0 < len(token) <= _LONGEST_TOKEN
        and token.isascii()
        and token.isalnum()
        and is_valid_id(group_id, derived=True)
    )


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
        return member_task_id(self.group_id, self.index)

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "MemberRef | None":
        """Parse the member label, or ``None`` if absent or malformed."""
        value = labels.get(MEMBER_LABEL)
        return None if value is None else cls.parse(str(value))

    @classmethod
    def parse(cls, value: str) -> "MemberRef | None":
        """Parse a member label's value, or ``None`` (logged once) if malformed."""
        parts = value.split("/")
        if len(parts) == 3 and _workflow(parts[0], parts[2]):
            index = count(parts[1])
            if index is not None:
                return cls(group_id=parts[0], index=index, token=parts[2])
        not_ours(MEMBER_LABEL, value)
        return None


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
        return continuation_task_id(self.group_id, self.kind)

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "ContinuationRef | None":
        """Parse the continuation label, or ``None`` if absent or malformed."""
        value = labels.get(CONTINUATION_LABEL)
        if value is None:
            return None
        parts = str(value).split("/")
        if len(parts) == 3 and _workflow(parts[0], parts[1]) and parts[2] in KINDS:
            return cls(group_id=parts[0], token=parts[1], kind=parts[2])
        not_ours(CONTINUATION_LABEL, str(value))
        return None


@dataclass(frozen=True)
class OnErrorRef:
    """The chain whose error continuation (``on_error``) a message is."""

    chain_id: str
    token: str

    def label(self) -> dict[str, str]:
        """The label that carries this reference."""
        return {ON_ERROR_OF_LABEL: f"{self.chain_id}/{self.token}"}

    @property
    def task_id(self) -> str:
        """Deterministic task id: the sweep's kick again is the same task."""
        return chain_on_error_id(self.chain_id)

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "OnErrorRef | None":
        """Parse the error continuation's label, or ``None`` if absent or malformed."""
        value = labels.get(ON_ERROR_OF_LABEL)
        if value is None:
            return None
        parts = str(value).split("/")
        if len(parts) == 2 and _workflow(parts[0], parts[1]):
            return cls(chain_id=parts[0], token=parts[1])
        not_ours(ON_ERROR_OF_LABEL, str(value))
        return None


def attempt_of(labels: dict[str, Any]) -> int:
    """Which attempt of its task a message is: 0 first, 1 the first retry, ..."""
    value = labels.get(RETRIES_LABEL)
    return 0 if value is None else count(value) or 0


def retry_labels(attempt: int, *, sweep_copy: bool) -> dict[str, object]:
    """The labels a copy kicked as ``attempt`` carries (none for attempt 0)."""
    labels: dict[str, object] = {RETRIES_LABEL: attempt} if attempt else {}
    if sweep_copy:
        labels[SWEEP_COPY_LABEL] = attempt
    return labels


def takes_over(labels: dict[str, Any]) -> bool:
    """Whether this attempt may take a held run lease over from the one before.

    A retry middleware's may (the attempt before it ended); the sweep's copy
    may not (it goes as the next attempt, but the holder may be running).
    """
    value = labels.get(SWEEP_COPY_LABEL)
    return value is None or count(value) != attempt_of(labels)


def depth_of(labels: dict[str, Any]) -> int:
    """How deep a member sits in groups and chains, from its label (0: none)."""
    value = labels.get(DEPTH_LABEL)
    return 0 if value is None else count(value) or 0
