"""What may name a group or a chain, and the ids the library derives from them.

Ids go into keys, labels and task ids. A caller's id uses letters, digits and
``-_.:``; every id the library derives (a member's task id, a chain's step,
its undo chain, ...) joins its parts with ``~``, which a caller's id may not
contain: no id a caller gives can equal one the library derives. Derived ids
cannot equal each other either: the parts before each ``~`` name one group or
one chain (a group and a chain never share an id), and the part after it is
the member or step it derives.
"""

import re
from functools import lru_cache

from taskiq_fanin.domain.exceptions import (
    InvalidChainIdError,
    InvalidGroupIdError,
    InvalidWorkflowIdError,
    shown,
)

#: Joins the parts of an id the library derives; never in a caller's id.
SEPARATOR = "~"
# Letters, digits and ``-_.:``; no braces (they would break the hash tag).
ID_CHARACTERS = re.compile(r"[A-Za-z0-9_.:\-]+")
#: What a derived id is made of: a caller's characters and the separator.
DERIVED_ID_CHARACTERS = re.compile(r"[A-Za-z0-9_.:\-~]+")
#: The longest id a caller may give a group or a chain, wherever it is given
#: (planning, handles, status, the CLI). An id the library derives from one
#: (``<chain>~<step>``, ``<group>~<member>~r2``, ...) is that id, then its parts.
LONGEST_ID = 128


def is_valid_id(value: str, *, derived: bool = False) -> bool:
    """True when ``value`` can name a group or chain in a key.

    ``derived``: the id may be one the library derives (longer, with ``~``).
    """
    if derived and SEPARATOR in value:
        root, _, parts = value.partition(SEPARATOR)
        return is_valid_id(root) and _derived_characters(parts)
    return 0 < len(value) <= LONGEST_ID and _id_characters(value)


def is_derived(value: str) -> bool:
    """True when ``value`` has the shape of an id the library derives."""
    return SEPARATOR in value


@lru_cache(maxsize=4096)
def _id_characters(value: str) -> bool:
    # Every member of a group carries its id: checked once, not once each.
    return ID_CHARACTERS.fullmatch(value) is not None


@lru_cache(maxsize=4096)
def _derived_characters(value: str) -> bool:
    return DERIVED_ID_CHARACTERS.fullmatch(value) is not None


def _reason(value: object, *, derived: bool) -> str | None:
    """Why ``value`` cannot be an id, or ``None`` when it can."""
    if not isinstance(value, str):
        return "must be a string"
    if is_valid_id(value, derived=derived):
        return None
    if not derived and SEPARATOR in value and is_valid_id(value, derived=True):
        return f"'{SEPARATOR}' is reserved for ids the library derives: use another"
    return f"use 1 to {LONGEST_ID} letters, digits or '-_.:' (no braces or spaces)"


def validate_group_id(group_id: str, *, derived: bool = False) -> str:
    """Return ``group_id`` unchanged, or raise if it cannot name a group."""
    reason = _reason(group_id, derived=derived)
    if reason is not None:
        raise InvalidGroupIdError(group_id=shown(group_id), reason=reason)
    return group_id


def validate_chain_id(chain_id: str, *, derived: bool = False) -> str:
    """Return ``chain_id`` unchanged, or raise if it cannot name a chain."""
    reason = _reason(chain_id, derived=derived)
    if reason is not None:
        raise InvalidChainIdError(chain_id=shown(chain_id), reason=reason)
    return chain_id


def validate_lookup_id(workflow_id: str) -> str:
    """An id looked up as a group or a chain: a caller's, or one derived."""
    reason = _reason(workflow_id, derived=True)
    if reason is not None:
        value = shown(workflow_id)
        raise InvalidWorkflowIdError(group_id=value, chain_id=value, reason=reason)
    return workflow_id


def _derive(parent: str, part: str) -> str:
    return f"{parent}{SEPARATOR}{part}"


def member_task_id(group_id: str, index: int) -> str:
    """A member's task id (and the chain id of a member that is a chain)."""
    return _derive(group_id, str(index))


def redriven_member_id(member_id: str, attempt: int) -> str:
    """The chain id of a member that is a chain, started again by the sweep."""
    return _derive(member_id, f"r{attempt}")


def continuation_task_id(group_id: str, kind: str) -> str:
    """A group's continuation's task id: ``then`` or ``on_error``."""
    return _derive(group_id, kind)


def step_id(chain_id: str, step: int) -> str:
    """A chain step's task id, and the group id of a step that is a group."""
    return _derive(chain_id, str(step))


def chain_on_error_id(chain_id: str) -> str:
    """The task id of a chain's ``on_error``."""
    return _derive(chain_id, "on_error")


def undo_chain_id(chain_id: str) -> str:
    """The id of the chain that runs a chain's compensations."""
    return _derive(chain_id, "undo")


def step_undo_id(chain_id: str, step: int) -> str:
    """The id of the compensation of a step that ran while its chain was cancelled."""
    return _derive(chain_id, f"undo{step}")
