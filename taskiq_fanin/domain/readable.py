"""Times as people read them, said the same way by the command line and the web page."""

from datetime import datetime


def duration(seconds: float | None, *, digits: int = 1) -> str:
    """``4.2s``, ``3m07s``, ``2h05m``; ``-`` for none.

    ``digits``: decimals under a minute (a live view that ticks each second
    shows ``4s``).
    """
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.{digits}f}s"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s"


def moment(at: datetime | None) -> str:
    """A moment in UTC to the second, or ``-``."""
    return "-" if at is None else f"{at:%Y-%m-%d %H:%M:%S} UTC"
