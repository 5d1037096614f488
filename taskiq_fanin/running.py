"""Which group members run in this worker, for the outcome batcher.

A member's outcome may wait a few milliseconds for others of its group, but only
for those running here (``outcome_batching``). The middleware reports each start
and, exactly once, its end: at the end of ``post_execute``, or, since taskiq
skips ``post_execute`` when something before it fails (another middleware, the
acknowledgement), once the task that ran it is seen to have ended.
"""

import asyncio
from dataclasses import dataclass
from typing import Any

from taskiq import TaskiqMessage

from taskiq_fanin.keys import GroupKeys, group_keys
from taskiq_fanin.labels import MemberRef
from taskiq_fanin.scripts import Scripts

#: Members finishing between two looks for members whose task ended unreported
#: (a look costs a pass over the members running here; a member left over only
#: makes its group's outcomes wait in vain, for a few milliseconds each).
CHECK_EVERY = 256


@dataclass(slots=True)
class _Run:
    message: TaskiqMessage
    member: MemberRef
    keys: GroupKeys
    scripts: Scripts
    task: "asyncio.Task[Any] | None"


class RunningMembers:
    """The members running in this worker, by message."""

    def __init__(self) -> None:
        self._runs: dict[int, _Run] = {}
        self._finishing = 0

    def start(
        self, message: TaskiqMessage, scripts: Scripts | None, prefix: str
    ) -> None:
        """``message`` starts running here; if it is a member, say so."""
        member = MemberRef.from_labels(message.labels)
        if member is None or scripts is None:
            return
        self.end(message)  # the same message started twice: ended once first
        keys = group_keys(prefix, member.group_id)
        scripts.member_started(keys, token=member.token, index=member.index)
        task = asyncio.current_task()
        self._runs[id(message)] = _Run(message, member, keys, scripts, task)

    def finishing(self, message: TaskiqMessage) -> MemberRef | None:
        """``message`` is about to record its outcome: which member it is, if any.

        Now and then, first end the members whose task is over unreported.
        """
        self._finishing += 1
        if self._finishing % CHECK_EVERY == 0:
            self._end_orphans()
        run = self._runs.get(id(message))
        if run is not None and run.message is message:
            return run.member
        return MemberRef.from_labels(message.labels)

    def end(self, message: TaskiqMessage) -> None:
        """``message`` is done here (a no-op if it was no member, or ended)."""
        run = self._runs.get(id(message))
        if run is None or run.message is not message:
            return  # the id may be another message's by now
        del self._runs[id(message)]
        run.scripts.member_ended(
            run.keys, token=run.member.token, index=run.member.index
        )

    def _end_orphans(self) -> None:
        done = [run for run in self._runs.values() if run.task and run.task.done()]
        for run in done:
            self.end(run.message)
