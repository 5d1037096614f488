"""The built wheel carries what the code loads at run time (the Lua scripts and
the ``py.typed`` marker), nothing of the tests' or benchmarks', and the metadata
an index shows; installed into an empty venv, it imports and its command runs.
"""

import os
import re
import shutil
import subprocess
import sys
import zipfile
from email.message import Message
from email.parser import Parser
from importlib.metadata import distributions
from pathlib import Path

import pytest

#: Reads files, not the dependencies: run once, in `make test`, not at the floors.
pytestmark = pytest.mark.surface

ROOT = Path(__file__).resolve().parent.parent
DIST_INFO = "taskiq_fanin-0.1.0.dist-info"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built once for this module, offline.

    Built from a copy of the tree without its build leftovers: setuptools
    reuses a ``build/`` directory, and one left from before a module moved
    put the old files in the wheel beside the new ones.
    """
    wheel_dir = tmp_path_factory.mktemp("wheel")
    source = tmp_path_factory.mktemp("source") / "taskiq-fanin"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__",
            ".*_cache", "bench-results*",
        ),
    )  # fmt: skip
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--quiet",
            "--wheel-dir",
            str(wheel_dir),
            str(source),
        ],
        check=True,
        capture_output=True,
    )
    (built,) = wheel_dir.glob("taskiq_fanin-*.whl")
    return built


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as archive:
        text = archive.read(f"{DIST_INFO}/METADATA").decode()
    return Parser().parsestr(text)


def test_the_wheel_ships_every_lua_script_and_py_typed(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every script the package finds in its folder, and the prelude.
    folder = ROOT / "taskiq_fanin" / "storage" / "lua"
    scripts = {f"taskiq_fanin/storage/lua/{path.name}" for path in folder.glob("*.lua")}
    assert len(scripts) > 20
    assert {name for name in names if name.endswith(".lua")} == scripts
    assert "taskiq_fanin/py.typed" in names
    packages = {name.split("/")[0] for name in names}
    assert packages == {"taskiq_fanin", DIST_INFO}


def test_the_wheel_names_its_license_authors_readme_and_urls(wheel: Path) -> None:
    meta = _metadata(wheel)
    assert meta["License-Expression"] == "MIT"
    assert meta["License-File"] == "LICENSE"
    assert f"{DIST_INFO}/licenses/LICENSE" in zipfile.ZipFile(wheel).namelist()
    assert meta["Author"] == "taskiq-fanin contributors"
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload() == (ROOT / "README.md").read_text()
    urls = dict(entry.split(", ", 1) for entry in meta.get_all("Project-URL", []))
    assert sorted(urls) == ["Homepage", "Issues", "Source"]


def test_the_python_classifiers_start_at_requires_python(wheel: Path) -> None:
    meta = _metadata(wheel)
    pattern = re.compile(r"Programming Language :: Python :: 3\.(\d+)")
    found = [pattern.fullmatch(each) for each in meta.get_all("Classifier", [])]
    minors = sorted(int(match[1]) for match in found if match)
    assert meta["Requires-Python"] == f">=3.{minors[0]}"
    assert minors == list(range(minors[0], minors[-1] + 1))  # no Python skipped


def test_the_python_classifiers_are_the_pythons_ci_runs(wheel: Path) -> None:
    """``make test`` and ``make test-lowest`` pick a Python each (the
    Makefile's PYTHON and LOWEST_PYTHON); the classifiers name those, no other."""
    makefile = (ROOT / "Makefile").read_text().replace("\\\n", " ")
    picked = {
        int(minor)
        for variable in ("PYTHON", "LOWEST_PYTHON")
        for minor in re.findall(
            r"for py in python3\.(\d+)",
            re.search(rf"^{variable} \?= (.+)$", makefile, re.MULTILINE)[1],
        )
    }
    pattern = re.compile(r"Programming Language :: Python :: 3\.(\d+)")
    found = [pattern.fullmatch(c) for c in _metadata(wheel).get_all("Classifier", [])]
    assert {int(match[1]) for match in found if match} == picked == {10, 11}


def _pins_of_this_environment() -> str:
    """``name==version`` of every package here but this project, first found first."""
    pins: dict[str, str] = {}
    for dist in distributions():
        name = re.sub(r"[-_.]+", "-", dist.metadata["Name"]).lower()
        if name != "taskiq-fanin":
            pins.setdefault(name, f"{name}=={dist.version}\n")
    return "".join(pins.values())


@pytest.mark.network
def test_the_wheel_installs_into_an_empty_venv_and_its_commands_run(
    wheel: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True
    )
    python = env_dir / "bin" / "python"
    # The versions the rest of the suite runs on (every floor, in .venv-lowest):
    # the wheel's own requirements must accept them.
    constraints = tmp_path / "constraints.txt"
    constraints.write_text(_pins_of_this_environment())
    install = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "--python", str(python), "install"),
            *("--quiet", "--constraint", str(constraints), str(wheel)),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, install.stderr
    # Away from the checkout, so nothing is imported from the source tree.
    clean_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}

    def run(*command: str | Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(part) for part in command],
            check=False,
            cwd=tmp_path,
            env=clean_env,
            capture_output=True,
            text=True,
        )

    imported = run(
        python, "-I", "-c", "import taskiq_fanin; print(taskiq_fanin.__file__)"
    )
    assert imported.returncode == 0, imported.stderr
    assert Path(imported.stdout.strip()).is_relative_to(env_dir)
    script = run(env_dir / "bin" / "taskiq-fanin", "--help")
    assert script.returncode == 0, script.stderr
    assert script.stdout.startswith("usage: taskiq-fanin ")
    through_taskiq = run(env_dir / "bin" / "taskiq", "fanin", "--help")
    assert through_taskiq.returncode == 0, through_taskiq.stderr
    assert through_taskiq.stdout.startswith("usage: taskiq fanin ")
