"""plate_recognition: decoupled BLS model, one frame in, every plate out.

For each request (one frame of any size, in exactly one of two inputs: ``image``, UINT8
HxWx3 BGR, or ``image_i420``, UINT8 (H*3/2)xW planar YUV 4:2:0 as cameras' decoders give
it, half the bytes; full-range samples say so with the request parameter
``yuv_range: "full"``):
    [I420 -> BGR] -> letterbox -> detector -> head decode + NMS -> crops -> stn -> lprnet
    -> CTC decode
With the optional input ``focus`` (FP32 [K, 4] boxes in frame pixels: where plates can be,
what moved and the live plates) and a region detector in the repository, the detector runs
on the regions around them instead, when that is cheaper than the whole frame (``regions.py``).
and one response with the outputs ``boxes`` [N, 4] (x1, y1, x2, y2 in frame
pixels), ``det_scores`` [N], ``texts`` [N], ``text_scores`` [N], ``char_probs``
[N, L, A] (per character of each text, the probability of each character of
``alphabet``; see ``plate_ops.char_probabilities``) and ``alphabet`` [1], sent with the
FINAL flag (also when N is 0: the aio gRPC client cannot ask for an empty final
response). A bad request gets an error response; the others are not affected.

``execute`` is a coroutine: Triton runs many requests of this one instance
concurrently, and their BLS sub-requests reach the callees together, where the
dynamic batchers merge them. numpy/OpenCV work runs in threads (OpenCV releases
the GIL) so it does not stall the other requests' awaits.

Deadlines: a request's Triton ``timeout`` (microseconds, set by the streamer to
what is left of the frame's deadline) starts when the request reaches this
model. Before each stage the request is checked: once its deadline has passed
(or, before the detector and the recognisers, its client cancelled it, e.g. by
resetting the stream) it is answered at once with an error that says ``deadline
exceeded`` (resp. ``cancelled``), and no further work is started for it.
Sub-requests carry the time left as their own timeout, so the callees' queue
policy (``timeout_action: REJECT``) drops them from the queue when it passes
instead of running them for nobody. The calls that block on the Triton process
(``is_cancelled``, the response's ``send``) run in threads, off the loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import numpy as np
import plate_ops
import regions
import triton_python_backend_utils as pb_utils


class RequestError(Exception):
    """The request itself is invalid: answered with an error, nothing else affected."""


class DeadlineError(Exception):
    """The request's deadline passed, or its client cancelled it: no more work for it."""

    def __init__(self, stage: str, cancelled: bool = False) -> None:
        # The streamer recognises "deadline exceeded" (streamer/inference/messages.py).
        what = "cancelled" if cancelled else "deadline exceeded"
        super().__init__(f"{what} before {stage}")


class _Deadline:
    """When a request must be answered by (monotonic), from its Triton timeout."""

    def __init__(self, request: Any) -> None:
        self.request = request
        timeout_us = int(request.timeout())
        self.at = time.monotonic() + timeout_us / 1e6 if timeout_us > 0 else None

    def check(self, stage: str) -> None:
        """The deadline alone: no call to Triton."""
        if self.at is not None and time.monotonic() >= self.at:
            raise DeadlineError(stage)

    async def check_with_client(self, stage: str) -> None:
        """The deadline, then whether the client cancelled the request: a blocking call to
        the Triton process, so in a thread (the other requests' awaits go on meanwhile).
        Asked only before the expensive stages, the detector and the recognisers."""
        self.check(stage)
        if await asyncio.to_thread(self.request.is_cancelled):
            raise DeadlineError(stage, cancelled=True)

    def remaining_us(self) -> int:
        """Time left for a sub-request (0: no timeout); at least 1 µs while not expired."""
        if self.at is None:
            return 0
        return max(1, int((self.at - time.monotonic()) * 1e6))


