"""Shared fixtures: a real embedded Triton on the project's built model repository."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from converters.paths import MODEL_REPOSITORY
from streamer.triton_server import EmbeddedTriton


@pytest.fixture(scope="session")
def triton_server() -> Iterator[EmbeddedTriton]:
    """One CPU Triton for the session, on ``model_repository/`` as `make models` built it."""
    if not (MODEL_REPOSITORY / "build_info.json").is_file():
        pytest.fail("model_repository/ is not built: run `make models` (or `make test`)")
    logging.getLogger("streamer.triton_server").setLevel(logging.WARNING)
    server = EmbeddedTriton(MODEL_REPOSITORY)
    server.start()
    try:
        yield server
    finally:
        server.stop()
