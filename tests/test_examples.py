"""The examples run as their READMEs say: the README's own commands, a real worker."""

import asyncio
import contextlib
import json
import os
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path

from local_redis import process_group
from tests.harness import ROOT

#: How a README's command is started here: with this interpreter and its venv.
PROGRAMS = {
    "taskiq": [sys.executable, "-m", "taskiq"],
    "python": [sys.executable],
    "taskiq-fanin": [str(Path(sys.executable).parent / "taskiq-fanin")],
}


def readme_commands(example: str) -> list[list[str]]:
    """The commands in the ``sh`` blocks of the example's README, ready to run."""
    readme = (ROOT / "examples" / example / "README.md").read_text()
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL):
        for line in block.splitlines():
            program, *args = shlex.split(line, comments=True)
            commands.append([*PROGRAMS[program], *args])
    return commands


@contextlib.contextmanager
def started(command: list[str], env: dict[str, str]) -> Iterator[None]:
    """The README's worker, in a process group of its own, stopped for certain."""
    with process_group(command, cwd=ROOT, env=env):
        yield


async def run(command: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run one command to its end; its exit code and its stdout."""
    process = await asyncio.create_subprocess_exec(
        *command, cwd=ROOT, env=env, stdout=asyncio.subprocess.PIPE
    )
    stdout, _ = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode is not None
    return process.returncode, stdout.decode()


def example_env(redis_url: str) -> dict[str, str]:
    return {**os.environ, "REDIS_URL": redis_url, "PYTHONPATH": str(ROOT)}


async def test_the_album_readme_publishes_ten_albums_at_ten_slots(
    redis_url: str,
) -> None:
    env = example_env(redis_url)
    worker, albums = readme_commands("album")
    assert worker[-4:] == ["--workers", "1", "--max-async-tasks", "10"]

    with started(worker, env):
        code, output = await run(albums, env)

    assert code == 0, output
    assert "10 of 10 albums published" in output
    published = re.findall(
        r"^ *([\d.]+)s  album (\d+): 5 images, 0 failed$", output, re.M
    )
    assert sorted(int(album) for _, album in published) == list(range(10))
    # Fifty resizes of 200 ms on ten slots take five waves: a second at least
    # (on twenty slots, three waves would do).
    assert max(float(seconds) for seconds, _ in published) >= 0.99


async def test_the_video_readme_runs_through_then_compensates_a_failure(
    redis_url: str,
) -> None:
    """The run's last line is a command that shows the chain: it works too."""
    env = example_env(redis_url)
    worker, through, failing = readme_commands("video_pipeline")
    assert "--fail" in failing

    with started(worker, env):
        ok_code, ok = await run(through, env)
        failed_code, failed = await run(failing, env)

    assert ok_code == 0, ok
    assert "thumbnail cat from 3 renditions" in ok
    assert "notify cat: ready (cat/sprite.jpg)" in ok
    assert "done: all 4 steps ran" in ok
    assert "chain done; no compensation ran, as nothing failed" in ok
    assert failed_code == 0, failed
    assert "failed at step 2 of 4: group of 3" in failed
    assert "failed dog at step 2 (group of 3)" in failed
    assert "compensate dog: released storage quota" in failed
    assert "thumbnail dog" not in failed
    assert "compensations ran: release_quota" in failed
    for output in (ok, failed):
        assert "missing" not in output
        steps = re.findall(r"step (\d+) of (\d+)", output)
        assert steps, output
        assert all(1 <= int(n) <= int(of) == 4 for n, of in steps), output
    hint = failed.splitlines()[-1]
    assert hint.startswith("look again: taskiq-fanin status video-dog-"), failed
    program, *args = shlex.split(hint.removeprefix("look again: "))
    shown_code, shown = await run([*PROGRAMS[program], *args, "--json"], env)
    assert shown_code == 0, shown
    chain = json.loads(shown)
    assert chain["chain_id"] == args[1]
    assert (chain["state"], chain["failed_step"]) == ("failed", 1)
