"""Shared fixtures: real embedded Tritons on the project's model repositories, a real
PostgreSQL server, a real webhook receiver."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from converters.cli import main as converters_main
from converters.paths import MODEL_REPOSITORY
from streamer.inference.embedded.server import EmbeddedTriton
from tests.postgres_server import PostgresServer
from tests.webhook_receiver import Receiver, new_secret


def _built_info() -> dict[str, object]:
    info_path = MODEL_REPOSITORY / "build_info.json"
    if not info_path.is_file():
        pytest.fail("model_repository/ is not built: run `make models` (or `make test`)")
    info = json.loads(info_path.read_text())
    assert isinstance(info, dict)
    return info


def _cpu_repository(runtime: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``model_repository/`` if `make models` built it for ``runtime`` in fp32, else a build
    of its own (fp32).

    A build of its own gets the same detector input size, so both read frames alike.
    """
    info = _built_info()
    if info.get("runtime", "torchscript") == runtime and info.get("precision", "fp32") == "fp32":
        return MODEL_REPOSITORY
    height, width = info["input_hw"]  # type: ignore[misc]
    out = tmp_path_factory.mktemp(runtime) / "model_repository"
    args = ["build", "--target", "cpu", "--runtime", runtime, "--out", str(out)]
    assert converters_main([*args, "--input-size", f"{height}x{width}"]) == 0
    return out


def _serve(repository: Path) -> Iterator[EmbeddedTriton]:
    logging.getLogger("streamer.inference.embedded.server").setLevel(logging.WARNING)
    server = EmbeddedTriton(repository)
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(autouse=True)
def _logging_as_it_was() -> Iterator[None]:
    """Restore the root logger after a test that ran a CLI command in this process.

    The CLI's ``setup_logging`` points the root logger at the ``sys.stderr`` of its moment
    (pytest's capture of that test). Left in place, every later record went to that closed
    file: a "Logging error" traceback per record, held in the next tests' captured output
    (it grew the overload test's memory) and slowing them.
    """
    root = logging.getLogger()
    before, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):  # pytest's own handlers come and go by themselves
        if handler not in before and not type(handler).__module__.startswith("_pytest"):
            root.removeHandler(handler)
    root.setLevel(level)


@pytest.fixture(scope="session")
def repository_server() -> Iterator[EmbeddedTriton]:
    """One CPU Triton for the session, on ``model_repository/`` as `make models` built it."""
    _built_info()
    yield from _serve(MODEL_REPOSITORY)


@pytest.fixture(scope="session")
def triton_server(repository_server: EmbeddedTriton) -> EmbeddedTriton:
    """The Triton the tests use (tests/model_repository runs each CPU runtime instead)."""
    return repository_server


class SpareTriton:
    """A second CPU Triton for the session, on one port throughout, for the tests that
    kill -9 one of two: :meth:`running` gives it, started again if a test killed it."""

    def __init__(self) -> None:
        self.server: EmbeddedTriton | None = None
        self.port: int | None = None

    async def running(self) -> EmbeddedTriton:
        if self.server is not None and self.server.running:
            return self.server
        if self.server is not None:
            await self.server.astop()  # reaps a killed server and the stubs it left
        self.server = EmbeddedTriton(MODEL_REPOSITORY, grpc_port=self.port)
        await self.server.astart()  # (a start that crashes is tried again: EmbeddedTriton)
        self.port = int(self.server.grpc_url.rsplit(":", 1)[1])
        return self.server


@pytest.fixture(scope="session")
def spare_triton() -> Iterator[SpareTriton]:
    spare = SpareTriton()
    yield spare
    if spare.server is not None:
        spare.server.stop()


@pytest.fixture(scope="session")
def postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A real PostgreSQL server for the session (tests/postgres_server.py); each
    ``database()`` is a new, empty database on it."""
    with PostgresServer(tmp_path_factory.mktemp("postgres")) as server:
        yield server


@pytest.fixture(scope="session")
def torchscript_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CPU repository serving TorchScript (``--runtime torchscript``, the default)."""
    return _cpu_repository("torchscript", tmp_path_factory)


@pytest.fixture(scope="session")
def openvino_repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CPU repository serving OpenVINO IR (``--runtime openvino``, fp32)."""
    return _cpu_repository("openvino", tmp_path_factory)


@pytest.fixture(scope="session")
def torchscript_server(
    torchscript_repository: Path, request: pytest.FixtureRequest
) -> Iterator[EmbeddedTriton]:
    """A CPU Triton on :func:`torchscript_repository` (the session's one if that is it)."""
    if torchscript_repository == MODEL_REPOSITORY:
        yield request.getfixturevalue("repository_server")
    else:
        yield from _serve(torchscript_repository)


@pytest.fixture(scope="session")
def openvino_server(
    openvino_repository: Path, request: pytest.FixtureRequest
) -> Iterator[EmbeddedTriton]:
    """A CPU Triton on :func:`openvino_repository` (the session's one if that is it)."""
    if openvino_repository == MODEL_REPOSITORY:
        yield request.getfixturevalue("repository_server")
    else:
        yield from _serve(openvino_repository)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    """A webhook receiver on 127.0.0.1 (tests/webhook_receiver.py) with a new secret."""
    rx = await Receiver(new_secret()).start()
    try:
        yield rx
    finally:
        await rx.stop()
