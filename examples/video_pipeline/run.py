"""Start the pipeline for one video and follow its workflow record until it ends.

python -m examples.video_pipeline.run [--video NAME] [--fail 720p]
"""

import argparse
import asyncio
import time

from redis.asyncio import Redis

from examples.video_pipeline.app import JOURNAL_KEY, REDIS_URL, broker, pipeline
from taskiq_fanin import ChainState, status


async def main(video: str, fail: str, timeout: float) -> int:
    """Kick the chain; print where it is whenever that changes, then the journal."""
    await broker.startup()
    async with Redis.from_url(REDIS_URL, decode_responses=True) as redis:
        await redis.delete(JOURNAL_KEY)
        handle = await pipeline(video, fail).kiq(broker)  # type: ignore[attr-defined]
        started, last = time.monotonic(), ""
        state = await handle.status()
        while time.monotonic() - started < timeout:
            state = await handle.status()
            where = f"{state.state.value} at step {state.step}/{state.steps}"
            if state.current:
                where += f" ({state.current})"
            if where != last:
                print(f"{time.monotonic() - started:5.2f}s  {where}")
                last = where
            if state.state is not ChainState.RUNNING:
                break
            await asyncio.sleep(0.05)
        # The error continuation and the compensations run after the record says
        # failed: wait for them to end too.
        lines: list[str] = []
        while time.monotonic() - started < timeout:
            lines = await redis.lrange(JOURNAL_KEY, 0, -1)
            undo = await status(broker, f"{handle.chain_id}.undo")
            if not fail or (
                undo.state.value == "done" and any("failed " in x for x in lines)
            ):
                break
            await asyncio.sleep(0.05)
        for line in lines:
            print(f"  {line}")
        print(f"chain {state.state.value}; compensations {undo.state.value}")
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
