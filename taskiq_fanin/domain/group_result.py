"""What a group's continuation receives: its results inline, or by reference.

A small group's ``GroupResult`` carries every result and error. A big one's
(more members than ``results_inline_max``) carries counts only, and its
results stay in Redis until the continuation has completed (and a tombstone
after): ``iter_results()`` and ``iter_failures()`` read them in pages, in member
order, whichever kind the result is, so a continuation's code does not depend on
its group's size. The pages are read through the worker running the
continuation (its ``FanInMiddleware``), found without the caller's help.
"""

from collections.abc import AsyncIterator, Sequence
from contextvars import ContextVar
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field, computed_field

from taskiq_fanin.domain.exceptions import MiddlewareNotFoundError
from taskiq_fanin.domain.results import MemberError

#: Member indexes one page reads at most: one bounded command per key it reads.
DEFAULT_PAGE_SIZE = 500

#: What a page holds: results (of members that succeeded), failures (errors of
#: members that failed for good), lost members (the sweep gave up on them) or
#: skipped members' reasons (their bodies raised ``Skip``).
PageKind = Literal["results", "failures", "lost", "skipped"]


class ResultPages(Protocol):
    """Reads a by-reference group's results from Redis (``storage/result_pages.py``)."""

    async def page(
        self, group_id: str, token: str, kind: PageKind, start: int, stop: int
    ) -> Sequence[tuple[int, Any]]:
        """The ``kind`` entries of members ``start .. stop - 1``, in member order.

        Raises ``GroupResultsExpiredError`` when the group's keys are gone.
        """

    async def every(
        self, group_id: str, token: str, kind: PageKind
    ) -> Sequence[tuple[int, Any]]:
        """Every ``kind`` entry at once, in member order: only for a few of them."""


@runtime_checkable
class ResultPagesSource(Protocol):
    """What holds a :class:`ResultPages` (a started ``FanInMiddleware``)."""

    @property
    def result_pages(self) -> ResultPages:
        """The reader of its by-reference results."""


#: The pages of the worker whose message runs now (set by its ``FanInMiddleware``).
running_pages: ContextVar[ResultPages | None] = ContextVar(
    "taskiq_fanin_running_pages", default=None
)


class ResultsReference(BaseModel):
    """Where a by-reference group's results are: its keys, and the counts."""

    #: The group's token: a group of the same id planned later is not this one.
    token: str
    done: int
    failed: int
    lost: int = 0
    skipped: int = 0


