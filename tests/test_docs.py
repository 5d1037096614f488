"""The docs say what the code is: layout, cited tests, public names, links.

Each check reads the code as it is now, so a module added, a test renamed or a
name made public fails here until the doc that names it follows.
"""

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

#: Reads files, not the dependencies: run once, in `make test`, not at the floors.
pytestmark = pytest.mark.surface

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "taskiq_fanin"
LUA = PACKAGE / "storage" / "lua"
DOCS = sorted((ROOT / "docs").glob("*.md"))
#: Every Markdown file a reader is sent to from the README.
PAGES = [ROOT / "README.md", *DOCS, ROOT / "benchmarks" / "README.md"]

FENCE = re.compile(r"^```.*?^```", flags=re.DOTALL | re.MULTILINE)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CODE_SPAN = re.compile(r"`([^`\n]+)`")
#: A test cited as `test_x.py`, `tests/test_x.py::name` or `::name` (same file).
CITATION = re.compile(r"^(?:tests/)?(test_\w+\.py)?(?:::(\w+))?$")
LUA_NAME = re.compile(r"\b[a-z][A-Za-z]*-\d+\.lua\b")
#: A path of the repository or of the package in a code span: `storage/keys.py`.
SOURCE_PATH = re.compile(r"^[\w./-]+/[\w-]+\.(?:py|lua)$")


def _section(text: str, heading: str) -> str:
    """The text under ``heading`` (a whole line), up to the next heading as deep."""
    level = heading.split(" ", 1)[0]
    body = text.split(f"\n{heading}\n", 1)[1]
    return re.split(rf"\n{level} ", body, maxsplit=1)[0]


