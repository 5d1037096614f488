"""The Redis key layout, in one place.

Every key of one group shares the hash tag ``{<group_id>}`` so that every script
touches a single Cluster slot (a chain's record and compensations share
``{<chain_id>}`` the same way). Outside them: the sweep's indexes of groups and
chains, which may be stale (readers trust each group's or chain's own keys), and
the sweep's lock.
"""

from dataclasses import dataclass
from functools import cached_property, lru_cache

from taskiq_fanin.domain.ids import (
    LONGEST_ID,
    is_valid_id,
    validate_chain_id,
    validate_group_id,
    validate_lookup_id,
)

__all__ = [
    "LONGEST_ID",
    "ChainKeys",
    "GroupKeys",
    "chain_index_key",
    "group_keys",
    "index_key",
    "is_valid_id",
    "sweep_lock_key",
    "validate_chain_id",
    "validate_group_id",
    "validate_lookup_id",
]


@dataclass(frozen=True)
class GroupKeys:
    """Names of the keys of one group."""

    prefix: str
    group_id: str

    def _key(self, part: str) -> str:
        return f"{self.prefix}:{{{self.group_id}}}:{part}"

    @property
    def meta(self) -> str:
        """Hash: total, state, token, times, continuations, policy, counts."""
        return self._key("meta")

    @property
    def plan(self) -> str:
        """Hash: member index -> serialized member (the ledger)."""
        return self._key("plan")

    @property
    def done(self) -> str:
        """Set: indexes of members that succeeded."""
        return self._key("done")

    @property
    def failed(self) -> str:
        """Set: indexes of members that failed for good."""
        return self._key("failed")

    @property
    def results(self) -> str:
        """Hash: member index -> JSON result."""
        return self._key("results")

    @property
    def errors(self) -> str:
        """Hash: member index -> JSON error summary."""
        return self._key("errors")

    @property
    def window(self) -> str:
        """Hash, of a windowed group: member index -> what its outcome released.

        ``<released index> <when> <delivery>``: the same delivery asking again
        (its reply lost) is told the index again; another, once the release's
        lease ran out, kicks it again (its first kick may have died with its
        worker); with ``r<released> -> member``, so that an entry goes once the
        member it released has an outcome (about 2 K fields). Removed when the
        group is claimed (every member has an outcome), given up or cancelled.
        """
        return self._key("window")

    @property
    def lost(self) -> str:
        """Set: indexes of members the sweep gave up on (only once it has).

        Filled a window of the ledger at a time while the group is
        ``giving_up``; it lives and goes as the done and failed sets do.
        """
        return self._key("lost")

    @property
    def outcomes(self) -> str:
        """Stream: each member's outcome as it is recorded (``recordOutcome``).

        Fields ``i`` (index), ``o`` (done, failed or skipped), ``n`` (the
        group's outcomes so far, this one included) and ``p`` (its result,
        error or reason as JSON, when it has one of at most 1 KiB; larger,
        ``c``: cut); trimmed to the
        middleware's ``outcome_stream_max``, and kept as long as the meta, so
        that a reader that comes late still reads the group's end.
        """
        return self._key("outcomes")

    @property
    def claim(self) -> str:
        """String: the finaliser's lease (who holds it, with an expiry).

        Taken by the member whose outcome completes the group (the state's move
        is the guard), or by the sweep once it has run out.
        """
        return self._key("claim")

    @cached_property
    def all(self) -> tuple[str, ...]:
        """Every key an open group may have, in the order the scripts expect them.

        The lost set comes later, when the sweep gives the group up: only the
        scripts that end a group that may have one take it (``ending``).
        """
        return (
            self.meta,
            self.plan,
            self.done,
            self.failed,
            self.results,
            self.errors,
            self.claim,
        )

    @cached_property
    def ending(self) -> tuple[str, ...]:
        """Every key, the lost set, the outcome stream: what dispatching shrinks."""
        return (*self.all, self.lost, self.outcomes)

    @cached_property
    def giving_up(self) -> tuple[str, ...]:
        """The keys a give-up's window touches (``giveUp``), in its order."""
        return (self.meta, self.done, self.failed, self.lost, self.claim, self.window)

    @cached_property
    def redriving(self) -> tuple[str, ...]:
        """The keys a re-drive pushes past the new deadline (``redriveGroup``).

        All but the lease, then the window hash (a windowed group's releases
        must live as long as the group) and the outcome stream.
        """
        return (*(k for k in self.all if k != self.claim), self.window, self.outcomes)

    @cached_property
    def recording(self) -> tuple[str, ...]:
        """The keys recording an outcome touches (``recordOutcome``), in its order."""
        return (
            self.meta,
            self.done,
            self.failed,
            self.results,
            self.errors,
            self.claim,
            self.plan,
            self.window,
            self.outcomes,
        )

    @cached_property
    def cancelling(self) -> tuple[str, ...]:
        """The keys a cancel shrinks (``cancelGroup``), in its order."""
        return (*self.all, self.window, self.outcomes)


@lru_cache(maxsize=4096)
def group_keys(prefix: str, group_id: str) -> GroupKeys:
    """The keys of a group, built once: every member of a busy group needs them."""
    return GroupKeys(prefix, group_id)


def index_key(prefix: str) -> str:
    """Sorted set of group ids scored by when the sweep should look next (ms)."""
    return f"{prefix}:index"


def chain_index_key(prefix: str) -> str:
    """Sorted set of chain ids scored by when the sweep should look next (ms)."""
    return f"{prefix}:chains"


def sweep_lock_key(prefix: str) -> str:
    """String: held (SET NX PX) by the one sweep acting at a time."""
    return f"{prefix}:sweep:lock"


def workers_key(prefix: str, queue: str) -> str:
    """String: set, expiring soon, by the workers with the middleware on ``queue``.

    Each sets it again and again while it runs.
    """
    return f"{prefix}:workers:{queue}"


@dataclass(frozen=True)
class ChainKeys:
    """Names of the keys of one chain's workflow record."""

    prefix: str
    chain_id: str

    @property
    def record(self) -> str:
        """Hash: token, state, current step, names, times, error."""
        return f"{self.prefix}:{{{self.chain_id}}}:chain"

    @property
    def compensations(self) -> str:
        """List: the compensations of the steps completed so far, in order."""
        return f"{self.prefix}:{{{self.chain_id}}}:comps"

    @property
    def all(self) -> tuple[str, str]:
        """Both keys, in the order the chain scripts expect them."""
        return (self.record, self.compensations)
