"""Start the pipeline for one upload and follow its workflow record until it ends.

python -m examples.video_pipeline.run [--video NAME] [--fail 720p]
"""

import argparse
import asyncio
import secrets
import time

from redis.asyncio import Redis

from examples.video_pipeline.app import (
    JOURNAL_KEY,
    PREFIX,
    REDIS_URL,
    broker,
    pipeline,
)
from taskiq_fanin import ChainStatus
from taskiq_fanin.inspection import chain_status
from taskiq_fanin.models import ChainState


def short(name: str) -> str:
    """A step's name without its module: ``probe`` for ``...app:probe``."""
    return name.rpartition(":")[2]


def where(state: ChainStatus) -> str:
    """Where the chain is, steps counted from 1 to N."""
    if state.state is ChainState.DONE:
        return f"done: all {state.steps} steps ran"
    index = state.failed_step if state.failed_step is not None else state.step
    step = f"step {index + 1} of {state.steps}"
    if index < len(state.step_names):
        step += f": {short(state.step_names[index])}"
    if state.state is ChainState.RUNNING:
        return f"running {step}"
    return f"{state.state.value} at {step}"


async def follow(chain_id: str, timeout: float) -> ChainStatus:
    """Print where the chain is whenever that changes; return how it ended."""
    started, last = time.monotonic(), ""
    while True:
        state = await chain_status(broker, chain_id)
        now = where(state)
        if now != last:
            print(f"{time.monotonic() - started:5.2f}s  {now}")
            last = now
        if state.state not in (ChainState.RUNNING, ChainState.FAILING):
            return state  # failing: its error step and compensations are kicked
        if time.monotonic() - started > timeout:
            print(f"still running after {timeout:.0f}s: is a worker running?")
            return state
        await asyncio.sleep(0.05)  # a person watching: a look every 50 ms


async def compensations(chain_id: str, timeout: float) -> ChainStatus:
    """The compensations' own chain (``<id>~undo``), once it has ended."""
    deadline = time.monotonic() + timeout
    while True:
        undo = await chain_status(broker, f"{chain_id}~undo")
        over = undo.state in {ChainState.DONE, ChainState.FAILED}
        if over or time.monotonic() > deadline:
            return undo
        await asyncio.sleep(0.05)


def outcome(state: ChainStatus, undo: ChainStatus | None) -> str:
    """The last line: how the chain ended and what was undone."""
    if state.state is ChainState.DONE:
        return "chain done; no compensation ran, as nothing failed"
    ended = f"chain {where(state)}"
    if undo is None or undo.state is ChainState.MISSING:
        return f"{ended}; no compensation ran"
    names = ", ".join(short(name) for name in undo.step_names)
    if undo.state is ChainState.DONE:
        return f"{ended}; compensations ran: {names}"
    if undo.state is ChainState.RUNNING:
        return f"{ended}; compensations ({names}) still running"
    return f"{ended}; compensations ({names}) {undo.state.value}"


async def read_journal(redis: Redis) -> list[str]:
    """The lines the steps wrote, in order."""
    return [str(line) for line in await redis.lrange(JOURNAL_KEY, 0, -1)]


async def wait_for_line(redis: Redis, start: str, timeout: float) -> None:
    """Until the journal has a line starting with ``start``, or ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(line.startswith(start) for line in await read_journal(redis)):
            return
        await asyncio.sleep(0.05)


async def main(video: str, fail: str, timeout: float) -> int:
    """Kick the chain; print where it is whenever that changes, then the journal."""
    await broker.startup()
    async with Redis.from_url(REDIS_URL, decode_responses=True) as redis:
        await redis.delete(JOURNAL_KEY)
        upload = secrets.token_hex(3)
        handle = await pipeline(video, upload, fail).kiq(broker)
        print(f"chain {handle.chain_id}")
        state = await follow(handle.chain_id, timeout)
        undo = None
        if state.state is ChainState.FAILED:
            # The record says failed once mark_failed and the compensations are
            # kicked; they run after.
            undo = await compensations(handle.chain_id, timeout)
            await wait_for_line(redis, "failed ", timeout)
        print("journal:")
        for line in await read_journal(redis):
            print(f"  {line}")
        print(outcome(state, undo))
        print(f"look again: taskiq-fanin status {handle.chain_id} --prefix {PREFIX}")
    await broker.shutdown()
    expected = ChainState.FAILED if fail else ChainState.DONE
    return 0 if state.state is expected else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--video", default="cat")
    parser.add_argument("--fail", default="", help="a rendition that fails for good")
    parser.add_argument("--timeout", type=float, default=30.0)
    args = parser.parse_args()
    raise SystemExit(asyncio.run(main(args.video, args.fail, args.timeout)))
