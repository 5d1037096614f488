"""``taskiq-fanin watch`` and ``list --watch`` as a user runs them: in a real
terminal (a pseudo-terminal) and through a pipe, against a real redis-server,
on groups and chains that real workers run while the command watches.
"""

import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest
from taskiq import AsyncBroker

import taskiq_fanin
from local_redis import free_port
from taskiq_fanin import Signature, Skip, chain, group
from tests.cli_runner import run_cli
from tests.harness import ROOT, eventually, stream_broker, worker
from tests.terminal import Terminal

#: Members of the watched group: enough for the bar to be seen moving.
SIZE = 200
#: Seconds each member takes, and how many run at once: about 2.5 s in all.
MEMBER_SECONDS, SLOTS = 0.05, 4
#: Seconds between the watch's reads in these tests.
INTERVAL = "0.1"
#: Seconds any one watch may take, start to end.
BOUND = 60.0
#: A member that fails, and one that skips, of every 50.
FAILS, SKIPS = 7, 9


class MemberFailedError(Exception):
    """A member's body failing for good (no retry)."""


@dataclass
class Rig:
    broker: AsyncBroker
    url: str
    prefix: str

    @property
    def options(self) -> tuple[str, ...]:
        return ("--redis-url", self.url, "--prefix", self.prefix)

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "taskiq_fanin.cli", *args, *self.options]

    async def plan(self, size: int = SIZE) -> str:
        members = [Signature.of("watch.member", n) for n in range(size)]
        return (await group(members).kiq(self.broker)).group_id


@pytest.fixture
async def rig(redis_url: str, key_prefix: str) -> AsyncIterator[Rig]:
    broker, _ = stream_broker(redis_url, key_prefix)

    @broker.task(task_name="watch.member")
    async def member(number: int) -> int:
        await asyncio.sleep(MEMBER_SECONDS)
        if number % 50 == FAILS:
            raise MemberFailedError(f"member {number} failed")
        if number % 50 == SKIPS:
            raise Skip(f"member {number} is not for us")
        return number

    @broker.task(task_name="watch.step")
    async def step() -> str:
        await asyncio.sleep(MEMBER_SECONDS)
        return "ok"

    await broker.startup()
    try:
        yield Rig(broker, redis_url, key_prefix)
    finally:
        await broker.shutdown()


@pytest.fixture
def terminals() -> Iterator[list[Terminal]]:
    """Terminals a test opens, each closed (its command killed) at the end."""
    opened: list[Terminal] = []
    yield opened
    for terminal in opened:
        terminal.close()


def open_terminal(rig: Rig, terminals: list[Terminal], *args: str) -> Terminal:
    terminal = Terminal(rig.command(*args), env=dict(os.environ))
    terminals.append(terminal)
    return terminal


async def test_watch_in_a_terminal_shows_the_bar_move_and_ends_with_the_final_state(
    rig: Rig, terminals: list[Terminal]
) -> None:
    group_id = await rig.plan()
    screen = open_terminal(rig, terminals, "watch", group_id, "--interval", INTERVAL)
    await eventually(lambda: f"0/{SIZE}" in screen.text, what="the first frame")

    async with worker(rig.broker, max_async_tasks=SLOTS):
        code = await asyncio.to_thread(screen.wait, BOUND)

    text = screen.text
    assert code == 0, text
    seen = [int(n) for n in re.findall(rf"\b(\d+)/{SIZE}\b", text)]
    assert len(set(seen)) >= 5, seen  # the bar moved, read after read
    assert seen == sorted(seen)
    assert seen[-1] == SIZE
    last = text[text.rindex(f"Group {group_id}") :]  # the frame left on screen
    assert f"{SIZE}/{SIZE}" in last
    assert "100.0%" in last
    assert "state completed" in last
    failed = SIZE // 50
    assert f"done {SIZE - 2 * failed}  failed {failed}  skipped {failed}" in last
    assert "latest failures" in last
    for index in range(FAILS, SIZE, 50):  # each failed member, with its error
        assert re.search(rf"#{index}\s+MemberFailedError: member {index} failed", last)
    assert "\x1b[" in screen.raw.decode(errors="replace")  # drawn live, in place
    assert "Traceback" not in text


