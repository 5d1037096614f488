"""What a test needs, read from what it uses; and a guard that holds it to that.

``tests/conftest.py`` marks each test at collection with ``redis_server``,
``workers`` and ``cluster`` by what its body, its fixtures and the helpers of
``tests.*`` they call use (:func:`needs_of`): a fixture (``redis_url``...) or a
name (``worker``, ``RedisServer``...). Reading code can miss a use (an attribute
of a module, ``getfixturevalue``), so :class:`NeedGuard` makes the test that
starts a redis-server, a cluster or a worker without the mark fail: under
``make test-fast`` (``-m "not redis_server and ..."``) nothing starts one, and
in a whole run a missing mark is an error, not a slower fast subset.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from taskiq.receiver import Receiver

import local_redis.processes
import local_redis.workers
from local_redis import (
    RedisCluster,
    RedisSentinel,
    RedisServer,
    TaskiqWorker,
    process_group,
    provide_redis,
    redis_url_from_env_or_server,
)
from tests import fault_harness, harness

#: The marks this module sets, and what makes a test need each one.
FIXTURES: dict[str, frozenset[str]] = {
    "redis_server": frozenset({"redis_url", "redis_cluster_url"}),
    "workers": frozenset(),
    "cluster": frozenset({"redis_cluster_url"}),
}
USES: dict[str, tuple[object, ...]] = {
    "redis_server": (
        RedisServer,
        RedisCluster,
        RedisSentinel,
        redis_url_from_env_or_server,
        provide_redis,
        fault_harness.fault_rig,
    ),
    "workers": (
        harness.worker,
        harness.worker_process,
        Receiver,
        TaskiqWorker,
        process_group,
        fault_harness.fault_rig,
    ),
    "cluster": (RedisCluster,),
}


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    """``code`` and the code of every function, lambda and class nested in it."""
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


def _functions_of(obj: object) -> list[types.FunctionType]:
    """The plain functions behind a function, a fixture or a class's methods
    (with those it inherits from classes of ``tests.*``)."""
    if isinstance(obj, type):  # its methods, and those it inherits from ours
        found = []
        for cls in (c for c in obj.__mro__ if c is obj or _ours(c)):
            for member in vars(cls).values():
                target = member.fget if isinstance(member, property) else member
                found.extend(_functions_of(getattr(target, "__func__", target)))
        return found
    obj = inspect.unwrap(obj) if callable(obj) else obj
    return [obj] if isinstance(obj, types.FunctionType) else []


def _ours(obj: object) -> bool:
    return getattr(obj, "__module__", "").startswith("tests.")


#: What each function needs, once worked out (or while it is being worked out).
_NEEDS: dict[Callable[..., object], frozenset[str]] = {}


def needs_of(function: Callable[..., object]) -> frozenset[str]:
    """The marks ``function`` needs: the names it uses, and those its helpers in
    ``tests.*`` use, transitively (a global name, resolved where it is defined).
    """
    if not isinstance(function, types.FunctionType):
        return frozenset()
    known = _NEEDS.get(function)
    if known is not None:
        return known
    _NEEDS[function] = frozenset()  # a helper that calls back adds nothing new
    needs: set[str] = set()
    for code in _code_objects(function.__code__):
        for name in code.co_names:
            used = function.__globals__.get(name)
            if used is None or isinstance(used, types.ModuleType):
                continue
            needs.update(mark for mark, uses in USES.items() if _in(used, uses))
            if _ours(used):
                for helper in _functions_of(used):
                    needs.update(needs_of(helper))
    _NEEDS[function] = frozenset(needs)
    return _NEEDS[function]


def _in(used: object, uses: tuple[object, ...]) -> bool:
    return any(used is use for use in uses)


def needs_of_item(item: pytest.Item) -> frozenset[str]:
    """What a collected test needs: by its fixtures, its body and its fixtures'
    bodies (those of ``tests.*``).
    """
    names = set(getattr(item, "fixturenames", ()))
    needs = {mark for mark, fixtures in FIXTURES.items() if fixtures & names}
    function = getattr(item, "function", None)
    sources: list[object] = [function] if function is not None else []
    info = getattr(item, "_fixtureinfo", None)
    for name in names:
        for fixturedef in info.name2fixturedefs.get(name, ()) if info else ():
            if _ours(inspect.unwrap(fixturedef.func)):
                sources.append(fixturedef.func)
    for source in sources:
        for plain in _functions_of(source):
            needs.update(needs_of(plain))
    return frozenset(needs)


class UnmarkedNeedError(AssertionError):
    """A test started what it is not marked as needing."""


#: What starts each need: (owner, attribute) pairs the guard replaces.
STARTERS: dict[str, tuple[tuple[object, str], ...]] = {
    "redis_server": ((RedisServer, "start"),),
    "cluster": ((RedisCluster, "start"),),
    "workers": (
        (Receiver, "listen"),
        (local_redis.processes, "start_in_own_group"),
        (local_redis.workers, "start_in_own_group"),
    ),
}


@dataclass
class NeedGuard:
    """Refuses, for one test, to start what the test is not marked as needing.

    A refusal raises where the start was asked for, and is kept in
    ``violations`` too, so that the test fails at teardown even when the error
    is lost (raised in a task nobody awaits, or caught).
    """

    test: str
    marks: frozenset[str]
    violations: list[str] = field(default_factory=list)

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Replace the starters of every need the test is not marked with."""
        for need, starters in STARTERS.items():
            if need in self.marks:
                continue
            for owner, attribute in starters:
                monkeypatch.setattr(owner, attribute, self._refusal(need, attribute))

    def _refusal(self, need: str, starter: str) -> Callable[..., Any]:
        def refuse(*_args: Any, **_kwargs: Any) -> Any:
            message = (
                f"{self.test} calls {starter}() but is not marked {need}: mark it "
                f"(pytest.mark.{need}) or teach tests/needs.py what it uses"
            )
            self.violations.append(message)
            raise UnmarkedNeedError(message)

        return refuse
