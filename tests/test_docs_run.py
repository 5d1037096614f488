"""The docs' Python runs as written: each page's blocks, in order, against a
redis-server of the test's own and a real taskiq worker.

Every ```` ```python ```` block of the README and of ``docs/*.md`` is run,
the blocks of one page one after the other in one namespace, as a reader
pasting them into ``python -m asyncio`` would (top-level ``await`` allowed).
The Redis URLs they name (``redis://localhost:6379``, the README's
``REDIS_URL``) are the test's server. Once a block has made a ``broker``, a
``Receiver`` (what ``taskiq worker`` runs, with bounded slots) serves it; when
the page is over, every message kicked has been handled and none of them
failed. A block that cannot run alone says so in its info string,
```` ```python fragment ````, and is only compiled.
"""

import ast
import asyncio
import re
import sys
import types
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import pytest
from redis.asyncio import Redis
from taskiq import AsyncBroker, TaskiqMessage, TaskiqMiddleware, TaskiqResult
from taskiq_redis import RedisStreamBroker

from local_redis import RedisServer, stream_drained
from tests.harness import ROOT, eventually, worker

#: The pages whose Python a reader is given.
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```python([^\n]*)\n(.*?)^```", flags=re.DOTALL | re.MULTILINE)
#: Where the docs say Redis is; the test's server instead.
DOC_URLS = re.compile(r"redis://(?:localhost|127\.0\.0\.1):6379(?:/0)?")
FRAGMENT = "fragment"


def blocks(page: Path) -> Iterator[tuple[int, str, bool]]:
    """Each Python block of ``page``: its line, its code, whether it is a fragment."""
    text = page.read_text()
    for found in BLOCK.finditer(text):
        line = text.count("\n", 0, found.start()) + 1
        yield line, found[2], FRAGMENT in found[1].split()


def pages_with_python() -> list[Path]:
    return [page for page in PAGES if any(True for _ in blocks(page))]


class Ran(TaskiqMiddleware):
    """What the worker ran, and which bodies raised."""

    def __init__(self) -> None:
        super().__init__()
        self.tasks: list[str] = []
        self.failed: list[str] = []

    def post_execute(self, message: TaskiqMessage, result: TaskiqResult[Any]) -> None:
        self.tasks.append(message.task_name)
        if result.is_err:
            self.failed.append(f"{message.task_name}: {result.error!r}")


async def run_block(code: str, namespace: dict[str, Any], where: str) -> None:
    compiled = compile(
        code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT, dont_inherit=True
    )
    made = eval(compiled, namespace)
    if asyncio.iscoroutine(made):
        await made


async def drained(broker: AsyncBroker, receiver: Any) -> None:
    if not isinstance(broker, RedisStreamBroker):
        return
    client = Redis(connection_pool=broker.connection_pool)
    try:

        async def nothing_left() -> bool:
            if receiver.handling:
                return False
            return await stream_drained(client, broker.queue_name)

        await eventually(nothing_left, timeout=20, what="the docs' messages to run")
    finally:
        await client.aclose()


@pytest.fixture
async def served() -> AsyncIterator[str]:
    with RedisServer() as server:
        yield server.url


@pytest.mark.parametrize(
    "page", pages_with_python(), ids=lambda page: page.relative_to(ROOT).as_posix()
)
async def test_every_python_block_of_a_page_runs_in_order_with_a_worker(
    page: Path, served: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("REDIS_URL", served)
    name = page.relative_to(ROOT).as_posix()
    # A module of its own, as a reader's script is (taskiq looks tasks up in it).
    module = types.ModuleType(f"docs_{page.stem.lower()}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    namespace = module.__dict__
    ran_tasks = Ran()
    ran = 0
    async with AsyncExitStack() as stack:
        served_broker = receiver = None
        for line, code, fragment in blocks(page):
            where = f"{name}:{line}"
            if fragment:
                compile(code, where, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
                continue
            await run_block(DOC_URLS.sub(served, code), namespace, where)
            ran += 1
            broker = namespace.get("broker")
            if served_broker is None and isinstance(broker, AsyncBroker):
                broker.add_middlewares(ran_tasks)
                receiver = await stack.enter_async_context(worker(broker, 10))
                served_broker = broker
        if served_broker is not None:
            await drained(served_broker, receiver)
    assert ran, f"{name}: every block is a fragment"
    assert ran_tasks.failed == []
    kicks = any(".kiq(" in code for _, code, fragment in blocks(page) if not fragment)
    assert bool(ran_tasks.tasks) == kicks, ran_tasks.tasks


def test_every_page_s_fragments_are_few_and_said_so() -> None:
    """A fragment is the exception: each page runs at least one block whole."""
    for page in pages_with_python():
        kinds = [fragment for _, _, fragment in blocks(page)]
        assert not all(kinds), page