def _prose(text: str) -> str:
    """The Markdown without its fenced code blocks."""
    return FENCE.sub("", text)


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading."""
    kept = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return kept.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    return {
        _slug(line.lstrip("#"))
        for line in _prose(page.read_text()).splitlines()
        if line.startswith("#")
    }


def _layout_entries() -> Iterator[str]:
    """The paths the package layout in docs/design.md names, folders ending in '/'."""
    block = _section((ROOT / "docs" / "design.md").read_text(), "## Package layout")
    tree = re.search(r"^```\n(.*?)^```", block, flags=re.DOTALL | re.MULTILINE)
    assert tree is not None, "docs/design.md: no layout block under '## Package layout'"
    folders: list[tuple[int, str]] = []
    for line in tree[1].splitlines():
        depth = len(line) - len(line.lstrip(" "))
        name = line.split()[0] if line.strip() else ""
        if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*(/|\.py|\.lua)", name):
            continue  # a description carried over to the next line
        folders = [(at, folder) for at, folder in folders if at < depth]
        path = "".join(folder for _, folder in folders) + name
        if name.endswith("/"):
            folders.append((depth, name))
        yield path


def test_every_module_the_layout_names_exists() -> None:
    missing = [path for path in _layout_entries() if not (ROOT / path).exists()]

    assert missing == []


def test_every_module_of_the_package_is_in_the_layout() -> None:
    named = set(_layout_entries())
    modules = {
        # A package's __init__.py is its folder's line.
        str(path.parent.relative_to(ROOT)) + "/"
        if path.name == "__init__.py" and path.parent != PACKAGE
        else str(path.relative_to(ROOT))
        for path in PACKAGE.rglob("*.py")
    }

    assert sorted(modules - named) == []


def _cited_tests(page: Path) -> Iterator[tuple[str, str | None]]:
    """(test file, test name or None) for each test the page cites, in order."""
    current: str | None = None
    for span in CODE_SPAN.findall(page.read_text()):
        cited = CITATION.fullmatch(span)
        if cited is None or not any(cited.groups()):
            continue
        current = cited[1] or current
        assert current is not None, f"{page.name}: {span} follows no test file"
        yield current, cited[2]


def _defined_names(test_file: Path) -> set[str]:
    """Every function and class a test module defines, at any depth."""
    tree = ast.parse(test_file.read_text())
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {node.name for node in ast.walk(tree) if isinstance(node, kinds)}


def test_the_guarantees_cite_tests() -> None:
    cited = list(_cited_tests(ROOT / "docs" / "guarantees.md"))

    assert len({name for _, name in cited if name}) >= 30


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_test_a_page_cites_exists(page: Path) -> None:
    missing = []
    for test_file, name in _cited_tests(page):
        path = ROOT / "tests" / test_file
        if not path.exists():
            missing.append(test_file)
        elif name is not None and name not in _defined_names(path):
            missing.append(f"{test_file}::{name}")

    assert missing == []


def test_every_state_machine_the_guarantees_name_exists() -> None:
    text = (ROOT / "docs" / "guarantees.md").read_text()
    named = re.findall(r"`(test_\w+\.py)` \((\w+)\)", text)
    missing = [
        f"{test_file} ({name})"
        for test_file, name in named
        if name not in _defined_names(ROOT / "tests" / test_file)
    ]

    assert named
    assert missing == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path) -> None:
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        file_part, _, anchor = target.partition("#")
        linked = (page.parent / file_part).resolve() if file_part else page
        checks_anchor = bool(anchor) and linked.suffix == ".md"
        if not linked.exists() or (checks_anchor and anchor not in _anchors(linked)):
            broken.append(target)

    assert broken == []


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_script_and_module_a_page_names_exists(page: Path) -> None:
    text = page.read_text()
    scripts = {name for name in LUA_NAME.findall(text) if not (LUA / name).exists()}
    paths = {
        span
        for span in CODE_SPAN.findall(text)
        if SOURCE_PATH.fullmatch(span)
        and not (ROOT / span).exists()
        and not (PACKAGE / span).exists()
    }

    assert sorted(scripts | paths) == []


def _reference_sections() -> dict[str, list[str]]:
    """Module -> the names docs/reference.md lists under its '## `module`' heading."""
    text = _prose((ROOT / "docs" / "reference.md").read_text())
    sections: dict[str, list[str]] = {}
    for part in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading, _, body = part.partition("\n")
        module = heading.strip().strip("`")
        sections[module] = re.findall(r"^- `(\w+)`", body, flags=re.MULTILINE)
    return sections


def test_the_reference_lists_exactly_the_public_names_of_each_module() -> None:
    sections = _reference_sections()

    assert "taskiq_fanin" in sections
    for module, listed in sections.items():
        public = importlib.import_module(module).__all__
        assert sorted(listed) == sorted(public), module
        assert len(listed) == len(set(listed)), module


def test_every_public_module_has_its_section_in_the_reference() -> None:
    """A module of the package's top level with an ``__all__`` is public."""
    public = {"taskiq_fanin"}
    for path in [*PACKAGE.glob("*.py"), *PACKAGE.glob("*/__init__.py")]:
        name = path.parent.name if path.name == "__init__.py" else path.stem
        if path.parent == PACKAGE and path.name == "__init__.py":
            continue
        if not name.startswith("_") and "__all__" in path.read_text():
            public.add(f"taskiq_fanin.{name}")

    assert sorted(public - set(_reference_sections())) == []


def test_the_readme_album_is_the_example_that_runs() -> None:
    """The README's code is examples/album/app.py's, which test_examples runs."""
    readme = (ROOT / "README.md").read_text()
    album = _section(readme, "## The album")
    code = re.search(r"```python\n(.*?)```", album, flags=re.DOTALL)
    commands = re.search(r"```sh\n(.*?)```", album, flags=re.DOTALL)
    assert code is not None
    assert commands is not None
    app = {
        line.strip()
        for line in (ROOT / "examples/album/app.py").read_text().splitlines()
    }
    example_readme = (ROOT / "examples/album/README.md").read_text()

    assert [line for line in code[1].splitlines() if line.strip() not in app] == []
    for command in commands[1].splitlines():
        assert f"\n{command}\n" in example_readme


def test_the_readme_keeps_its_two_commands_and_five_minutes() -> None:
    readme = (ROOT / "README.md").read_text()
    quick_start = _section(readme, "## Quick start")
    block = re.search(r"```sh\n(.*?)```", quick_start, flags=re.DOTALL)
    assert block is not None

    assert [line.split("#")[0].strip() for line in block[1].splitlines()] == [
        "make bench",
        "make test",
    ]
    assert len(readme.splitlines()) <= 150
