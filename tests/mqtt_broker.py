"""A real MQTT broker for tests (Mosquitto 2.0), and clients that do not use the product's library.

* :func:`make_test_ca` writes a throw-away CA (valid 2 days, EC P-256) with a server certificate
  for ``localhost`` / ``127.0.0.1`` and a client certificate (CN ``lpr-test-client``), made with
  the ``openssl`` command line tool.
* :class:`Broker` runs ``mosquitto -c <folder>/mosquitto.conf`` as a child process, on
  127.0.0.1 and a free port chosen once (at construction) and kept across restarts; optionally
  with users (a ``mosquitto_passwd`` file, changed live by :meth:`Broker.set_password` and
  SIGHUP), TLS (optionally requiring a client certificate) and persistence. Mosquitto's log
  goes to ``<folder>/mosquitto.log`` (:meth:`Broker.log_text`), appended to across restarts.
  The child gets a parent-death signal (SIGKILL), so it never outlives the test process.
* :class:`Subscriber` runs ``mosquitto_sub`` on some topic filters and collects what arrives
  as :class:`Message` objects, read by a thread. ``mosquitto_sub`` reconnects by itself (once a
  second) when the broker goes away and comes back, and subscribes again:
  :attr:`Subscriber.subscriptions` counts the SUBACKs, :meth:`Subscriber.wait_subscribed` waits
  for the next one. A refused CONNECT (bad credentials) makes it exit instead.
* :func:`retained` answers what the broker holds retained under a filter right now;
  :func:`publish` publishes one message with ``mosquitto_pub``.

MQTT semantics to keep in mind (clients speak MQTT 3.1.1):

* ``Message.retain`` is True only for a message sent *because it was retained* when the
  subscription was made; a message published with the retain flag to an existing subscription
  arrives with ``retain=False``.
* ``Message.qos`` is the QoS it was delivered with: the lower of the publisher's and the
  subscription's.
* An empty retained payload clears the topic; the broker delivers nothing for a cleared topic,
  so :func:`retained` simply leaves it out.

Notes on Mosquitto 2.0.11 found while writing this: started as root it drops to the
``mosquitto`` user unless the config says ``user root`` (written here when running as root:
the test folders are usually 0700); its ``log_dest stdout`` is block-buffered into a file, so
the log is written with ``log_dest file``. ``mosquitto_sub -F %j`` prints a non-UTF-8 payload
raw (cut at the first NUL) and an empty one as ``null``, hence the own format here, with the
payload in hex; its ``-d`` lines are block-buffered on a pipe, hence ``stdbuf -oL``.

The parent-death signal fires when the *thread* that started the child exits: start brokers and
subscribers from the test's own (long-lived) thread, not from a worker thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import secrets
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

from streamer.foundation.parent_death import dying_with_parent

HOST = "127.0.0.1"
MOSQUITTO = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
MOSQUITTO_PASSWD = shutil.which("mosquitto_passwd") or "/usr/bin/mosquitto_passwd"
MOSQUITTO_SUB = shutil.which("mosquitto_sub") or "/usr/bin/mosquitto_sub"
MOSQUITTO_PUB = shutil.which("mosquitto_pub") or "/usr/bin/mosquitto_pub"
OPENSSL = shutil.which("openssl") or "/usr/bin/openssl"
STDBUF = shutil.which("stdbuf") or "/usr/bin/stdbuf"

_READY_TIMEOUT_S = 10.0
_STOP_TIMEOUT_S = 5.0
_CLIENT_TIMEOUT_S = 10.0
_CERT_DAYS = 2
#: mosquitto_sub's output per message: retain, qos, length, payload in hex, topic (last: the
#: topic is the only free text, and MQTT forbids control characters, so no tab or newline).
_FORMAT = r"MSG\t%r\t%q\t%l\t%x\t%t"
_MSG_PREFIX = b"MSG\t"
#: A probe topic: '#' and '+' do not match topics starting with '$', so no test sees it.
_PROBE_PREFIX = "$lpr-test-probe/"


def _free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now (bound to port 0, read, closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _probe_topic() -> str:
    return f"{_PROBE_PREFIX}{secrets.token_hex(8)}"


def _conf_value(path: Path) -> str:
    text = str(path)
    if "\n" in text or "\r" in text:
        raise ValueError(f"a path in mosquitto.conf cannot hold a line break: {text!r}")
    return text


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class TlsFiles:
    """PEM files made by :func:`make_test_ca`."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path


