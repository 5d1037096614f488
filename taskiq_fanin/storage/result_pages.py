"""Reading a by-reference group's results in pages, each a bounded command.

Members are indexed ``0 .. total - 1``, so a page of indexes ``i .. i + k`` is
read with ``SMISMEMBER`` of the done (or failed, or lost) set and ``HMGET`` of
the results (or errors) hash: a few commands of ``k`` fields each, in one round
trip, in member order. Each page checks the group's token in its meta, so keys
that expired (or a group of the same id planned since) raise
``GroupResultsExpiredError``, never an empty page.
"""

import asyncio
import json
from collections.abc import Sequence
from typing import Any

from taskiq_fanin.domain.exceptions import GroupResultsExpiredError
from taskiq_fanin.domain.group_result import PageKind
from taskiq_fanin.domain.results import MemberError
from taskiq_fanin.storage.keys import GroupKeys, group_keys
from taskiq_fanin.storage.records import GroupMeta
from taskiq_fanin.storage.records.fields import text
from taskiq_fanin.storage.replies import SKIP_FIELD
from taskiq_fanin.transport.pipeline import PipelineBatcher

_TOKEN = GroupMeta.stored_as("token")


def _decoded(kind: PageKind, index: int, raw: object) -> tuple[int, Any]:
    if kind == "results":
        return index, json.loads(text(raw)) if raw else None
    if kind == "skipped":
        return index, json.loads(text(raw)) if raw else ""
    if kind == "failures":
        if not raw:
            return index, MemberError(type="UnknownError", message="")
        return index, MemberError.model_validate_json(text(raw))
    return index, None


def _fields(kind: PageKind, indexes: list[int]) -> list[str] | list[int]:
    """The payload fields of ``indexes``: a skip's reason is under 's<index>'."""
    if kind == "skipped":
        return [f"{SKIP_FIELD}{index}" for index in indexes]
    return indexes


def _kept(kind: PageKind, value: object, skip: object) -> bool:
    """Whether a member of the set read belongs to the page.

    A done member that was skipped has no result; one with no reason was not
    skipped.
    """
    if kind == "results":
        return skip is None
    if kind == "skipped":
        return value is not None
    return True


class ResultPageReader:
    """Reads by-reference results through the shared pipeline (``ResultPages``)."""

    def __init__(self, prefix: str, pipeline: PipelineBatcher) -> None:
        self._prefix = prefix
        self._pipeline = pipeline

    async def page(
        self, group_id: str, token: str, kind: PageKind, start: int, stop: int
    ) -> Sequence[tuple[int, Any]]:
        """The ``kind`` entries of members ``start .. stop - 1``, in member order."""
        keys = group_keys(self._prefix, group_id)
        indexes = list(range(start, stop))
        send = self._pipeline
        if kind == "lost":
            found, lost = await asyncio.gather(
                send(lambda pipe: pipe.hget(keys.meta, _TOKEN)),
                send(lambda pipe: pipe.smismember(keys.lost, indexes)),
            )
            self._check(group_id, token, found)
            return [
                (index, None) for index, is_lost in zip(indexes, lost, strict=True)
                if is_lost
            ]  # fmt: skip
        members, payloads = self._of(keys, kind)
        found, present, raw, skips = await asyncio.gather(
            send(lambda pipe: pipe.hget(keys.meta, _TOKEN)),
            send(lambda pipe: pipe.smismember(members, indexes)),
            send(lambda pipe: pipe.hmget(payloads, _fields(kind, indexes))),
            self._skips(keys, kind, indexes),
        )
        self._check(group_id, token, found)
        return [
            _decoded(kind, index, value)
            for index, there, value, skip in zip(
                indexes, present, raw, skips, strict=True
            )
            if there and _kept(kind, value, skip)
        ]

    async def every(
        self, group_id: str, token: str, kind: PageKind
    ) -> Sequence[tuple[int, Any]]:
        """Every ``kind`` entry at once: only asked for when there are few."""
        keys = group_keys(self._prefix, group_id)
        send = self._pipeline
        if kind == "lost":
            found, lost = await asyncio.gather(
                send(lambda pipe: pipe.hget(keys.meta, _TOKEN)),
                send(lambda pipe: pipe.smembers(keys.lost)),
            )
            self._check(group_id, token, found)
            return [(index, None) for index in sorted(int(i) for i in lost)]
        members, payloads = self._of(keys, kind)
        found, indexes = await asyncio.gather(
            send(lambda pipe: pipe.hget(keys.meta, _TOKEN)),
            send(lambda pipe: pipe.smembers(members)),
        )
        self._check(group_id, token, found)
        ordered = sorted(int(index) for index in indexes)
        if not ordered:
            return []
        raw, skips = await asyncio.gather(
            send(lambda pipe: pipe.hmget(payloads, _fields(kind, ordered))),
            self._skips(keys, kind, ordered),
        )
        return [
            _decoded(kind, index, value)
            for index, value, skip in zip(ordered, raw, skips, strict=True)
            if _kept(kind, value, skip)
        ]

    async def _skips(
        self, keys: GroupKeys, kind: PageKind, indexes: list[int]
    ) -> list[object]:
        """Of the done members asked for results: the skipped ones' reasons."""
        if kind != "results":
            return [None] * len(indexes)
        fields = _fields("skipped", indexes)
        return list(await self._pipeline(lambda pipe: pipe.hmget(keys.errors, fields)))

    @staticmethod
    def _of(keys: GroupKeys, kind: PageKind) -> tuple[str, str]:
        if kind == "results":
            return keys.done, keys.results
        if kind == "skipped":  # skipped members are among the done ones
            return keys.done, keys.errors
        return keys.failed, keys.errors

    @staticmethod
    def _check(group_id: str, token: str, found: object) -> None:
        if text(found) != token:
            raise GroupResultsExpiredError(group_id=group_id)
