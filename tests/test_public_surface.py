"""The public surface stays small and whole: a short, sorted top level, a few
submodules that each say what they export, and every error a user can meet
importable from ``taskiq_fanin.errors``.
"""

import importlib
import inspect
import pkgutil
import re
from types import ModuleType

import pytest

import taskiq_fanin
import taskiq_fanin.errors
from taskiq_fanin.domain.exceptions import FanInError

#: Reads files, not the dependencies: run once, in `make test`, not at the floors.
pytestmark = pytest.mark.surface

#: The submodules users import from, beside the top level.
PUBLIC_SUBMODULES = ("errors", "inspection", "models", "sweeping")
#: The most names the top level may hold.
TOP_LEVEL_AT_MOST = 22


def _isort_key(name: str) -> tuple[int, str]:
    """The order ruff's RUF022 keeps ``__all__`` in: CONSTANTS, Classes, functions."""
    if name.isupper():
        return 0, name
    return (1 if name[0].isupper() else 2), name


def _public(name: str) -> ModuleType:
    return importlib.import_module(f"taskiq_fanin.{name}")


def _all_package_modules() -> list[ModuleType]:
    found = pkgutil.walk_packages(taskiq_fanin.__path__, prefix="taskiq_fanin.")
    names = [info.name for info in found if not info.name.endswith(".__main__")]
    return [importlib.import_module(name) for name in names]


def test_the_top_level_is_short_and_sorted() -> None:
    names = taskiq_fanin.__all__
    assert len(names) <= TOP_LEVEL_AT_MOST
    assert names == sorted(names, key=_isort_key)
    assert len(set(names)) == len(names)


@pytest.mark.parametrize("module", ["", *PUBLIC_SUBMODULES])
def test_every_exported_name_imports(module: str) -> None:
    imported = _public(module) if module else taskiq_fanin
    names = imported.__all__
    assert names, f"{imported.__name__} exports nothing"
    assert names == sorted(names, key=_isort_key)
    missing = [name for name in names if not hasattr(imported, name)]
    assert missing == []


def test_each_public_submodule_exports_what_it_defines_nothing_else() -> None:
    for module in map(_public, PUBLIC_SUBMODULES):
        own = {
            name
            for name, value in vars(module).items()
            if not name.startswith("_") and not inspect.ismodule(value)
        }
        assert own == set(module.__all__), module.__name__


def test_every_error_in_the_package_is_exported_from_errors() -> None:
    defined = {
        value
        for module in _all_package_modules()
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, FanInError)
    }
    exported = {
        getattr(taskiq_fanin.errors, name) for name in taskiq_fanin.errors.__all__
    }
    assert defined == exported
    assert all(issubclass(error, FanInError) for error in exported)


def test_the_top_level_exports_the_error_base_and_the_handles_cancel() -> None:
    assert taskiq_fanin.FanInError is FanInError
    for handle in (taskiq_fanin.GroupHandle, taskiq_fanin.ChainHandle):
        assert inspect.iscoroutinefunction(handle.status)
        assert inspect.iscoroutinefunction(handle.cancel)


def test_the_middleware_takes_every_option_of_fanin_config_under_its_name() -> None:
    """The options are declared once (``FanInConfig``); the keyword arguments'
    types (``FanInOptions``) name the same ones, each with its default, and
    docs/options.md lists each (with the two only the middleware takes)."""
    from datetime import timedelta
    from pathlib import Path

    from taskiq_fanin import FanInMiddleware
    from taskiq_fanin.domain.config import FanInConfig, FanInOptions

    declared = set(FanInConfig.model_fields)
    assert set(FanInOptions.__annotations__) == declared
    for name, field in FanInConfig.model_fields.items():
        given = field.default
        if isinstance(given, float | int) and name in {"ttl", "socket_timeout"}:
            given = timedelta(seconds=given)  # a duration may be a timedelta
        made = FanInMiddleware("redis://127.0.0.1:1", **{name: given})
        assert made.config == FanInConfig(), name
    table = (Path(__file__).parent.parent / "docs" / "options.md").read_text()
    listed = set(re.findall(r"^\| `(\w+)` \|", table, flags=re.MULTILINE))
    assert listed == declared | {"redis", "cluster", "outcome_batching"}
