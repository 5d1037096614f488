"""Where a message stands in its chain: the plan that travels with each step.

No coordinator runs a chain: each step's message carries the rest of the plan
in its ``fanin_chain`` label, as JSON.
"""

from typing import Any

from pydantic import BaseModel

from taskiq_fanin.domain.ids import step_id
from taskiq_fanin.domain.labels import not_ours
from taskiq_fanin.domain.signature import Signature
from taskiq_fanin.domain.spec import Step

#: On a chain step: the ``ChainCursor`` as JSON.
CHAIN_LABEL = "fanin_chain"


class ChainCursor(BaseModel):
    """Where a message stands in its chain; travels as the ``fanin_chain`` label."""

    id: str
    token: str
    index: int
    rest: tuple[Step, ...] = ()
    on_error: Signature | None = None
    #: When the chain is a group member: the member label to record at its end.
    member: str | None = None
    depth: int = 1
    #: What undoes this step, remembered in the record once the step succeeds.
    undo: Signature | None = None
    #: The chain goes on past a failed step (``ChainSpec.keep_going``).
    keep_going: bool = False

    def label(self) -> dict[str, str]:
        """The label that carries this cursor."""
        return {CHAIN_LABEL: self.model_dump_json(exclude_defaults=True)}

    @property
    def step_id(self) -> str:
        """The task id of this step (and the group id, when the step is a group)."""
        return step_id(self.id, self.index)

    @classmethod
    def from_labels(cls, labels: dict[str, Any]) -> "ChainCursor | None":
        """Parse the chain label, or ``None`` if absent or malformed."""
        raw = labels.get(CHAIN_LABEL)
        if not raw:
            return None
        try:
            return cls.model_validate_json(str(raw))
        except ValueError:
            not_ours(CHAIN_LABEL, str(raw))
            return None


class PendingStep(BaseModel):
    """A step's kick as the record keeps it, so the sweep can make it again."""

    cursor: ChainCursor
    step: Step
    #: The previous step's result (as JSON would carry it); absent for step 0.
    previous: Any = None
    has_previous: bool = False
