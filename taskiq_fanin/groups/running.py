"""Which group members run in this worker: their outcomes' calls wait for them.

A member's label is parsed once, when its body is about to run; the reference
goes with the member to its recording. The outcome batcher hears only that a
member of a group runs here and when it is gone (``transport/outcome_batching.py``).
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from taskiq import TaskiqMessage

from taskiq_fanin.domain.labels import MemberRef
from taskiq_fanin.storage.keys import group_keys
from taskiq_fanin.transport.outcome_batching import (
    GroupCallKey,
    OutcomeBatcher,
    group_call_key,
)


@dataclass(slots=True)
class _Run:
    message: TaskiqMessage
    member: MemberRef
    group: GroupCallKey
    task: "asyncio.Task[Any] | None"


class RunningMembers:
    """The members running here, by message; each start is ended once."""

    def __init__(self, batcher: OutcomeBatcher, *, prefix: str) -> None:
        self._batcher = batcher
        self._prefix = prefix
        self._orphan_check_every = batcher.tuning.orphan_check_every
        self._runs: dict[int, _Run] = {}
        self._finishing = 0

    def __len__(self) -> int:
        return len(self._runs)

    def started(self, message: TaskiqMessage) -> None:
        """``message`` starts running here (a no-op for no member)."""
        member = MemberRef.from_labels(message.labels)
        if member is None:
            return
        self.ended(message)  # the same message started twice: ended first
        keys = group_keys(self._prefix, member.group_id).recording
        group = group_call_key(keys, member.token)
        self._runs[id(message)] = _Run(message, member, group, asyncio.current_task())
        self._batcher.member_running(group, member.index)

    def finishing(self, message: TaskiqMessage) -> MemberRef | None:
        """``message`` is about to record its outcome: the member it is, if any.

        Its reference as parsed when it started; parsed now only for a message
        whose start was not seen here. Now and then, first end the members whose
        task ended unreported.
        """
        self._finishing += 1
        if self._finishing % self._orphan_check_every == 0:
            ended = [r for r in self._runs.values() if r.task and r.task.done()]
            for orphan in ended:
                self.ended(orphan.message)
        run = self._runs.get(id(message))
        if run is not None and run.message is message:
            return run.member
        return MemberRef.from_labels(message.labels)

    def ended(self, message: TaskiqMessage) -> None:
        """``message`` is done here, recorded or not (a no-op for no member)."""
        run = self._runs.get(id(message))
        if run is None or run.message is not message:
            return  # the id may be another message's by now
        del self._runs[id(message)]
        self._batcher.member_gone(run.group, run.member.index)
