"""What may name a group or a chain: it goes into keys, labels and task ids."""

import re
from functools import lru_cache

from taskiq_fanin.model.errors import InvalidGroupIdError, shown

# Letters, digits and ``-_.:``; no braces (they would break the hash tag).
ID_CHARACTERS = re.compile(r"[A-Za-z0-9_.:\-]+")
#: The longest id a caller may give a group or a chain.
LONGEST_ID = 128
#: Ids the library derives (``<chain>.<step>``, ``<group>.<member>.r2``, ...) may
#: be longer; lookups accept up to this.
LONGEST_DERIVED_ID = 256


def is_valid_id(value: str, *, longest: int = LONGEST_ID) -> bool:
    """True when ``value`` can name a group or chain in a key."""
    return 0 < len(value) <= longest and _id_characters(value)


@lru_cache(maxsize=4096)
def _id_characters(value: str) -> bool:
    # Every member of a group carries its id: checked once, not once each.
    return ID_CHARACTERS.fullmatch(value) is not None


def validate_group_id(group_id: str, *, longest: int = LONGEST_ID) -> str:
    """Return ``group_id`` unchanged, or raise if it cannot be used in a key."""
    if not isinstance(group_id, str):
        raise InvalidGroupIdError(group_id=shown(group_id), reason="must be a string")
    if not is_valid_id(group_id, longest=longest):
        raise InvalidGroupIdError(
            group_id=shown(group_id),
            reason=f"use 1 to {longest} letters, digits or '-_.:' "
            "(no braces or spaces)",
        )
    return group_id
