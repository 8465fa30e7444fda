"""The plate-pipeline tests of this folder run on both CPU runtimes."""

from __future__ import annotations

import pytest

from streamer.inference.embedded.server import EmbeddedTriton


@pytest.fixture(scope="session", params=["torchscript", "openvino"])
def triton_server(request: pytest.FixtureRequest) -> EmbeddedTriton:
    """The TorchScript repository (``model_repository/``), then the OpenVINO one."""
    server = request.getfixturevalue(f"{request.param}_server")
    assert isinstance(server, EmbeddedTriton)
    return server
