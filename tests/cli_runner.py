"""The ``taskiq-fanin`` command run as a user runs it: in a subprocess, from the
project's root, started as a module, as the installed script or through taskiq.
"""

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.harness import ROOT

#: How the command is started: as a module, as the installed script, through taskiq.
COMMANDS = {
    "module": [sys.executable, "-m", "taskiq_fanin.cli"],
    "script": [str(Path(sys.executable).parent / "taskiq-fanin")],
    "taskiq": [sys.executable, "-m", "taskiq", "fanin"],
}


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


async def run_cli(*args: str, via: str = "module", env=None) -> Run:
    """Run the command line; ``env`` entries set to None are removed."""
    environment = {**os.environ, **(env or {})}
    environment = {k: v for k, v in environment.items() if v is not None}
    done = await asyncio.to_thread(
        subprocess.run,
        [*COMMANDS[via], *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=environment,
        timeout=60,
        check=False,
    )
    return Run(done.returncode, done.stdout, done.stderr)