async def piped_watch(
    rig: Rig, workflow_id: str, *, cancel: bool = False
) -> tuple[int, bytes, bytes]:
    """``watch --json`` through a pipe: its first line read before a worker
    starts (or the workflow is cancelled, with ``cancel``), the rest once the
    worker ran everything; exit code, stdout, stderr.
    """
    process = subprocess.Popen(
        rig.command("watch", workflow_id, "--json", "--interval", INTERVAL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    try:
        first = await asyncio.wait_for(
            asyncio.to_thread(process.stdout.readline), BOUND
        )
        if cancel:
            assert await taskiq_fanin.cancel(rig.broker, workflow_id)
            rest, errors = await asyncio.to_thread(process.communicate, None, BOUND)
        else:
            async with worker(rig.broker, max_async_tasks=SLOTS):
                rest, errors = await asyncio.to_thread(process.communicate, None, BOUND)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
    return process.returncode, first + rest, errors


async def test_watch_json_through_a_pipe_prints_a_json_object_per_change(
    rig: Rig,
) -> None:
    group_id = await rig.plan()

    code, stdout, errors = await piped_watch(rig, group_id)

    assert code == 0, errors
    assert b"\x1b" not in stdout  # no terminal, no escape sequence
    lines = [json.loads(line) for line in stdout.decode().splitlines()]
    assert all(isinstance(line, dict) for line in lines)
    assert lines[0]["done"] == 0
    assert {line["id"] for line in lines} == {group_id}
    assert {line["kind"] for line in lines} == {"group"}
    done = [line["done"] for line in lines]
    assert done == sorted(done)
    assert len(set(done)) >= 3, done
    assert all(a != b for a, b in itertools.pairwise(lines))  # a line per change
    last = lines[-1]
    assert last["done"] + last["failed"] + last["skipped"] == last["total"] == SIZE
    assert (last["failed"], last["skipped"]) == (SIZE // 50, SIZE // 50)
    assert sorted(last["failures"], key=lambda f: f["index"]) == [
        {"index": i, "error": f"MemberFailedError: member {i} failed"}
        for i in range(FAILS, SIZE, 50)
    ]
    assert last["ended"] is True
    assert last["state"] == "completed"
    assert last["percent"] == 100.0
    assert any(line["rate"] for line in lines)  # measured while it ran
    assert all(not line["ended"] for line in lines[:-1])


async def test_watch_of_a_chain_follows_its_steps_and_its_group_step(
    rig: Rig,
) -> None:
    # Members 10 to 29: none fails or skips.
    members = [Signature.of("watch.member", n).immutable() for n in range(10, 30)]
    step = Signature.of("watch.step").immutable()
    handle = await chain(step, group(members), step).kiq(rig.broker)

    code, stdout, errors = await piped_watch(rig, handle.chain_id)

    assert code == 0, errors
    lines = [json.loads(line) for line in stdout.decode().splitlines()]
    assert {line["kind"] for line in lines} == {"chain"}
    steps = [line["step"] for line in lines]
    assert steps == sorted(steps)
    assert steps[-1] == 3
    assert lines[-1]["state"] == "done"
    assert (lines[-1]["done"], lines[-1]["total"]) == (3, 3)
    grouped = [line["group"] for line in lines if line["group"] is not None]
    assert grouped, "the group step was seen"
    assert {g["total"] for g in grouped} == {20}
    assert all(line["step"] == 2 for line in lines if line["group"] is not None)


async def test_watch_of_a_group_cancelled_while_watched_ends_cancelled_with_exit_0(
    rig: Rig,
) -> None:
    group_id = await rig.plan(5)  # no worker: only the cancel ends it

    code, stdout, errors = await piped_watch(rig, group_id, cancel=True)

    assert code == 0, errors
    lines = [json.loads(line) for line in stdout.decode().splitlines()]
    assert [(line["state"], line["ended"]) for line in lines] == [
        ("open", False),
        ("cancelled", True),
    ]
    assert (lines[-1]["done"], lines[-1]["total"]) == (0, 5)


async def test_watch_of_an_unknown_id_exits_1_and_prints_no_json(rig: Rig) -> None:
    table = await run_cli("watch", "no-such-id", *rig.options)
    as_json = await run_cli("watch", "no-such-id", "--json", *rig.options)

    expected = f'no group or chain "no-such-id" under prefix "{rig.prefix}"'
    for run in (table, as_json):
        assert run.code == 1
        assert run.stdout == ""
        assert expected in run.stderr


async def test_ctrl_c_stops_a_watch_with_exit_130_and_no_traceback(
    rig: Rig, terminals: list[Terminal]
) -> None:
    group_id = await rig.plan(3)  # no worker: it never ends by itself
    screen = open_terminal(rig, terminals, "watch", group_id, "--interval", INTERVAL)
    await eventually(lambda: "0/3" in screen.text, what="the first frame")

    screen.interrupt()
    code = await asyncio.to_thread(screen.wait, BOUND)

    assert code == 130, screen.text
    assert "Traceback" not in screen.text
    assert "0/3" in screen.text  # the last frame stays


async def test_list_watch_shows_a_group_planned_after_it_started(
    rig: Rig, terminals: list[Terminal]
) -> None:
    first = await rig.plan(2)
    screen = open_terminal(rig, terminals, "list", "--watch", "--interval", INTERVAL)
    await eventually(lambda: first in screen.text, what="the first group listed")

    second = await rig.plan(2)
    await eventually(lambda: second in screen.text, what="the new group listed")
    screen.interrupt()
    code = await asyncio.to_thread(screen.wait, BOUND)

    assert code == 130, screen.text
    assert "Traceback" not in screen.text


async def test_list_watch_json_prints_the_list_again_when_it_changed(
    rig: Rig,
) -> None:
    first = await rig.plan(2)
    process = subprocess.Popen(
        rig.command("list", "--watch", "--json", "--interval", INTERVAL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    readline = process.stdout.readline
    try:
        before = json.loads(await asyncio.wait_for(asyncio.to_thread(readline), BOUND))
        second = await rig.plan(2)
        after = json.loads(await asyncio.wait_for(asyncio.to_thread(readline), BOUND))
        process.send_signal(signal.SIGINT)
        _, errors = await asyncio.to_thread(process.communicate, None, BOUND)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    assert [group["group_id"] for group in before] == [first]
    assert {group["group_id"] for group in after} == {first, second}
    assert process.returncode == 130, errors
    assert b"Traceback" not in errors


async def test_a_reader_that_stops_reading_ends_the_watch_quietly(rig: Rig) -> None:
    """``watch --json | head -1``: the next line finds the pipe closed."""
    group_id = await rig.plan()
    process = subprocess.Popen(
        rig.command("watch", group_id, "--json", "--interval", INTERVAL),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        await asyncio.wait_for(asyncio.to_thread(process.stdout.readline), BOUND)
        process.stdout.close()  # as head does after its line
        async with worker(rig.broker, max_async_tasks=SLOTS):
            code = await asyncio.to_thread(process.wait, BOUND)
        errors = process.stderr.read()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        process.stderr.close()

    assert (code, errors) == (0, b"")


@pytest.mark.parametrize(
    "args", [("status", "{id}", "--json"), ("list", "--json"), ("status", "{id}")]
)
async def test_any_command_whose_reader_is_gone_ends_quietly(
    rig: Rig, args: tuple[str, ...]
) -> None:
    """``taskiq-fanin list --json | head -1``: a reader gone before the output
    is written ends the command with 0 and nothing on stderr, not as if Redis
    were away (4). Its read end is closed before the command has started."""
    group_id = await rig.plan()
    command = rig.command(*(arg.format(id=group_id) for arg in args))
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT
    )
    assert process.stdout is not None
    process.stdout.close()  # nothing will read what it prints
    try:
        _, errors = await asyncio.to_thread(process.communicate, None, BOUND)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)

    assert (process.returncode, errors) == (0, b"")


async def test_watch_without_redis_exits_4_in_one_line() -> None:
    nowhere = f"redis://127.0.0.1:{free_port()}/0"

    run = await run_cli("watch", "some-id", "--json", "--redis-url", nowhere)

    assert run.code == 4
    assert run.stdout == ""
    assert len(run.stderr.strip().splitlines()) == 1