class GroupResult(BaseModel):
    """What a group's continuation receives as its first argument.

    Inline (a group of up to ``results_inline_max`` members), ``results`` holds
    the results of the members that succeeded, in member order, and
    ``succeeded`` their indexes in the same order. By reference
    (``by_reference``), those, ``failed`` and ``lost`` are empty and the counts
    are kept: read the entries with ``iter_results()``, ``iter_failures()``,
    ``iter_lost()`` and ``iter_skipped()``, which work on both kinds.
    """

    group_id: str
    total: int
    succeeded: list[int] = Field(default_factory=list)
    results: list[Any] = Field(default_factory=list)
    failed: dict[int, MemberError] = Field(default_factory=dict)
    lost: list[int] = Field(default_factory=list)
    #: Members whose bodies raised ``Skip``: index -> its reason.
    skipped: dict[int, str] = Field(default_factory=dict)
    #: Set when the results stay in Redis (a big group).
    reference: ResultsReference | None = None

    @property
    def by_reference(self) -> bool:
        """True when the results stay in Redis: read them with ``iter_results()``."""
        return self.reference is not None

    @computed_field  # type: ignore[prop-decorator]
    @property
    def done_count(self) -> int:
        """How many members succeeded."""
        return self.reference.done if self.reference else len(self.succeeded)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def failed_count(self) -> int:
        """How many members failed for good."""
        return self.reference.failed if self.reference else len(self.failed)

    @property
    def lost_count(self) -> int:
        """How many members the sweep gave up on."""
        return self.reference.lost if self.reference else len(self.lost)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def skipped_count(self) -> int:
        """How many members were skipped (their bodies raised ``Skip``)."""
        return self.reference.skipped if self.reference else len(self.skipped)

    @property
    def ok(self) -> bool:
        """True when every member succeeded."""
        return self.done_count == self.total

    def result_of(self, index: int) -> Any:
        """The result of member ``index``; ``KeyError`` if it did not succeed.

        Inline only: a by-reference result reads its results with
        ``iter_results()`` (``KeyError`` here, as for a member not held).
        """
        try:
            return self.results[self.succeeded.index(index)]
        except ValueError:
            raise KeyError(index) from None

    async def iter_results(
        self, *, page_size: int = DEFAULT_PAGE_SIZE, broker: object | None = None
    ) -> AsyncIterator[tuple[int, Any]]:
        """``(index, result)`` of each member that succeeded, in member order.

        By reference, read from Redis ``page_size`` members a round trip,
        through the worker running this (or ``broker``'s ``FanInMiddleware``).
        """
        if self.reference is None:
            for item in zip(self.succeeded, self.results, strict=True):
                yield item
            return
        async for item in self._paged("results", self.done_count, page_size, broker):
            yield item

    async def iter_failures(
        self, *, page_size: int = DEFAULT_PAGE_SIZE, broker: object | None = None
    ) -> AsyncIterator[tuple[int, MemberError]]:
        """``(index, error)`` of each member that failed for good, in member order."""
        if self.reference is None:
            for item in sorted(self.failed.items()):
                yield item
            return
        async for index, error in self._paged(
            "failures", self.failed_count, page_size, broker
        ):
            yield index, error

    async def iter_lost(
        self, *, page_size: int = DEFAULT_PAGE_SIZE, broker: object | None = None
    ) -> AsyncIterator[int]:
        """The index of each member the sweep gave up on, in member order."""
        if self.reference is None:
            for index in sorted(self.lost):
                yield index
            return
        async for index, _ in self._paged("lost", self.lost_count, page_size, broker):
            yield index

    async def iter_skipped(
        self, *, page_size: int = DEFAULT_PAGE_SIZE, broker: object | None = None
    ) -> AsyncIterator[tuple[int, str]]:
        """``(index, reason)`` of each member that was skipped, in member order."""
        if self.reference is None:
            for item in sorted(self.skipped.items()):
                yield item
            return
        async for index, reason in self._paged(
            "skipped", self.skipped_count, page_size, broker
        ):
            yield index, reason

    async def _paged(
        self, kind: PageKind, expected: int, page_size: int, broker: object | None
    ) -> AsyncIterator[tuple[int, Any]]:
        if page_size <= 0:
            raise ValueError("page_size must be positive")
        assert self.reference is not None
        if expected == 0:
            return
        pages, token = _pages_of(broker), self.reference.token
        if self._set_size(kind) <= page_size:  # a few: read at once, bounded reads
            for item in await pages.every(self.group_id, token, kind):
                yield item
            return
        seen = 0
        for start in range(0, self.total, page_size):
            stop = min(start + page_size, self.total)
            page = await pages.page(self.group_id, token, kind, start, stop)
            for item in page:
                yield item
            seen += len(page)
            if seen >= expected:
                return

    def _set_size(self, kind: PageKind) -> int:
        """Members of the set a page of ``kind`` reads.

        Results and skips share the done set (a skip counts as done there).
        """
        assert self.reference is not None
        reference = self.reference
        if kind in ("results", "skipped"):
            return reference.done + reference.skipped
        return reference.failed if kind == "failures" else reference.lost


def _pages_of(broker: object | None) -> ResultPages:
    """The pages of ``broker``'s middleware, else of the worker running this."""
    if broker is not None:
        for holder in (broker, *getattr(broker, "middlewares", ())):
            if isinstance(holder, ResultPagesSource):
                return holder.result_pages
        raise MiddlewareNotFoundError(
            reason="the broker has no FanInMiddleware to read a by-reference "
            "GroupResult with: broker.with_middlewares(FanInMiddleware(...))"
        )
    pages = running_pages.get()
    if pages is None:
        raise MiddlewareNotFoundError(
            reason="a by-reference GroupResult reads its results through the "
            "FanInMiddleware of the worker running it; outside a worker, pass "
            "broker= (a broker with a started FanInMiddleware)"
        )
    return pages
