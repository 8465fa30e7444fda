"""A real PostgreSQL server for tests (Debian's postgresql 15), on loopback, in a folder of
its own: ``initdb`` (trust authentication, user ``lpr``), ``pg_ctl start`` on a free port,
``pg_ctl stop -m fast`` at the end (about 3 s in all). PostgreSQL refuses to run as root, so
as root the folder is given to the ``postgres`` user and the commands run as that user.
:meth:`PostgresServer.database` makes a fresh database per test and gives its DSN."""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import uuid
from pathlib import Path
from types import TracebackType
from typing import Self

BIN = Path("/usr/lib/postgresql/15/bin")
HOST = "127.0.0.1"
USER = "lpr"
_TIMEOUT_S = 60


def available() -> bool:
    return (BIN / "initdb").is_file()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class PostgresServer:
    """``with PostgresServer(folder) as server: dsn = server.database()``."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.data = folder / "data"
        self.port = _free_port()
        self._as_root = os.geteuid() == 0

    def _run(self, *args: str) -> None:
        command = [str(BIN / args[0]), *args[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=_TIMEOUT_S)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(command)} failed: {done.stdout}{done.stderr}")

    def start(self) -> Self:
        self.folder.mkdir(parents=True, exist_ok=True)
        if self._as_root:
            postgres = pwd.getpwnam("postgres")
            for path in (self.folder, *self.folder.parents):  # it must reach its folder
                if path == Path("/"):
                    break
                os.chmod(path, os.stat(path).st_mode | 0o711)
            os.chown(self.folder, postgres.pw_uid, postgres.pw_gid)
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", USER, "--no-sync")
        self.resume()
        return self

    def resume(self) -> None:
        """Start the server (again, after :meth:`stop`) on its data and port."""
        options = f"-p {self.port} -k {self.folder} -c listen_addresses={HOST} -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"),
                  "-w", "start")  # fmt: skip

    def database(self) -> str:
        """A new, empty database; its DSN."""
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._run("createdb", "-h", HOST, "-p", str(self.port), "-U", USER, name)
        return f"postgresql://{USER}@{HOST}:{self.port}/{name}"

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        try:
            self.stop()
        finally:
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
