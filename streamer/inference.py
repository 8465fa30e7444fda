"""Client of the ``plate_recognition`` model over one gRPC bidirectional stream.

Every camera's frames share one stream (``tritonclient.grpc.aio``); request ids
correlate the responses, which may come back in any order. Each request has a
deadline. When the stream breaks or Triton restarts, the requests in flight
fail at once (none hang) and the stream is reopened with capped exponential
backoff; requests made meanwhile wait in a bounded outbox until their deadline.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import logging
import random
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import InferInput, InferRequestedOutput, InferResult

from streamer.frames import Frame, PlateReading

LOG = logging.getLogger(__name__)

OUTPUTS = ("boxes", "det_scores", "texts", "text_scores")


class InferenceError(Exception):
    """A frame could not be recognised; ``kind`` is deadline, stream or model."""

    def __init__(self, message: str, kind: str = "model") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class InferenceStats:
    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0
    reconnects: int = 0


class PlateRecognizer:
    """Many frames in flight on one stream to Triton; ``recognise`` awaits one frame's plates."""

    def __init__(
        self,
        url: str,
        model: str = "plate_recognition",
        *,
        request_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        reconnect_initial_delay_s: float = 0.5,
        reconnect_max_delay_s: float = 10.0,
    ) -> None:
        self.url = url
        self.model = model
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self.reconnect_initial_delay_s = reconnect_initial_delay_s
        self.reconnect_max_delay_s = reconnect_max_delay_s
        self.stats = InferenceStats()
        # Requests not yet written to the stream. Bounded by the callers: each
        # camera pipeline has at most ``max_in_flight_per_camera`` frames here.
        self._outbox: collections.deque[dict[str, Any]] = collections.deque()
        self._outbox_ready = asyncio.Event()
        self._pending: dict[str, asyncio.Future[tuple[PlateReading, ...]]] = {}
        self._ids = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._closed = False
        self._generation = 0  # one per stream opened

    @property
    def ready(self) -> bool:
        """True while the stream to a ready server is open."""
        return self._connected.is_set()

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="triton-stream")

    async def wait_ready(self, timeout_s: float) -> None:
        await asyncio.wait_for(self._connected.wait(), timeout_s)

    async def close(self) -> None:
        """Stop the stream; requests still waiting fail with InferenceError. Idempotent."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self._fail_pending("client closed")

    async def recognise(self, frame: Frame) -> tuple[PlateReading, ...]:
        if self._closed:
            raise InferenceError("client closed", "stream")
        rid = f"{frame.camera}:{frame.index}:{next(self._ids)}"
        tensor = await asyncio.to_thread(_image_input, frame.image)
        future: asyncio.Future[tuple[PlateReading, ...]] = (
            asyncio.get_running_loop().create_future()
        )
        self._pending[rid] = future
        request = {
            "model_name": self.model,
            "inputs": [tensor],
            "request_id": rid,
            "outputs": [InferRequestedOutput(name) for name in OUTPUTS],
        }
        try:
            async with asyncio.timeout(self.request_timeout_s):
                self._outbox.append(request)
                self._outbox_ready.set()
                return await future
        except TimeoutError:
            self.stats.timed_out += 1
            raise InferenceError(
                f"no answer within {self.request_timeout_s:g} s for frame {frame.index}",
                "deadline",
            ) from None
        finally:
            self._pending.pop(rid, None)

    # -- the stream -------------------------------------------------------------------------

    async def _run(self) -> None:
        delay = self.reconnect_initial_delay_s
        first = True
        while True:
            try:
                await self._serve_one_stream()
                delay = self.reconnect_initial_delay_s
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                LOG.debug("stream error: %r", exc)
                reason = _short(exc)
            else:
                reason = "stream ended"
            was_connected = self._connected.is_set()
            self._connected.clear()
            self._fail_pending(f"Triton stream lost: {reason}")
            if was_connected or first:
                LOG.warning("Triton at %s lost (%s); reconnecting", self.url, reason)
            first = False
            self.stats.reconnects += 1
            await asyncio.sleep(random.uniform(0, delay))  # full jitter
            delay = min(delay * 2, self.reconnect_max_delay_s)

    async def _serve_one_stream(self) -> None:
        client = aioclient.InferenceServerClient(self.url)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if not await client.is_model_ready(self.model):
                    raise InferenceError(f"model {self.model} is not ready")
            self._generation += 1
            self._outbox_ready.set()  # wakes the old stream's iterator, which then ends
            call = client.stream_infer(self._requests(self._generation))
            self._connected.set()
            LOG.info("Triton stream to %s open (model %s ready)", self.url, self.model)
            try:
                # The aio client drops the request id of error responses
                # (``(None, error)``); the raw responses keep it, so read those.
                async for response in call._grpc_call:
                    self._resolve(response)
            finally:
                call.cancel()  # also stops it reading our request iterator
        finally:
            self._connected.clear()
            await client.close()

    async def _requests(self, generation: int) -> AsyncIterator[dict[str, Any]]:
        """The requests of one stream; ends (taking nothing) once a newer stream exists."""
        while generation == self._generation:
            while self._outbox and generation == self._generation:
                request = self._outbox.popleft()
                future = self._pending.get(request["request_id"])
                if future is None or future.done():
                    continue  # its caller gave up (deadline) while it waited
                self.stats.sent += 1
                yield request
            self._outbox_ready.clear()
            await self._outbox_ready.wait()

    def _resolve(self, response: Any) -> None:
        rid = response.infer_response.id
        future = self._pending.get(rid)
        if future is None or future.done():
            return  # answered after its deadline
        if response.error_message:
            self.stats.failed += 1
            future.set_exception(InferenceError(response.error_message))
            return
        try:
            plates = _parse(InferResult(response.infer_response))
        except Exception as exc:  # a malformed response fails this frame only
            self.stats.failed += 1
            future.set_exception(InferenceError(f"bad response: {exc}"))
            return
        self.stats.succeeded += 1
        future.set_result(plates)

    def _fail_pending(self, reason: str) -> None:
        for future in self._pending.values():
            if not future.done():
                self.stats.failed += 1
                future.set_exception(InferenceError(reason, "stream"))


def _image_input(image: np.ndarray) -> InferInput:
    tensor = InferInput("image", list(image.shape), "UINT8")
    tensor.set_data_from_numpy(np.ascontiguousarray(image))
    return tensor


def _parse(result: InferResult) -> tuple[PlateReading, ...]:
    boxes = result.as_numpy("boxes")
    scores = result.as_numpy("det_scores")
    texts = result.as_numpy("texts")
    text_scores = result.as_numpy("text_scores")
    if boxes is None or scores is None or texts is None or text_scores is None:
        raise ValueError("missing outputs")
    return tuple(
        PlateReading(
            box=(float(b[0]), float(b[1]), float(b[2]), float(b[3])),
            det_score=float(s),
            text=t.decode() if isinstance(t, bytes) else str(t),
            text_score=float(ts),
        )
        for b, s, t, ts in zip(boxes.reshape(-1, 4), scores, texts, text_scores, strict=True)
    )


def _short(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    text = details() if callable(details) else str(exc)
    return (text or type(exc).__name__).splitlines()[0][:200]
