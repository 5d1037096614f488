"""The repository's shape, checked: no import cycle anywhere, one file name per
module of the package, no module of the package past the size a module drawn
around one concern has (docs/design.md, "Package layout").
"""

from collections import Counter
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Every package of the repository: the library, and what tests and runs it.
PACKAGES = ("taskiq_fanin", "benchmarks", "local_redis", "examples", "tests")
#: The most lines a module of the package has (past ~300, look whether it
#: holds two concerns; this is the most).
LONGEST_MODULE = 500

#: Reads files, not the dependencies: run once, in `make test`, not at the floors.
pytestmark = pytest.mark.surface


def test_no_import_cycle_anywhere_in_the_repository() -> None:
    """Type-only imports count too: a cycle is a cycle to a reader."""
    graph = grimp.build_graph(*PACKAGES, include_external_packages=False)
    cycles = [
        (module, *chain)
        for module in sorted(graph.modules)
        for imported in graph.find_modules_directly_imported_by(module)
        if (chain := graph.find_shortest_chain(importer=imported, imported=module))
    ]
    assert cycles == []


def test_no_two_modules_of_the_package_share_a_file_name() -> None:
    """A name in a traceback or a search is one place."""
    names = Counter(
        path.name
        for path in (ROOT / "taskiq_fanin").rglob("*.py")
        if path.name not in {"__init__.py", "__main__.py"}
    )
    assert {name for name, count in names.items() if count > 1} == set()


def test_no_module_of_the_package_is_past_the_most_a_concern_takes() -> None:
    long = {
        path.relative_to(ROOT).as_posix(): lines
        for path in (ROOT / "taskiq_fanin").rglob("*.py")
        if (lines := len(path.read_text().splitlines())) > LONGEST_MODULE
    }
    assert long == {}
