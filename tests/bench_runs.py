"""A benchmark run as ``make bench`` runs it: its own process, its JSON read back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from local_redis import REDIS_URL_ENV

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(
    module: str, args: Sequence[str], redis_url: str, path: Path, *, timeout: float
) -> dict[str, Any]:
    """``python -m <module> <args> --json <path>`` on ``redis_url``; what it wrote."""
    subprocess.run(
        [sys.executable, "-m", module, *args, "--json", str(path)],
        cwd=ROOT,
        env={**os.environ, REDIS_URL_ENV: redis_url, "COLUMNS": "80"},
        check=True,
        capture_output=True,
        timeout=timeout,
    )
    document: dict[str, Any] = json.loads(path.read_text())
    return document
