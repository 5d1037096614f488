"""A server's directory copied before it is removed, to read what it did.

Set ``LOCAL_REDIS_KEEP_LOGS`` to a directory, and every server the toolkit
stops leaves a copy of its own there (its ``redis.log``, a sentinel's
``sentinel.conf``): how a failover went, after the test that ran it.
"""

import contextlib
import os
import shutil
from pathlib import Path

#: Environment variable naming the directory the copies go to.
KEEP_LOGS_ENV = "LOCAL_REDIS_KEEP_LOGS"


def keep_copy(directory: Path) -> None:
    """Copy ``directory`` under ``$LOCAL_REDIS_KEEP_LOGS``, when it is set."""
    keep = os.environ.get(KEEP_LOGS_ENV)
    if keep:
        with contextlib.suppress(OSError):  # a copy for reading only
            shutil.copytree(directory, Path(keep) / directory.name)