def _yuv_full_range(request: Any) -> bool:
    """The request parameter ``yuv_range``: ``"full"`` (0-255) or ``"limited"`` (the default)."""
    parameters = json.loads(request.parameters() or "{}")
    value = parameters.get("yuv_range", "limited")
    if value not in ("full", "limited"):
        raise ValueError(f"parameter yuv_range must be 'full' or 'limited', got {value!r}")
    return bool(value == "full")


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        config = json.loads(args["model_config"])
        if not pb_utils.using_decoupled_model_transaction_policy(config):
            raise pb_utils.TritonModelException(
                "plate_recognition: model_transaction_policy { decoupled: true } is required"
            )
        params = {k: v["string_value"] for k, v in config.get("parameters", {}).items()}
        try:
            self.detector = params["detector_model"]
            self.stn = params["stn_model"]
            self.lprnet = params["lprnet_model"]
            self.input_hw = (
                int(params["detector_input_height"]),
                int(params["detector_input_width"]),
            )
            # A second detector, for regions around the focus boxes ("": none was built).
            self.region_detector = params.get("region_detector_model", "")
            self.region_hw = (
                int(params.get("region_input_height", "0")),
                int(params.get("region_input_width", "0")),
            )
            self.region_batch = int(params.get("region_max_batch_size", "1"))
            self.head_layout = params.get("detector_head_layout", "auto")
            self.detector_batch = int(params.get("detector_max_batch_size", "1"))
            self.recogniser_batch = int(params.get("recogniser_max_batch_size", "32"))
            self.conf_threshold = float(params.get("conf_threshold", "0.25"))
            self.iou_threshold = float(params.get("iou_threshold", "0.45"))
            self.max_plates = int(params.get("max_plates", "16"))
            self.crop_pad_ratio = float(params.get("crop_pad_ratio", str(plate_ops.CROP_PAD_RATIO)))
        except (KeyError, ValueError) as exc:
            raise pb_utils.TritonModelException(
                f"plate_recognition: bad or missing parameter in config.pbtxt: {exc}"
            ) from exc
        if self.head_layout not in ("auto", "v5", "v8"):
            raise pb_utils.TritonModelException(
                f"plate_recognition: detector_head_layout must be auto, v5 or v8, "
                f"got {self.head_layout!r}"
            )
        self.in_flight = 0

    async def execute(self, requests: list[Any]) -> None:
        await asyncio.gather(*(self._serve(request) for request in requests))
        return None

    async def _serve(self, request: Any) -> None:
        sender = request.get_response_sender()
        deadline = _Deadline(request)
        self.in_flight += 1
        try:
            response = await self._recognise(request, deadline)
        except (RequestError, DeadlineError) as exc:
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(str(exc)))
        except Exception as exc:  # a failed sub-model: answer this request, keep serving
            if deadline.at is not None and time.monotonic() >= deadline.at:
                # A callee's queue policy rejected the sub-request at the deadline.
                message = f"deadline exceeded in a sub-model: {exc}"
            else:
                pb_utils.Logger.log_error(f"plate_recognition: request failed: {exc!r}")
                message = f"plate_recognition failed: {exc}"
            response = pb_utils.InferenceResponse(error=pb_utils.TritonError(message))
        finally:
            self.in_flight -= 1
        # A blocking call to the Triton process: in a thread, so the loop serves the others.
        await asyncio.to_thread(
            sender.send, response, flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL
        )

    async def _recognise(self, request: Any, deadline: _Deadline) -> Any:
        bgr = pb_utils.get_input_tensor_by_name(request, "image")
        i420 = pb_utils.get_input_tensor_by_name(request, "image_i420")
        if (bgr is None) == (i420 is None):
            raise RequestError("exactly one of the inputs 'image' and 'image_i420' is required")
        try:
            if bgr is not None:
                frame = bgr.as_numpy()
                plate_ops.validate_frame(frame)
            else:
                full_range = _yuv_full_range(request)
                frame = await asyncio.to_thread(plate_ops.i420_to_bgr, i420.as_numpy(), full_range)
        except ValueError as exc:
            raise RequestError(str(exc)) from exc

        deadline.check("letterbox")
        letterboxed, transform = await asyncio.to_thread(
            plate_ops.letterbox_image, frame, self.input_hw
        )
        plan = self._plan(request, transform)
        if plan is None:
            detector_input = await asyncio.to_thread(plate_ops.to_input, letterboxed)
            await deadline.check_with_client("detector")
            head = await self._infer(self.detector, detector_input[None], deadline)
            detections = await asyncio.to_thread(
                self._postprocess, head, None, transform, frame.shape
            )
        else:
            detections = await self._detect_regions(
                letterboxed, plan, transform, frame.shape, deadline
            )
        if len(detections) == 0:
            return self._response(
                detections,
                [],
                np.zeros((0,), np.float32),
                np.zeros((0, 1, len(plate_ops.ALPHABET)), np.float32),
            )

        await deadline.check_with_client("recognisers")
        crops = await asyncio.to_thread(
            plate_ops.crop_plates, frame, detections.boxes, self.crop_pad_ratio
        )
        logits = await self._recognise_crops(crops, deadline)
        texts, text_scores = plate_ops.ctc_greedy_decode(logits)
        char_probs = plate_ops.char_probabilities(logits)
        return self._response(detections, texts, text_scores, char_probs)

    def _plan(self, request: Any, transform: plate_ops.Letterbox) -> list[regions.Region] | None:
        """The regions to detect on, from the request's ``focus``; None: the whole frame."""
        focus = pb_utils.get_input_tensor_by_name(request, "focus")
        if focus is None or not self.region_detector:
            return None
        try:
            boxes = regions.validate_focus(focus.as_numpy())
        except ValueError as exc:
            raise RequestError(str(exc)) from exc
        # Into the letterboxed input's pixels, where the regions are windows.
        boxes = boxes * transform.scale + [transform.pad_x, transform.pad_y] * 2
        return regions.plan_regions(
            boxes, self.input_hw, self.region_hw, max_regions=self.region_batch
        )

    async def _detect_regions(
        self,
        letterboxed: np.ndarray,
        plan: list[regions.Region],
        transform: plate_ops.Letterbox,
        frame_shape: tuple[int, ...],
        deadline: _Deadline,
    ) -> plate_ops.Detections:
        """The region detector on each window of the letterboxed frame (one batch)."""

        def prepare() -> np.ndarray:  # only the windows become float tensors
            return np.stack([plate_ops.to_input(region.cut(letterboxed)) for region in plan])

        batch = await asyncio.to_thread(prepare)
        await deadline.check_with_client("detector")
        heads = await self._infer(self.region_detector, batch, deadline)

        return await asyncio.to_thread(self._postprocess, heads, plan, transform, frame_shape)

    def _postprocess(
        self,
        heads: Any,
        windows: list[regions.Region] | None,
        transform: plate_ops.Letterbox,
        frame_shape: tuple[int, ...],
    ) -> plate_ops.Detections:
        """Raw head outputs -> detections in frame pixels: each head decoded (moved by its
        window's origin, with ``windows``), one NMS over them all (a plate two overlapping
        windows saw is kept once), then mapped out of the letterbox."""
        found = []
        for i, head in enumerate(heads):
            detections = plate_ops.decode_head(head, self.conf_threshold, self.head_layout)
            if windows is not None:
                detections.boxes[:, [0, 2]] += windows[i].x
                detections.boxes[:, [1, 3]] += windows[i].y
            found.append(detections)
        merged = found[0] if len(found) == 1 else plate_ops.Detections.concatenate(found)
        merged = plate_ops.non_max_suppression(merged, self.iou_threshold, self.max_plates)
        merged.boxes = plate_ops.unletterbox_boxes(
            merged.boxes, transform, (frame_shape[0], frame_shape[1])
        )
        return merged

    async def _recognise_crops(self, crops: np.ndarray, deadline: _Deadline) -> np.ndarray:
        """stn then lprnet, in chunks no larger than the callees' max batch size."""
        step = self.recogniser_batch
        chunks = [crops[i : i + step] for i in range(0, len(crops), step)]

        async def one(chunk: np.ndarray) -> np.ndarray:
            straightened = await self._infer(self.stn, chunk, deadline)
            deadline.check("lprnet")
            return await self._infer(self.lprnet, straightened, deadline)

        results = await asyncio.gather(*(one(chunk) for chunk in chunks))
        return results[0] if len(results) == 1 else np.concatenate(results, axis=0)

    async def _infer(self, model: str, batch: np.ndarray, deadline: _Deadline) -> np.ndarray:
        request = pb_utils.InferenceRequest(
            model_name=model,
            inputs=[pb_utils.Tensor("INPUT__0", np.ascontiguousarray(batch, dtype=np.float32))],
            requested_output_names=["OUTPUT__0"],
            timeout=deadline.remaining_us(),
            # GPU callees (libtorch, KIND_GPU) hand their output back in host memory.
            preferred_memory=pb_utils.PreferredMemory(pb_utils.TRITONSERVER_MEMORY_CPU, 0),
        )
        response = await request.async_exec()
        if response.has_error():
            raise RuntimeError(f"{model}: {response.error().message()}")
        return pb_utils.get_output_tensor_by_name(response, "OUTPUT__0").as_numpy()

    @staticmethod
    def _response(
        detections: plate_ops.Detections,
        texts: list[str],
        text_scores: np.ndarray,
        char_probs: np.ndarray,
    ) -> Any:
        return pb_utils.InferenceResponse(
            output_tensors=[
                pb_utils.Tensor("boxes", detections.boxes.astype(np.float32).reshape(-1, 4)),
                pb_utils.Tensor("det_scores", detections.scores.astype(np.float32)),
                pb_utils.Tensor("texts", np.array([t.encode() for t in texts], dtype=np.object_)),
                pb_utils.Tensor("text_scores", np.asarray(text_scores, dtype=np.float32)),
                pb_utils.Tensor("char_probs", np.asarray(char_probs, dtype=np.float32)),
                pb_utils.Tensor("alphabet", np.array([plate_ops.ALPHABET.encode()], np.object_)),
            ]
        )

    def finalize(self) -> None:
        if self.in_flight:
            pb_utils.Logger.log_warn(
                f"plate_recognition: unloading with {self.in_flight} requests in flight"
            )
