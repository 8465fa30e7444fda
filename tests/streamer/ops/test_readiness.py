"""/readyz tells the truth: when the model answers errors on an external Triton (its detector
unloaded), the service is not ready, naming the model, with one WARNING; once the detector
is loaded again, it is ready and answers resume.

The detector, not ``plate_recognition`` itself: Triton 2.51 aborts (a gRPC assertion,
``proto_buffer_writer.h: !byte_buffer->Valid()``) when the model a stream is answering is
unloaded under it (seen 1 run in 2 here), and the test would measure that crash instead.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient

from converters import assets
from converters.paths import MODEL_REPOSITORY
from streamer.app import Service
from streamer.config import load_config
from streamer.inference.embedded.server import EmbeddedTriton
from tests.polling import answering, until, until_status

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
MODEL = "plate_recognition"
DETECTOR = "detector"


@pytest.fixture(scope="module")
def explicit_triton() -> Iterator[EmbeddedTriton]:
    """A Triton whose models can be unloaded and loaded again (explicit model control)."""
    server = EmbeddedTriton(
        MODEL_REPOSITORY,
        extra_args=["--model-control-mode=explicit", "--load-model=*"],
        startup_timeout_s=300,
    )
    with server:
        yield server


async def test_a_failing_model_makes_the_service_not_ready_naming_it(
    tmp_path: Path,
    explicit_triton: EmbeddedTriton,
    caplog: pytest.LogCaptureFixture,
) -> None:
    config = tmp_path / "service.yaml"
    config.write_text(
        # Every frame to the whole-frame detector (no windows, which the region detector
        # would still answer): each frame fails while it is unloaded, one run of errors.
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 5, motion: {{regions: false}}}}\n"
        f"triton: {{url: '{explicit_triton.grpc_url}'}}\n"
        "events: {stdout: false}\nmetrics: {port: 0}\nweb: {enabled: false}\n"
    )
    service = Service(load_config(config))
    runner = asyncio.create_task(service.run())
    client = grpcclient.InferenceServerClient(explicit_triton.grpc_url)
    try:
        readyz = await answering(service, "yard")
        await until_status(readyz, 200, 30)

        with caplog.at_level(logging.WARNING, logger="streamer.inference.model_errors"):
            await asyncio.to_thread(client.unload_model, DETECTOR)
            after, body = await until_status(readyz, 503, 60)
            print(f"not ready {after:.1f} s after the detector was unloaded: {body['triton']}")
            assert body["triton"].startswith(f"model {MODEL} failing: "), body
            # More failed frames, still one WARNING for the run of errors.
            failed = service.cameras["yard"].pipeline.stats.failed
            await until(
                lambda: service.cameras["yard"].pipeline.stats.failed > failed + 5,
                60,
                "more failed frames",
            )
            warnings = [
                r
                for r in caplog.records
                if r.levelno == logging.WARNING and r.name.startswith("streamer.inference")
            ]
            assert len(warnings) == 1, [r.getMessage() for r in warnings]
            assert "answers errors" in warnings[0].getMessage()

            await asyncio.to_thread(client.load_model, DETECTOR)
            await until_status(readyz, 200, 120)
        answered = service.cameras["yard"].pipeline.stats.answered
        await until(
            lambda: service.cameras["yard"].pipeline.stats.answered > answered + 3,
            120,
            "answers after the model is back",
        )
        assert any("answers again" in r.getMessage() for r in caplog.records)
    finally:
        client.close()
        service.request_stop()
        await asyncio.wait_for(runner, 120)