_OPENSSL_CNF = """\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = unused
[ca_ext]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost, IP:127.0.0.1
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
[client_ext]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
"""


def _openssl(*args: str) -> None:
    result = subprocess.run(
        [OPENSSL, *args], capture_output=True, text=True, timeout=30, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args[:2])} failed: {result.stderr.strip()}")


def make_test_ca(folder: Path) -> TlsFiles:
    """A self-signed test CA in ``folder`` and two certificates it signed, valid 2 days, EC
    P-256 keys: the server's (``CN=localhost``, SAN ``DNS:localhost`` and ``IP:127.0.0.1``,
    serverAuth) and a client's (``CN=lpr-test-client``, clientAuth). All files are world
    readable (test keys only)."""
    folder = Path(folder).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(
        ca=folder / "ca.crt",
        server_cert=folder / "server.crt",
        server_key=folder / "server.key",
        client_cert=folder / "client.crt",
        client_key=folder / "client.key",
    )
    cnf = folder / "openssl-test-ca.cnf"
    cnf.write_text(_OPENSSL_CNF)
    ca_key = folder / "ca.key"
    new_key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    try:
        _openssl(
            "req", "-x509", "-new", *new_key, "-keyout", str(ca_key), "-out", str(files.ca),
            "-days", str(_CERT_DAYS), "-sha256", "-subj", "/CN=lpr-test-ca",
            "-config", str(cnf), "-extensions", "ca_ext",
        )  # fmt: skip
        leaves = [
            (files.server_cert, files.server_key, "/CN=localhost", "server_ext"),
            (files.client_cert, files.client_key, "/CN=lpr-test-client", "client_ext"),
        ]
        for cert, key, subject, extensions in leaves:
            csr = cert.with_suffix(".csr")
            _openssl(
                "req", "-new", *new_key, "-keyout", str(key), "-out", str(csr),
                "-subj", subject, "-config", str(cnf),
            )  # fmt: skip
            _openssl(
                "x509", "-req", "-in", str(csr), "-CA", str(files.ca), "-CAkey", str(ca_key),
                "-set_serial", f"0x{secrets.token_hex(8)}", "-days", str(_CERT_DAYS),
                "-sha256", "-extfile", str(cnf), "-extensions", extensions, "-out", str(cert),
            )  # fmt: skip
            csr.unlink()
    finally:
        cnf.unlink(missing_ok=True)
    for path in (ca_key, files.ca, files.server_cert, files.server_key):
        path.chmod(0o644)
    for path in (files.client_cert, files.client_key):
        path.chmod(0o644)
    return files


# --------------------------------------------------------------------------- broker


