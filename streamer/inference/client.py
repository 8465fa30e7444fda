"""Client of the ``plate_recognition`` model over one gRPC bidirectional stream.

Every camera's frames share one stream (``tritonclient.grpc.aio``); request ids
correlate the responses, which may come back in any order.

Backpressure bounds the whole path. A frame is sent only with a :class:`Permit`
of the endpoint's :class:`FairScheduler` (an adaptive window shared fairly by
the cameras), and the permit is held until Triton answers that frame or the
stream is reset, never only until its caller gives up: so Triton never holds
more frames than the window.

Deadlines end the work they started. Each request carries its remaining time
as Triton's request ``timeout``; the BLS model checks it between its stages,
passes it on to its sub-requests (whose queue policy rejects them once it has
passed) and answers ``deadline exceeded``. The caller stops waiting at the
deadline; the answer that still comes is discarded and counted (``late``).
Should Triton not answer a frame ``overdue_grace_s`` after its deadline (a hung
server, or a model that ignores the timeout), the stream is reset: Triton
cancels what it holds of it, every frame on it fails and its permits return.

When the stream breaks or Triton restarts, the frames submitted so far fail at
once (none hang) and the stream is reopened with capped exponential backoff;
frames submitted meanwhile wait in the outbox (bounded by the window) for the
new stream or their deadline, whichever comes first.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import InferResult, KeepAliveOptions
from tritonclient.grpc.service_pb2 import ModelStreamInferResponse

from streamer.config import TritonConfig
from streamer.domain.frames import Frame, PlateReading
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.paths import BLS_MODEL
from streamer.inference.messages import (
    ModelInputs,
    focus_input,
    frame_request,
    image_input,
    is_deadline_error,
    parse_answer,
    raw_responses,
    timeout_us,
)
from streamer.inference.model_errors import ModelErrors
from streamer.inference.scheduler import FairScheduler, Permit, scheduler_for

if TYPE_CHECKING:
    from streamer.foundation.supervisor import Supervisor

LOG = logging.getLogger(__name__)

_OVERDUE_CHECK_S = 0.25


#: The kinds of :class:`InferenceError` (``lpr_triton_errors_total``'s labels).
ERROR_KINDS = ("model", "deadline", "stream")


class InferenceError(Exception):
    """A frame could not be recognised; ``kind`` is one of :data:`ERROR_KINDS`."""

    def __init__(self, message: str, kind: str = "model") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass
class InferenceStats:
    """What happened to the frames of one client (the ``lpr_inference_*`` metrics)."""

    sent: int = 0
    succeeded: int = 0
    failed: int = 0
    timed_out: int = 0  # callers that stopped waiting at their deadline
    late: int = 0  # answers that came after their caller's deadline (discarded)
    resets: int = 0  # streams reset because Triton held a frame long past its deadline
    reconnects: int = 0


@dataclass(eq=False)
class _Request:
    """One frame from submission to its answer (or the stream's end)."""

    rid: str
    frame_index: int
    request: dict[str, Any]
    deadline: float  # monotonic
    permit: Permit
    future: asyncio.Future[tuple[PlateReading, ...]]
    sent_at: float | None = None  # monotonic, when written to the stream
    generation: int = 0  # the stream it was written to
    abandoned: bool = field(default=False)  # its caller stopped waiting


class PlateRecognizer:
    """Many frames in flight on one stream to Triton; ``recognise`` awaits one frame's plates."""

    def __init__(
        self,
        url: str,
        model: str = BLS_MODEL,
        *,
        scheduler: FairScheduler | None = None,
        request_timeout_s: float = 10.0,
        connect_timeout_s: float = 10.0,
        overdue_grace_s: float | None = None,
        reconnect_initial_delay_s: float = 0.5,
        reconnect_max_delay_s: float = 10.0,
        keepalive: KeepAliveOptions | None = None,
    ) -> None:
        self.url = url
        self.keepalive = keepalive
        self.model = model
        # Default: the ``triton`` section's defaults (streamer/config/inference.py).
        self.scheduler = scheduler or scheduler_for(TritonConfig())
        self.request_timeout_s = request_timeout_s
        self.connect_timeout_s = connect_timeout_s
        self._overdue_grace_s = overdue_grace_s
        self.reconnect_initial_delay_s = reconnect_initial_delay_s
        self.reconnect_max_delay_s = reconnect_max_delay_s
        self.stats = InferenceStats()
        #: Called with each answer's time at Triton (s, sent to answer), late ones included.
        self.latency_observers: list[Callable[[float], None]] = []
        # Requests not yet written to the stream; bounded by the window (each holds a permit).
        self._outbox: deque[_Request] = deque()
        self._outbox_ready = asyncio.Event()
        self._requests_by_id: dict[str, _Request] = {}
        self._ids = itertools.count()
        self._task: asyncio.Task[None] | None = None
        self._connected = asyncio.Event()
        self._closed = False
        self._generation = 0  # one per stream opened
        self._reset_reason: str | None = None
        self._opened = False  # the current stream got as far as open
        self._call: Any = None  # the open stream's call
        #: Why the stream is not open (its last failure), None while it is.
        self.problem: str | None = "not connected yet"
        #: The current run of frames the model answered with errors.
        self.model_errors = ModelErrors(model, url)
        #: The model's optional inputs (read from its metadata as the stream opens): frames go
        #: as planar YUV 4:2:0 where it takes that (else BGR), with their focus boxes where it
        #: takes those (else it detects on the whole frame).
        self.inputs = ModelInputs()

    @property
    def ready(self) -> bool:
        """True while the stream to a ready server is open."""
        return self._connected.is_set()

    @property
    def model_failing(self) -> bool:
        """The model answered the last frames with errors (streamer/inference/model_errors.py)."""
        return self.model_errors.failing

    @property
    def last_model_error(self) -> str | None:
        """The first line of the model's latest error answer."""
        return self.model_errors.last

    @property
    def overdue_grace_s(self) -> float:
        """How long after its deadline Triton may still hold a frame before the stream is reset.

        A batch that started before the deadline runs to its end (a CPU detector batch takes
        seconds), so the grace is generous: half the deadline, at least 2 s and 3 smoothed
        answers.
        """
        if self._overdue_grace_s is not None:
            return self._overdue_grace_s
        smoothed = self.scheduler.window.smoothed_latency_s or 0.0
        return max(2.0, self.request_timeout_s / 2, 3 * smoothed)

    @property
    def at_triton(self) -> int:
        """Frames written to the stream and not answered yet (abandoned ones included)."""
        return sum(1 for r in self._requests_by_id.values() if r.sent_at is not None)

    async def start(self, supervisor: Supervisor | None = None, part: str = "inference") -> None:
        """Open the stream in the background (it reconnects by itself); with ``supervisor``,
        as its part ``part`` (a bug that escapes the reconnect loop restarts it)."""
        if self._task is None:
            if supervisor is not None:
                self._task = supervisor.start(part, self._run)
            else:
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
        self._fail_all("client closed")

    async def acquire(self, camera: str) -> Permit:
        """Wait for ``camera``'s turn to send a frame (see :class:`FairScheduler`)."""
        return await self.scheduler.acquire(camera)

    def set_weight(self, camera: str, weight: float) -> None:
        self.scheduler.set_weight(camera, weight)

    def forget(self, camera: str) -> None:
        self.scheduler.forget(camera)

    def held(self, camera: str) -> int:
        return self.scheduler.held(camera)

    def abandon(self, reason: str) -> None:
        """Fail every frame of this endpoint now (its cameras moved to another one): those
        waiting to be sent, and, by resetting the open stream, those at Triton. Nothing is
        sent elsewhere: a frame is answered once or fails."""
        for request in list(self._outbox):
            self._fail(request, reason)
        self._outbox.clear()
        if self._call is not None and self._reset_reason is None:
            self._reset_reason = reason
            self._call.cancel()

    async def recognise(
        self, frame: Frame, permit: Permit | None = None
    ) -> tuple[PlateReading, ...]:
        """The plates of ``frame``; raises :class:`InferenceError` at its deadline or on failure.

        ``permit`` (from :meth:`acquire`) is taken over: it returns to the scheduler when
        Triton answers, when the stream ends, or at once if the frame was never sent.
        Without one, the frame waits for its camera's turn first.
        """
        if permit is None:
            permit = await self.acquire(frame.camera)
        if self._closed:
            permit.release()
            raise InferenceError("client closed", "stream")
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + self.request_timeout_s
        try:
            # in a thread: copying the planes (or a BGR conversion) must not run on the loop
            tensor = await asyncio.to_thread(image_input, frame, self.inputs.i420)
            focus = focus_input(frame) if self.inputs.focus else None
        except BaseException:
            permit.release()
            raise
        rid = f"{frame.camera}:{frame.index}:{next(self._ids)}"
        request = _Request(
            rid=rid,
            frame_index=frame.index,
            request=frame_request(self.model, rid, tensor, focus),
            deadline=deadline,
            permit=permit,
            future=loop.create_future(),
        )
        self._requests_by_id[rid] = request
        self._outbox.append(request)
        self._outbox_ready.set()
        try:
            async with asyncio.timeout(deadline - time.monotonic()):
                return await asyncio.shield(request.future)
        except TimeoutError:
            self.stats.timed_out += 1
            raise InferenceError(
                f"no answer within {self.request_timeout_s:g} s for frame {frame.index}",
                "deadline",
            ) from None
        finally:
            self._give_up(request)

    def _give_up(self, request: _Request) -> None:
        """The caller no longer waits: a frame never sent frees its permit now."""
        if request.future.done():
            return
        request.abandoned = True
        if request.sent_at is None:
            with contextlib.suppress(ValueError):
                self._outbox.remove(request)
            self._finish(request)
        # else: Triton has it; its answer (or the stream's end) releases the permit.

    def _finish(
        self, request: _Request, latency_s: float | None = None, *, overloaded: bool = False
    ) -> None:
        self._requests_by_id.pop(request.rid, None)
        request.permit.release(latency_s, overloaded=overloaded)

    # -- the stream -------------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        first = True
        while True:
            self._opened = False
            try:
                await self._serve_one_stream()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                LOG.debug("stream error: %r", exc)
                reason = short_error(exc)
            else:
                reason = "stream ended"
            self._connected.clear()
            self.problem = reason
            self._fail_all(f"Triton stream lost: {reason}")
            # Once per loss (and for the first failure to connect), not once per retry.
            log = LOG.warning if self._opened or first else LOG.debug
            log("Triton at %s lost (%s); reconnecting", self.url, reason)
            first = False
            self.stats.reconnects += 1
            failures += 1
            await asyncio.sleep(
                backoff_delay(failures, self.reconnect_initial_delay_s, self.reconnect_max_delay_s)
            )

    async def _serve_one_stream(self) -> None:
        client = aioclient.InferenceServerClient(self.url, keepalive_options=self.keepalive)
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if not await client.is_model_ready(self.model):
                    raise InferenceError(f"model {self.model} is not ready")
                metadata = await client.get_model_metadata(self.model, as_json=True)
            self.inputs = ModelInputs.of(metadata)
            self._generation += 1
            self._reset_reason = None
            self._outbox_ready.set()  # wakes the old stream's iterator, which then ends
            call = client.stream_infer(self._requests(self._generation))
            self._call = call
            self._connected.set()
            self.problem = None
            self._opened = True
            LOG.info(
                "Triton stream to %s open (model %s ready, frames sent as %s, %s focus boxes)",
                self.url,
                self.model,
                "YUV 4:2:0" if self.inputs.i420 else "BGR",
                "with" if self.inputs.focus else "without",
            )
            watchdog = asyncio.create_task(self._watch_overdue(call), name="triton-overdue")
            try:
                async for response in raw_responses(call):
                    self._resolve(response)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if self._reset_reason is None or (task is not None and task.cancelling()):
                    raise
                raise InferenceError(self._reset_reason, "stream") from None
            finally:
                watchdog.cancel()
                await asyncio.gather(watchdog, return_exceptions=True)
                call.cancel()  # also stops it reading our request iterator
            if self._reset_reason is not None:
                raise InferenceError(self._reset_reason, "stream")
        finally:
            self._call = None
            self._connected.clear()
            await client.close()

    async def _watch_overdue(self, call: Any) -> None:
        """Reset the stream when Triton holds a frame ``overdue_grace_s`` past its deadline."""
        while True:
            await asyncio.sleep(_OVERDUE_CHECK_S)
            now = time.monotonic()
            overdue = [
                r
                for r in self._requests_by_id.values()
                if r.sent_at is not None
                and r.generation == self._generation
                and now > r.deadline + self.overdue_grace_s
            ]
            if overdue:
                self.stats.resets += 1
                self._reset_reason = (
                    f"reset: {len(overdue)} frame(s) unanswered {self.overdue_grace_s:g} s "
                    "after their deadline"
                )
                LOG.warning("Triton at %s: %s", self.url, self._reset_reason)
                call.cancel()
                return

    async def _requests(self, generation: int) -> AsyncIterator[dict[str, Any]]:
        """The requests of one stream; ends (taking nothing) once a newer stream exists."""
        while generation == self._generation:
            while self._outbox and generation == self._generation:
                request = self._outbox.popleft()
                remaining = request.deadline - time.monotonic()
                if remaining <= 0 or request.future.done():
                    self._finish(request)  # its deadline passed while it waited to be sent
                    continue
                request.sent_at = time.monotonic()
                request.generation = generation
                request.request["timeout"] = timeout_us(remaining)
                self.stats.sent += 1
                yield request.request
                request.request.clear()  # the tensor is serialised: do not keep the frame
            self._outbox_ready.clear()
            await self._outbox_ready.wait()

    def _resolve(self, response: ModelStreamInferResponse) -> None:
        rid = response.infer_response.id
        request = self._requests_by_id.get(rid)
        if request is None:
            return  # a request of a stream already given up
        latency = time.monotonic() - (request.sent_at or time.monotonic())
        error = response.error_message
        deadline_error = is_deadline_error(error)
        self._finish(request, None if deadline_error else latency, overloaded=deadline_error)
        for observe in self.latency_observers:
            observe(latency)
        if request.abandoned or request.future.done():
            self.stats.late += 1
            LOG.debug("late answer for %s discarded (%s)", rid, error or "plates")
            return
        if error:
            self.stats.failed += 1
            if not deadline_error:
                self.model_errors.error(error)
            request.future.set_exception(
                InferenceError(error, "deadline" if deadline_error else "model")
            )
            return
        try:
            plates = parse_answer(InferResult(response.infer_response))
        except Exception as exc:  # a malformed response fails this frame only
            self.stats.failed += 1
            request.future.set_exception(InferenceError(f"bad response: {exc}"))
            return
        self.stats.succeeded += 1
        self.model_errors.answered(request.sent_at or 0.0)
        request.future.set_result(plates)

    def _fail_all(self, reason: str) -> None:
        """The stream is gone: every frame submitted so far fails now and frees its permit."""
        self._outbox.clear()
        for request in list(self._requests_by_id.values()):
            self._fail(request, reason)

    def _fail(self, request: _Request, reason: str) -> None:
        self._finish(request)
        if request.future.done():
            return
        if request.abandoned:
            request.future.cancel()  # nobody waits for it any more
            return
        self.stats.failed += 1
        request.future.set_exception(InferenceError(reason, "stream"))


def short_error(exc: BaseException) -> str:
    details = getattr(exc, "details", None)
    text = details() if callable(details) else str(exc)
    return (text or type(exc).__name__).splitlines()[0][:200]
