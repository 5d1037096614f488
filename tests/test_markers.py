"""Marks say what a test needs: ``make test-fast`` starts no server and no worker.

The tests here are unmarked (they use no fixture or name that needs anything),
and reach the starters through a module's attribute, which the reading of code
in ``tests/needs.py`` cannot see: the guard has to refuse them.
"""

import contextlib
import re
import subprocess
import sys

import pytest
from taskiq import InMemoryBroker

import local_redis
from tests import harness
from tests.needs import NeedGuard, UnmarkedNeedError, needs_of

#: Reads files, not the dependencies: run once, in `make test`, not at the floors.
pytestmark = pytest.mark.surface


def test_this_test_is_unmarked(request: pytest.FixtureRequest) -> None:
    marks = {mark.name for mark in request.node.iter_markers()}
    assert not marks & {"redis_server", "workers", "cluster", "faults"}


def test_an_unmarked_test_cannot_start_a_redis_server(need_guard: NeedGuard) -> None:
    with pytest.raises(UnmarkedNeedError, match="not marked redis_server"):
        local_redis.RedisServer().start()
    assert len(need_guard.violations) == 1
    need_guard.violations.clear()  # seen: not this test's failure


def test_an_unmarked_test_cannot_start_a_cluster(need_guard: NeedGuard) -> None:
    with pytest.raises(UnmarkedNeedError, match="not marked cluster"):
        local_redis.RedisCluster().start()
    need_guard.violations.clear()


def test_an_unmarked_test_cannot_start_a_worker_process(need_guard: NeedGuard) -> None:
    with pytest.raises(UnmarkedNeedError, match="not marked workers"):
        local_redis.TaskiqWorker("tests.sweep_app:broker", max_async_tasks=1).start()
    with (
        pytest.raises(UnmarkedNeedError, match="not marked workers"),
        local_redis.process_group(["true"]),
    ):
        pass
    assert len(need_guard.violations) == 2
    need_guard.violations.clear()


async def test_an_unmarked_test_cannot_run_a_receiver(need_guard: NeedGuard) -> None:
    with pytest.raises(UnmarkedNeedError, match="not marked workers"):
        async with harness.worker(InMemoryBroker(), max_async_tasks=1):
            pass
    need_guard.violations.clear()


def test_a_refusal_fails_the_test_even_when_swallowed(need_guard: NeedGuard) -> None:
    """A refusal can be lost (in a task nobody awaits): teardown fails on it."""
    with contextlib.suppress(UnmarkedNeedError):
        local_redis.RedisServer().start()
    assert need_guard.violations  # the guard fixture fails the test on these
    need_guard.violations.clear()


async def _runs_a_worker(broker: InMemoryBroker) -> None:
    async with harness.worker(broker, max_async_tasks=1):
        pass


run_worker = harness.worker


async def _runs_a_worker_by_name(broker: InMemoryBroker) -> None:
    async with run_worker(broker, max_async_tasks=1):
        pass


def test_a_name_a_helper_uses_marks_the_tests_that_call_it() -> None:
    def calls_the_helper() -> object:
        return _runs_a_worker_by_name(InMemoryBroker())

    assert needs_of(calls_the_helper) == {"workers"}
    # Through a module's attribute, the reading misses it: the guard does not.
    assert needs_of(_runs_a_worker) == frozenset()


def test_make_test_fast_selects_the_fakeredis_half_and_no_server_test() -> None:
    makefile = (harness.ROOT / "Makefile").read_text().replace("\\\n", " ")
    (fast,) = re.findall(r"^FAST_TESTS := (.+)$", makefile, flags=re.MULTILINE)
    assert "not redis_server" in fast
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", fast],
        cwd=harness.ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.splitlines()
    tests = [line for line in collected if "::" in line]
    assert any("[fakeredis" in test for test in tests)
    assert not [test for test in tests if "[redis-server" in test]
    for needs_a_server in ("test_fanin_worker", "test_faults", "test_cluster"):
        assert not [test for test in tests if f"/{needs_a_server}.py" in test]