class Broker:
    """Mosquitto on ``127.0.0.1:<port>`` with a config of its own in ``folder``.

    ``users``: None lets anyone in (``allow_anonymous true``); a dict (even empty) allows only
    those users, with those passwords. ``tls``: the listener speaks TLS only (with
    :class:`TlsFiles`' CA, server certificate and key); ``require_client_cert`` makes it ask
    for a client certificate signed by that CA. ``persistence``: retained messages and
    sessions are kept in ``folder`` across restarts (saved at :meth:`stop`; a :meth:`kill`
    loses what changed since the last save).

    The port is chosen when the object is made, so it can go into the product's config
    before :meth:`start`, and stays the same across :meth:`kill` / :meth:`start`.
    """

    host: str = HOST

    def __init__(
        self,
        folder: Path,
        *,
        users: dict[str, str] | None = None,
        tls: TlsFiles | None = None,
        require_client_cert: bool = False,
        persistence: bool = False,
    ) -> None:
        if require_client_cert and tls is None:
            raise ValueError("Broker: require_client_cert needs tls")
        self.folder = Path(folder).resolve()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.users: dict[str, str] | None = dict(users) if users is not None else None
        self.tls = tls
        self.require_client_cert = require_client_cert
        self.persistence = persistence
        self.port = _free_port()
        self.conf_path = self.folder / "mosquitto.conf"
        self.log_path = self.folder / "mosquitto.log"
        self.password_path = self.folder / "mosquitto.passwd"
        self._proc: subprocess.Popen[bytes] | None = None
        self._out: IO[bytes] | None = None
        if self.users is not None:
            self._write_passwords()
        self._write_conf()

    # -- files

    def _write_conf(self) -> None:
        lines = ["# written by tests/mqtt_broker.py", "per_listener_settings false"]
        if os.geteuid() == 0:
            # Otherwise Mosquitto drops to the 'mosquitto' user, which cannot enter a 0700
            # test folder. Without root this line has no effect.
            lines.append("user root")
        lines.append(f"listener {self.port} {HOST}")
        if self.users is None:
            lines.append("allow_anonymous true")
        else:
            lines += ["allow_anonymous false", f"password_file {_conf_value(self.password_path)}"]
        if self.tls is not None:
            lines += [
                f"cafile {_conf_value(self.tls.ca)}",
                f"certfile {_conf_value(self.tls.server_cert)}",
                f"keyfile {_conf_value(self.tls.server_key)}",
                f"require_certificate {'true' if self.require_client_cert else 'false'}",
            ]
        if self.persistence:
            lines += ["persistence true", f"persistence_location {_conf_value(self.folder)}/"]
        else:
            lines.append("persistence false")
        lines += [
            f"log_dest file {_conf_value(self.log_path)}",
            *(f"log_type {kind}" for kind in ("error", "warning", "notice", "information")),
            "log_timestamp_format %Y-%m-%dT%H:%M:%S",
            "connection_messages true",
        ]
        self.conf_path.write_text("\n".join(lines) + "\n")

    def _write_passwords(self) -> None:
        """Write the password file anew (to a new file, then renamed over the old one)."""
        assert self.users is not None
        fresh = self.password_path.with_name(self.password_path.name + ".new")
        fresh.unlink(missing_ok=True)
        fresh.touch()
        for user, password in self.users.items():
            result = subprocess.run(
                [MOSQUITTO_PASSWD, "-b", str(fresh), user, password],
                capture_output=True,
                text=True,
                timeout=_CLIENT_TIMEOUT_S,
                check=False,
            )
            if result.returncode != 0:
                fresh.unlink(missing_ok=True)
                raise RuntimeError(
                    f"mosquitto_passwd for {user!r} failed: {(result.stdout + result.stderr)!r}"
                )
        fresh.chmod(0o644)
        os.replace(fresh, self.password_path)

    # -- lifecycle

    def start(self) -> Self:
        """Start Mosquitto (again, on the same port); wait until it accepts TCP connections
        (at most 10 s). Raises RuntimeError with the log's tail if it exits or times out."""
        if self.running:
            return self
        self._reap()
        self._write_conf()
        offset = self.log_path.stat().st_size if self.log_path.exists() else 0
        self._out = self.log_path.open("ab")  # stderr: errors before the log file is open
        self._proc = subprocess.Popen(
            dying_with_parent([MOSQUITTO, "-c", str(self.conf_path)], signal.SIGKILL),
            stdin=subprocess.DEVNULL,
            stdout=self._out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            self._wait_ready(offset)
        except BaseException:
            self.kill()
            raise
        return self

    def _wait_ready(self, offset: int) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + _READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"mosquitto exited with {self._proc.returncode} at start:\n"
                    f"{self._log_tail(offset)}"
                )
            # "running" comes once the listener is open: a port taken by someone else makes
            # Mosquitto exit instead, though a connect might succeed. (On a TLS listener the
            # bare TCP connect logs a harmless "unexpected eof while reading".)
            if " running" in self._log_since(offset) and self._accepts_tcp():
                return
            time.sleep(0.02)
        raise RuntimeError(
            f"mosquitto did not accept connections on {HOST}:{self.port} within "
            f"{_READY_TIMEOUT_S:.0f} s:\n{self._log_tail(offset)}"
        )

    def _accepts_tcp(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5):
                return True
        except OSError:
            return False

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def kill(self) -> None:
        """SIGKILL (a crashed broker): clients see their connections drop."""
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.kill()
            self._proc.wait(timeout=_STOP_TIMEOUT_S)
        self._reap()

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it has not exited within 5 s."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_STOP_TIMEOUT_S)
        self._reap()

    def restart(self) -> Self:
        """:meth:`stop`, then :meth:`start` on the same port."""
        self.stop()
        return self.start()

    def close(self) -> None:
        self.stop()

    def _reap(self) -> None:
        self._proc = None
        if self._out is not None:
            self._out.close()
            self._out = None

    # -- users

    def set_password(self, user: str, password: str) -> None:
        """Add ``user`` or change its password. A running broker reloads the password file
        (SIGHUP); this returns once ``user`` can connect with ``password`` (at most 10 s).
        Mosquitto 2.0.11 checks the connected clients again on reload: a client of ``user``
        connected with the old password is disconnected (``mosquitto_sub`` then fails to
        reconnect and exits); other users' clients stay connected."""
        if self.users is None:
            raise RuntimeError("Broker: made without users (anonymous); give users={} at least")
        self.users[user] = password
        self._write_passwords()
        if self._proc is None or self._proc.poll() is not None:
            return
        self._proc.send_signal(signal.SIGHUP)
        deadline = time.monotonic() + _READY_TIMEOUT_S
        last = ""
        probe = [MOSQUITTO_SUB, *self.cli_args(username=user, password=password), "-E"]
        while time.monotonic() < deadline:
            result = subprocess.run(
                [*probe, "-t", _probe_topic()],
                capture_output=True,
                text=True,
                timeout=_CLIENT_TIMEOUT_S,
                check=False,
            )
            if result.returncode == 0:
                return
            last = (result.stdout + result.stderr).strip()
            time.sleep(0.05)
        raise RuntimeError(
            f"after SIGHUP, {user!r} still cannot connect ({last}):\n{self._log_tail(0)}"
        )

    # -- clients and log

    def cli_args(
        self,
        *,
        username: str | None = None,
        password: str | None = None,
        tls: TlsFiles | None = None,
    ) -> list[str]:
        """Connection options for ``mosquitto_sub`` / ``mosquitto_pub``: host, port, user,
        password and, on a TLS broker, ``--cafile`` (``tls`` or the broker's own files) plus
        the client certificate when the broker requires one."""
        args = ["-h", HOST, "-p", str(self.port)]
        if username is not None:
            args += ["-u", username]
        if password is not None:
            args += ["-P", password]
        files = tls if tls is not None else self.tls
        if self.tls is not None and files is not None:
            args += ["--cafile", str(files.ca)]
            if self.require_client_cert:
                args += ["--cert", str(files.client_cert), "--key", str(files.client_key)]
        return args

    def log_text(self) -> str:
        """Mosquitto's log so far (all runs of this broker)."""
        if not self.log_path.exists():
            return ""
        return self.log_path.read_text(errors="replace")

    def _log_since(self, offset: int) -> str:
        if not self.log_path.exists():
            return ""
        with self.log_path.open("rb") as log:
            log.seek(offset)
            return log.read().decode(errors="replace")

    def _log_tail(self, offset: int, limit: int = 3000) -> str:
        return self._log_since(offset)[-limit:]

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()

    def __repr__(self) -> str:
        state = f"pid {self.pid}" if self.running else "stopped"
        return f"Broker({HOST}:{self.port}, {state}, folder={self.folder})"


