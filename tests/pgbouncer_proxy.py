"""A real PgBouncer (Debian's) in front of a test PostgreSQL (tests/postgres_server.py), on
loopback, in a folder of its own: trust authentication for the server's user, the pool mode
the test asks for, started in the foreground and stopped at the end. PgBouncer refuses to
run as root, so as root it runs as the ``postgres`` user."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Self

from tests.postgres_server import HOST, USER, PostgresServer

BINARY = Path("/usr/sbin/pgbouncer")
_START_S = 20


def available() -> bool:
    return BINARY.is_file()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class PgBouncer:
    """``with PgBouncer(folder, server, "transaction") as proxy: proxy.dsn(server_dsn)``."""

    def __init__(self, folder: Path, server: PostgresServer, pool_mode: str) -> None:
        self.folder = folder
        self.server = server
        self.pool_mode = pool_mode
        self.port = _free_port()
        self._process: subprocess.Popen[bytes] | None = None

    def dsn(self, server_dsn: str) -> str:
        """``server_dsn`` (a database of the server), through this proxy."""
        return server_dsn.replace(f":{self.server.port}/", f":{self.port}/")

    def start(self) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        (self.folder / "users.txt").write_text(f'"{USER}" ""\n')
        ini = self.folder / "pgbouncer.ini"
        ini.write_text(
            "[databases]\n"
            f"* = host={HOST} port={self.server.port}\n"
            "[pgbouncer]\n"
            f"listen_addr = {HOST}\nlisten_port = {self.port}\nunix_socket_dir =\n"
            f"auth_type = trust\nauth_file = {self.folder / 'users.txt'}\n"
            f"pool_mode = {self.pool_mode}\ndefault_pool_size = 4\n"
            f"logfile = {self.folder / 'log'}\n"
        )
        command = [str(BINARY), str(ini)]
        if os.geteuid() == 0:
            postgres = pwd.getpwnam("postgres")
            for path in (self.folder, *self.folder.parents):
                if path == Path("/"):
                    break
                os.chmod(path, os.stat(path).st_mode | 0o711)
            for path in (self.folder, *self.folder.iterdir()):
                os.chown(path, postgres.pw_uid, postgres.pw_gid)
            command = ["runuser", "-u", "postgres", "--", *command]
        self._process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + _START_S
        while True:
            if self._process.poll() is not None:
                err = self._process.stderr.read().decode() if self._process.stderr else ""
                raise RuntimeError(f"pgbouncer exited {self._process.returncode}: {err}")
            try:
                socket.create_connection((HOST, self.port), timeout=1).close()
                return self
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("pgbouncer did not listen") from None
                time.sleep(0.1)

    def close(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.terminate()
            try:
                self._process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait(timeout=10)
        shutil.rmtree(self.folder, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()
