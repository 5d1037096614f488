"""``chain(...)``: steps described, then started on a broker."""

import secrets
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from taskiq_fanin.api.broker import Target, context_of
from taskiq_fanin.api.checks import wrong_kind
from taskiq_fanin.api.retries import cancel_chain_riding, riding
from taskiq_fanin.chains import chain_watch, launch, record
from taskiq_fanin.context import FanInContext
from taskiq_fanin.domain.exceptions import InvalidChainError, InvalidOptionError, shown
from taskiq_fanin.domain.options import MAX_VERSION
from taskiq_fanin.domain.results import ChainStatus
from taskiq_fanin.domain.signature import Signature, TaskRef, as_signature
from taskiq_fanin.domain.spec import ChainSpec, GroupSpec
from taskiq_fanin.domain.watching import ChainProgress, StepOutcome
from taskiq_fanin.storage.keys import validate_chain_id


@dataclass(frozen=True)
class ChainHandle:
    """What starting a chain hands back: its id, its status, a way to cancel it."""

    chain_id: str
    _ctx: FanInContext = field(repr=False, compare=False)

    async def status(self) -> ChainStatus:
        """The chain's workflow record now."""
        return await record.status(self._ctx, self.chain_id)

    async def progress(self) -> ChainProgress:
        """The step it is at (from 1), and a group step's progress."""
        return await chain_watch.chain_progress(self._ctx, self.chain_id)

    def outcomes(self, *, after: str | None = None) -> AsyncIterator[StepOutcome]:
        """Each step's end as it comes, until the chain ends.

        From the first step, or after a step outcome's ``cursor``. Raises
        ``ChainNotFoundError`` when Redis holds no such chain.
        """
        return chain_watch.follow(self._ctx, self.chain_id, after=after)

    async def cancel(self) -> bool:
        """Cancel this chain (as ``cancel(broker, id)``); False if it is not running.

        No further step runs, and the compensations of its completed steps run.
        """
        return await cancel_chain_riding(self._ctx, self.chain_id)


class Chain(ChainSpec):
    """Steps run one after another, each enqueued by the one before it.

    Build one with :func:`chain`; start it with ``await c.kiq(broker)``, or make
    it a member of a ``group(...)``.
    """

    async def kiq(self, broker: Target) -> ChainHandle:
        """Start the chain on ``broker``: its record, then its first step.

        While Redis (or the broker's) is away, starting is tried again with the
        same id and token, for the middleware's ``retry_for``, then the error
        is raised.
        """
        ctx = context_of(broker)
        chain_id = (
            validate_chain_id(self.chain_id)
            if self.chain_id is not None
            else uuid.uuid4().hex
        )
        token = secrets.token_hex(8)
        await riding(
            ctx,
            lambda: launch.start(ctx, self, chain_id=chain_id, token=token),
            what=("Starting chain", chain_id),
        )
        return ChainHandle(chain_id, ctx)


def chain_handle(target: Target, chain_id: str) -> ChainHandle:
    """The chain of this id, to read, follow or cancel: ``chain_handle(broker, id)``.

    An id that cannot name a chain raises ``InvalidChainIdError`` here.
    """
    validate_chain_id(chain_id, derived=True)
    return ChainHandle(chain_id, context_of(target))


def chain(
    *steps: Signature | GroupSpec,
    on_error: TaskRef | Signature | None = None,
    chain_id: str | None = None,
    version: str | None = None,
) -> Chain:
    """Describe a chain; nothing is written until it is kicked on a broker.

    ``await chain(a, b, c).kiq(broker)`` starts it. Each step, when its last
    attempt succeeds, enqueues the next with its result as the first argument
    (``Signature.immutable()`` opts out). A step may be a ``group(...)`` (without
    ``then``, ``on_error`` or ``group_id``): the next step receives its
    ``GroupResult``. If a step fails for good, ``on_error`` receives a
    ``ChainFailure`` and the compensations of the completed steps
    (``Signature.with_compensation``) run in reverse order. ``version``: which
    version of the code started it, kept on its record and shown by its status.
    """
    for index, step in enumerate(steps):
        if not isinstance(step, Signature | GroupSpec):
            raise wrong_kind(
                f"step {index + 1}",
                step,
                "a Signature or a group",
                error=InvalidChainError,
            )
        if getattr(step, "streamed", False):
            raise InvalidChainError(
                reason=f"step {index + 1} is a group of members from an iterator: "
                "a chain keeps its steps' members in its plan, give it a list"
            )
    if version is not None and not (
        isinstance(version, str) and 1 <= len(version) <= MAX_VERSION
    ):
        raise InvalidOptionError(
            name="version",
            value=shown(version),
            reason=f"a string of 1 to {MAX_VERSION} characters",
        )
    return Chain.model_construct(
        steps=steps,
        on_error=as_signature(on_error) if on_error is not None else None,
        chain_id=chain_id,
        version=version,
    )