# --------------------------------------------------------------------------- clients


@dataclass(frozen=True)
class Message:
    """One message as a subscriber got it (see the module's notes on ``retain`` and ``qos``)."""

    topic: str
    payload: bytes
    retain: bool
    qos: int

    def json(self) -> Any:
        return json.loads(self.payload)


def _parse_message(line: bytes) -> Message | None:
    """A line of :data:`_FORMAT`, or None if it is not one."""
    if not line.startswith(_MSG_PREFIX):
        return None
    parts = line[len(_MSG_PREFIX) :].split(b"\t", 4)
    if len(parts) != 5:
        return None
    retain, qos, length, payload_hex, topic = parts
    try:
        payload = bytes.fromhex(payload_hex.decode("ascii"))
        if len(payload) != int(length):
            return None
        return Message(
            topic=topic.decode("utf-8"), payload=payload, retain=retain == b"1", qos=int(qos)
        )
    except ValueError:
        return None


def _describe(messages: list[Message], limit: int = 30) -> str:
    if not messages:
        return "nothing"
    shown = [
        f"  {m.topic} (qos {m.qos}, retain {int(m.retain)}): {m.payload[:300]!r}"
        for m in messages[-limit:]
    ]
    skipped = len(messages) - len(shown)
    head = f"{len(messages)} messages" + (f", the last {len(shown)}" if skipped else "")
    return head + ":\n" + "\n".join(shown)


