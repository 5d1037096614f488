"""A command run in a real terminal (a pseudo-terminal), its screen output read
as it comes: what a user sees, cursor moves and colours included.
"""

import fcntl
import os
import pty
import re
import signal
import struct
import subprocess
import termios
import threading
from collections.abc import Sequence

from tests.harness import ROOT

#: The terminal's size: wide enough for a bar and its numbers on one line.
ROWS, COLUMNS = 40, 120
#: Escape sequences (colours, cursor moves) between the characters shown.
ANSI = re.compile(rb"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][0-9A-Za-z]|.)")


class Terminal:
    """``command`` running on a pseudo-terminal of its own, read by a thread."""

    def __init__(self, command: Sequence[str], env: dict[str, str]) -> None:
        primary, secondary = pty.openpty()
        fcntl.ioctl(
            secondary, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0)
        )
        environment = {**env, "TERM": "xterm-256color"}
        environment.pop("NO_COLOR", None)
        for name in ("COLUMNS", "LINES", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
            environment.pop(name, None)
        self.process = subprocess.Popen(
            list(command),
            stdin=secondary,
            stdout=secondary,
            stderr=secondary,
            cwd=ROOT,
            env=environment,
            start_new_session=True,  # its own terminal and process group
        )
        os.close(secondary)
        self._primary = primary
        self._output = bytearray()
        self._lock = threading.Lock()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                chunk = os.read(self._primary, 65536)
            except OSError:  # EIO: the command and its terminal are gone
                break
            if not chunk:
                break
            with self._lock:
                self._output.extend(chunk)

    @property
    def raw(self) -> bytes:
        """Everything written to the terminal so far, escape sequences and all."""
        with self._lock:
            return bytes(self._output)

    @property
    def text(self) -> str:
        """What was written, without the escape sequences."""
        return ANSI.sub(b"", self.raw).decode(errors="replace")

    def interrupt(self) -> None:
        """Ctrl-C: SIGINT to the command's process group, as a terminal sends it."""
        os.killpg(self.process.pid, signal.SIGINT)

    def wait(self, timeout: float) -> int:
        """The command's exit code, once it exited and its output was read."""
        try:
            code = self.process.wait(timeout=timeout)
        finally:
            self.close()
        return code

    def close(self) -> None:
        """Stop the command if it still runs; read what it wrote last."""
        if self._primary < 0:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        self._reader.join(timeout=10)
        os.close(self._primary)
        self._primary = -1
