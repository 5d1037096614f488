"""The album example runs as its README says, on a real worker with ten slots."""

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


async def test_the_album_example_publishes_ten_albums_at_ten_slots(
    redis_url: str,
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    worker = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "taskiq",
            "worker",
            "examples.album.app:broker",
            "--max-async-tasks",
            "10",
            "--workers",
            "1",
        ],
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        run = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "examples.album.run",
            "--timeout",
            "60",
            cwd=ROOT,
            env=env,
            stdout=asyncio.subprocess.PIPE,
        )
        stdout, _ = await asyncio.wait_for(run.communicate(), timeout=90)
    finally:
        # taskiq worker can hang on SIGTERM: a short grace, then SIGKILL.
        os.killpg(worker.pid, signal.SIGTERM)
        try:
            worker.wait(timeout=2)
        except subprocess.TimeoutExpired:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait()
    output = stdout.decode()
    assert run.returncode == 0, output
    assert "10 of 10 albums published" in output
    for album in range(10):
        assert f"album {album}: 5 images, 0 failed" in output
