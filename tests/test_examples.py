"""The album example runs as its README says, on a real worker with ten slots."""

import asyncio
import os
import sys

from tests.harness import ROOT, worker_process


async def test_the_album_example_publishes_ten_albums_at_ten_slots(
    redis_url: str,
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    with worker_process("examples.album.app:broker", {"REDIS_URL": redis_url}):
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
    output = stdout.decode()
    assert run.returncode == 0, output
    assert "10 of 10 albums published" in output
    for album in range(10):
        assert f"album {album}: 5 images, 0 failed" in output
