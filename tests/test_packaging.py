"""The built wheel carries what the code loads at run time (the Lua scripts and
the ``py.typed`` marker), and nothing of the tests' or benchmarks'.
"""

import subprocess
import sys
import zipfile
from pathlib import Path

from taskiq_fanin.store.scripts import SCRIPT_FILES

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_ships_every_lua_script_and_py_typed(tmp_path: Path) -> None:
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
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("taskiq_fanin-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for filename in SCRIPT_FILES.values():
        assert f"taskiq_fanin/store/lua/{filename}" in names
    assert "taskiq_fanin/py.typed" in names
    packages = {name.split("/")[0] for name in names}
    assert packages == {"taskiq_fanin", wheel.name.split("-")[0] + "-0.1.0.dist-info"}
