"""A locked-down ``redis-server``: TLS only, and ACL users, the default one off.

As production runs Redis: clients reach it over ``rediss://`` with a
certificate it checks against a CA (made here, for loopback, with the
``openssl`` command), and each as a user of its own. The server starts with
one user, ``admin`` (everything, for the harness: readiness, ``ACL SETUSER``,
``ACL LOG``); whoever uses it adds the users under test with ``ACL SETUSER``.

::

    with SecureRedisServer() as server:
        admin = redis.Redis.from_url(server.admin_url)
        admin.execute_command("ACL", "SETUSER", "app", "on", ">pw", ...)
        url = server.url_for("app", "pw")  # rediss://app:pw@127.0.0.1:port/0?...
"""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path
from typing import Any
from urllib.parse import quote

from local_redis.host import LOOPBACK
from local_redis.server import RedisServer

#: The harness's user: everything.
ADMIN = "admin"

#: What a redis-server built without TLS says when asked for a TLS port.
_NO_TLS = ("TLS not supported", "Bad directive or wrong number of arguments")


class TlsUnavailableError(RuntimeError):
    """This machine cannot run a TLS redis-server.

    No ``openssl`` to make certificates, or a redis-server built without TLS.
    """


def make_certificates(directory: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for 127.0.0.1: (ca, cert, key) files.

    Raises:
        TlsUnavailableError: no ``openssl`` on PATH.
    """
    openssl = shutil.which("openssl")
    if openssl is None:
        msg = "openssl was not found on PATH: it makes the test certificates"
        raise TlsUnavailableError(msg)
    ca, ca_key = directory / "ca.pem", directory / "ca.key"
    cert, key = directory / "server.pem", directory / "server.key"
    request, extensions = directory / "server.csr", directory / "san.cnf"
    extensions.write_text(f"subjectAltName=IP:{LOOPBACK}\n")
    ec = ("-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes")
    for command in (
        ("req", "-x509", *ec, "-keyout", ca_key, "-out", ca, "-days", "1",
         "-subj", "/CN=taskiq-fanin test CA"),
        ("req", *ec, "-keyout", key, "-out", request, "-subj", f"/CN={LOOPBACK}"),
        ("x509", "-req", "-in", request, "-CA", ca, "-CAkey", ca_key,
         "-CAcreateserial", "-out", cert, "-days", "1", "-extfile", extensions),
    ):  # fmt: skip
        subprocess.run([openssl, *map(str, command)], check=True, capture_output=True)
    return ca, cert, key


class SecureRedisServer(RedisServer):
    """A ``RedisServer`` that listens with TLS only, its default user off.

    Its ``url`` is the admin's; :meth:`url_for` gives another user's.

    Raises (from :meth:`start`):
        TlsUnavailableError: no ``openssl``, or the server cannot do TLS.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.admin_password = secrets.token_hex(16)
        self._ca: Path | None = None

    @property
    def ca_file(self) -> Path:
        """The CA that signed the server's certificate (clients check against it)."""
        if self._ca is None:
            msg = "the server is not running: call start() first"
            raise RuntimeError(msg)
        return self._ca

    @property
    def url(self) -> str:
        """The admin's ``rediss://`` URL."""
        return self.url_for(ADMIN, self.admin_password)

    @property
    def admin_url(self) -> str:
        """The same as ``url``, by its name."""
        return self.url

    def url_for(self, user: str, password: str) -> str:
        """A ``rediss://`` URL of database 0 as ``user``, checking the CA."""
        who = f"{quote(user, safe='')}:{quote(password, safe='')}"
        ca = quote(str(self.ca_file), safe="/")
        return f"rediss://{who}@{LOOPBACK}:{self.port}/0?ssl_ca_certs={ca}"

    def _client_options(self) -> dict[str, Any]:
        return {
            "ssl": True,
            "ssl_ca_certs": str(self.ca_file),
            "username": ADMIN,
            "password": self.admin_password,
        }

    def _server_args(self, port: int) -> list[str]:
        if self._ca is None:
            self._ca, self._cert, self._key = make_certificates(self.directory)
            users = self.directory / "users.acl"
            users.write_text(
                "user default off\n"
                f"user {ADMIN} on >{self.admin_password} ~* &* +@all\n"
            )
            self._users = users
        # A later --port wins: no plain port, the TLS one instead.
        return [
            *super()._server_args(port),
            "--port", "0",
            "--tls-port", str(port),
            "--tls-cert-file", str(self._cert),
            "--tls-key-file", str(self._key),
            "--tls-ca-cert-file", str(self._ca),
            "--tls-auth-clients", "no",
            "--aclfile", str(self._users),
        ]  # fmt: skip

    def _launch(self, executable: str, port: int) -> bool:
        try:
            return super()._launch(executable, port)
        except RuntimeError as exc:
            if any(sign in str(exc) for sign in _NO_TLS):
                msg = f"this redis-server cannot listen with TLS: {exc}"
                raise TlsUnavailableError(msg) from exc
            raise

    def stop(self) -> None:
        """Stop it; its certificates go with its directory."""
        super().stop()
        self._ca = None