class Subscriber:
    """``mosquitto_sub`` subscribed to ``topics`` (filters, wildcards allowed) at ``qos``.

    :meth:`start` returns once the broker acknowledged the subscription (at most 10 s).
    ``tls`` defaults to the broker's own :class:`TlsFiles` on a TLS broker. The process
    reconnects and subscribes again by itself after a broker restart (see the module
    docstring); messages published while it is disconnected are lost (clean session), unless
    ``persistent``: then the broker keeps its session (``-c``) and queues QoS 1 messages for it
    meanwhile; with a ``persistence=True`` broker that holds across a broker restart too.
    """

    def __init__(
        self,
        broker: Broker,
        *topics: str,
        qos: int = 1,
        username: str | None = None,
        password: str | None = None,
        tls: TlsFiles | None = None,
        persistent: bool = False,
    ) -> None:
        if not topics:
            raise ValueError("Subscriber: give at least one topic filter")
        if qos not in (0, 1, 2):
            raise ValueError(f"Subscriber: qos is 0, 1 or 2, not {qos}")
        self.broker = broker
        self.topics = list(topics)
        self.qos = qos
        self.username = username
        self.password = password
        self.tls = tls
        self.client_id = f"lpr-test-sub-{secrets.token_hex(4)}"
        self._extra_args: list[str] = ["-c"] if persistent else []
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._cond = threading.Condition()
        self._messages: list[Message] = []
        self._output: deque[str] = deque(maxlen=200)
        self._subacks = 0
        self._refused: list[str] = []

    # -- lifecycle

    def start(self) -> Self:
        """Run ``mosquitto_sub``; wait (at most 10 s) for its SUBACK."""
        if self.running:
            return self
        self.stop()
        cmd = [STDBUF, "-oL", MOSQUITTO_SUB, "-d", "-i", self.client_id]
        cmd += self.broker.cli_args(username=self.username, password=self.password, tls=self.tls)
        cmd += ["-q", str(self.qos), "-F", _FORMAT, *self._extra_args]
        for topic in self.topics:
            cmd += ["-t", topic]
        with self._cond:
            self._subacks = 0
            self._refused = []
        self._proc = subprocess.Popen(
            dying_with_parent(cmd, signal.SIGKILL),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self._thread = threading.Thread(
            target=self._read, args=(self._proc,), name=f"{self.client_id}-reader", daemon=True
        )
        self._thread.start()
        try:
            self.wait_subscribed(1, _READY_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.rstrip(b"\r\n")
            message = _parse_message(line)
            with self._cond:
                if message is not None:
                    self._messages.append(message)
                else:
                    text = line.decode(errors="replace")
                    self._output.append(text)
                    if text.startswith("Subscribed (mid:"):
                        self._subacks += 1
                        granted = text.partition("):")[2].replace(",", " ").split()
                        if "128" in granted:
                            self._refused.append(text)
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def stop(self) -> None:
        """End ``mosquitto_sub`` (SIGTERM, then SIGKILL); what it received stays readable."""
        proc = self._proc
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(timeout=_STOP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=_STOP_TIMEOUT_S)
            if self._thread is not None:
                self._thread.join(timeout=_STOP_TIMEOUT_S)
            if proc.stdout is not None:
                proc.stdout.close()
        self._proc = None
        self._thread = None

    # -- what arrived

    @property
    def messages(self) -> list[Message]:
        """A copy of every message received so far, in order."""
        with self._cond:
            return list(self._messages)

    def on(self, topic: str) -> list[Message]:
        """The messages received on exactly ``topic`` (no wildcards)."""
        return [m for m in self.messages if m.topic == topic]

    @property
    def subscriptions(self) -> int:
        """SUBACKs seen since :meth:`start`: 1, and one more after each reconnect."""
        with self._cond:
            return self._subacks

    def output(self) -> str:
        """``mosquitto_sub``'s own lines (debug, errors; not the messages), the last 200."""
        with self._cond:
            return "\n".join(self._output)

    def wait_subscribed(self, count: int = 1, timeout_s: float = _READY_TIMEOUT_S) -> None:
        """Wait until :attr:`subscriptions` reaches ``count`` (after a broker restart: the
        count before it plus one). Raises RuntimeError if ``mosquitto_sub`` exits first or a
        filter is refused, AssertionError on time-out."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                if self._refused:
                    raise RuntimeError(f"subscription refused: {self._refused[-1]}")
                if self._subacks >= count:
                    return
                proc = self._proc
                if proc is None or (proc.poll() is not None and not self._reader_alive()):
                    code = None if proc is None else proc.returncode
                    raise RuntimeError(
                        f"mosquitto_sub {self.topics} exited ({code}) before subscribing:\n"
                        + "\n".join(self._output)
                    )
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(
                        f"mosquitto_sub {self.topics}: {self._subacks} SUBACKs, not {count}, "
                        f"within {timeout_s:.1f} s:\n" + "\n".join(list(self._output)[-20:])
                    )
                self._cond.wait(min(left, 0.1))

    def _reader_alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wait_for(self, predicate: Callable[[list[Message]], bool], timeout_s: float = 10.0) -> None:
        """Block until ``predicate(messages)`` is true (it is called with the list so far).
        Raises AssertionError, listing what was received, after ``timeout_s``. Blocking: in an
        async test whose service runs on the same loop, use :meth:`wait_for_async`."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while not predicate(list(self._messages)):
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(self._timeout_text(timeout_s))
                self._cond.wait(min(left, 0.1))

    async def wait_for_async(
        self, predicate: Callable[[list[Message]], bool], timeout_s: float = 10.0
    ) -> None:
        """:meth:`wait_for` without blocking the event loop (polls every 50 ms)."""
        deadline = time.monotonic() + timeout_s
        while not predicate(self.messages):
            if time.monotonic() >= deadline:
                with self._cond:
                    raise AssertionError(self._timeout_text(timeout_s))
            await asyncio.sleep(0.05)

    def _timeout_text(self, timeout_s: float) -> str:
        state = "running" if self.running else "NOT running"
        return (
            f"Subscriber {self.topics} ({state}): condition not met within {timeout_s:.1f} s; "
            f"received {_describe(self._messages)}"
        )

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.stop()


def publish(
    broker: Broker,
    topic: str,
    payload: bytes | str,
    *,
    retain: bool = False,
    qos: int = 1,
    username: str | None = None,
    password: str | None = None,
    tls: TlsFiles | None = None,
) -> None:
    """Publish one message with ``mosquitto_pub`` (returns after the PUBACK at qos 1). An
    empty payload with ``retain=True`` clears the retained message of ``topic``."""
    data = payload.encode() if isinstance(payload, str) else bytes(payload)
    cmd = [MOSQUITTO_PUB, *broker.cli_args(username=username, password=password, tls=tls)]
    cmd += ["-t", topic, "-q", str(qos)]
    if retain:
        cmd.append("-r")
    cmd.append("-s" if data else "-n")  # -s: the whole of stdin, bytes as they are
    result = subprocess.run(
        cmd, input=data, capture_output=True, timeout=_CLIENT_TIMEOUT_S, check=False
    )
    if result.returncode != 0:
        output = (result.stdout + result.stderr).decode(errors="replace").strip()
        raise RuntimeError(f"mosquitto_pub to {topic!r} failed ({result.returncode}): {output}")


def retained(
    broker: Broker,
    topic_filter: str,
    *,
    wait_s: float = 5.0,
    username: str | None = None,
    password: str | None = None,
    tls: TlsFiles | None = None,
) -> dict[str, bytes]:
    """What the broker holds retained under ``topic_filter`` now: topic -> payload.

    A ``mosquitto_sub --retained-only`` subscribes to the filter and to a probe topic; after
    its SUBACK a non-retained probe message is published, which the broker delivers after the
    retained ones and which ends ``mosquitto_sub``. So this usually returns in a fraction of
    a second; ``wait_s`` bounds it (AssertionError after). Cleared topics are absent. Raises
    RuntimeError when the client cannot connect (a wrong password does not read as "none").
    """
    probe = _probe_topic()
    auth: dict[str, Any] = {"username": username, "password": password, "tls": tls}
    subscriber = Subscriber(broker, topic_filter, probe, qos=0, **auth)
    # -W: only a backstop, should this process outlive its parent's deadline below.
    subscriber._extra_args = ["--retained-only", "-W", str(math.ceil(wait_s) + 5)]
    deadline = time.monotonic() + wait_s
    try:
        subscriber.start()
        publish(broker, probe, b"probe", qos=0, **auth)
        while subscriber.running and time.monotonic() < deadline:
            time.sleep(0.01)
        proc = subscriber._proc
        code = None if proc is None else proc.poll()
        if code is None:
            raise AssertionError(
                f"retained({topic_filter!r}): the probe did not come back within {wait_s} s; "
                f"got {_describe(subscriber.messages)}"
            )
        if code != 0:
            raise RuntimeError(
                f"retained({topic_filter!r}): mosquitto_sub exited with {code}:\n"
                f"{subscriber.output()}"
            )
    finally:
        subscriber.stop()
    return {m.topic: m.payload for m in subscriber.messages if m.retain and m.topic != probe}
