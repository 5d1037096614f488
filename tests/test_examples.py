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


async def test_the_video_pipeline_runs_through_and_compensates_a_failure(
    redis_url: str,
) -> None:
    env = {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}
    outputs = []
    with worker_process("examples.video_pipeline.app:broker", {"REDIS_URL": redis_url}):
        for extra in ([], ["--video", "dog", "--fail", "720p"]):
            run = await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "examples.video_pipeline.run",
                *extra,
                cwd=ROOT,
                env=env,
                stdout=asyncio.subprocess.PIPE,
            )
            stdout, _ = await asyncio.wait_for(run.communicate(), timeout=60)
            outputs.append((run.returncode, stdout.decode()))

    (ok_code, ok), (failed_code, failed) = outputs
    assert ok_code == 0, ok
    assert "notify cat: ready (cat/sprite.jpg)" in ok
    assert "thumbnail cat from 3 renditions" in ok
    assert "chain done" in ok
    assert failed_code == 0, failed
    assert "failed dog at step 1 (group of 3)" in failed
    assert "compensate dog: released storage quota" in failed
    assert "thumbnail dog" not in failed
    assert "chain failed; compensations done" in failed
