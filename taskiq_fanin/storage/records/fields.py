"""Reading a hash's fields as text, ints and times, whichever way redis-py decodes."""

from collections.abc import Mapping
from typing import Any


def text(value: object) -> str:
    """A Redis reply as text, whichever way the client decodes (nil: '')."""
    if value is None:
        return ""
    return value.decode() if isinstance(value, bytes) else str(value)


RawHash = Mapping[str, str] | Mapping[bytes, bytes] | Mapping[Any, Any]
#: A chain's record keeps a failed step's error under ``failure:<step>``.
FAILURE_PREFIX = "failure:"


def as_text(raw: RawHash) -> dict[str, str]:
    """A hash as redis-py hands it back (bytes or text), as text."""
    return {text(name): text(value) for name, value in raw.items()}


def as_int(fields: Mapping[str, str], name: str, default: int = 0) -> int:
    """A count or id field; ``default`` when the record lacks it."""
    value = fields.get(name)
    return int(value) if value else default


def as_time(fields: Mapping[str, str], name: str) -> int | None:
    """A time (epoch ms) or optional number; ``None`` when the record lacks it."""
    value = fields.get(name)
    return int(value) if value else None
