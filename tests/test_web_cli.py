"""``taskiq-fanin web`` as a command: without the extra it says how to install
it (exit 2), acting needs a token, and the core never imports the extra."""

import importlib.util
import subprocess
import sys

import pytest

from taskiq_fanin.cli import main
from taskiq_fanin.cli.commands import TOKEN_ENV


def test_web_without_the_extra_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    real = importlib.util.find_spec

    def without_starlette(name: str, *args, **kwargs):
        return None if name == "starlette" else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_starlette)
    code = main(["web", "--redis-url", "redis://127.0.0.1:1/0"])
    assert code == 2
    err = capsys.readouterr().err
    assert "pip install 'taskiq-fanin[web]'" in err
    assert "starlette" in err


def test_actions_without_a_token_are_a_usage_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    code = main(["web", "--allow-actions", "--redis-url", "redis://127.0.0.1:1/0"])
    assert code == 2
    assert "--allow-actions needs --token" in capsys.readouterr().err


def test_a_port_out_of_range_is_a_usage_error() -> None:
    assert main(["web", "--port", "70000"]) == 2


def test_the_core_and_the_cli_import_no_part_of_the_extra() -> None:
    code = (
        "import sys, taskiq_fanin, taskiq_fanin.cli, taskiq_fanin.inspection;"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('starlette', 'uvicorn')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
