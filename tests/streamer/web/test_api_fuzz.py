"""The running service fuzzed against its own OpenAPI document (schemathesis): no answer is a
server error, none is outside the document. Its own service: the fuzzer erases events."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from converters.paths import PROJECT_ROOT
from streamer.inference.embedded.server import EmbeddedTriton
from tests.streamer.web.running_service import (
    TOKEN,
    RunningService,
    clip_service_config,
    running_service,
)
from tests.webhook_receiver import new_secret

ARTIFACTS = PROJECT_ROOT / "test-output" / "test_api"


@pytest.fixture
def fuzzed(triton_server: EmbeddedTriton, tmp_path: Path) -> Iterator[RunningService]:
    secret = new_secret()
    config = clip_service_config(triton_server.grpc_url, secret)
    with running_service(tmp_path / "site.yaml", config, secret) as service:
        deadline = time.monotonic() + 120
        while not service.receiver.delivered():  # the history has an event to fuzz with
            assert time.monotonic() < deadline, "no event"
            time.sleep(0.1)
        yield service


def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_schema(
    fuzzed: RunningService,
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = ARTIFACTS / "schemathesis.txt"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{fuzzed.base}/api/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance",
        # Endless streams: tested on their own (test_server.py, test_live_events.py).
        "--exclude-path",
        "/api/cameras/{name}/mjpeg",
        "--exclude-path",
        "/api/events/live",
        "--max-examples",
        "10",
        "--seed",
        "1",
        "--request-timeout",
        "20",
        "--max-time",
        "20",  # the coverage phase (every operation, every bound) takes seconds; the rest
        # fuzzes on until then
        "--no-color",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=420, cwd=ARTIFACTS)
    report.write_text(result.stdout + result.stderr)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert "passed" in result.stdout.lower(), result.stdout[-2000:]
