"""What one frame sends to the ``plate_recognition`` model and what its answer means.

A request is the frame as one raw UINT8 tensor (``image_i420``: the decoder's planar YUV
4:2:0 as it is, half the bytes of BGR and no colour conversion in the streamer; or
``image``: BGR, for pictures that are not YUV 4:2:0 and for a model repository older than
``image_i420``), the frame's ``focus`` boxes where it has some and the model takes them (the
detector then looks at the regions around them when that is cheaper), the outputs asked for
(:data:`OUTPUTS`), a request id that correlates the answer on the shared stream, and Triton's
request ``timeout`` (what is left of the frame's deadline, set as it is sent). An answer is
either an error message, which :func:`is_deadline_error` tells from a model's failure, or
parallel output arrays that :func:`parse_answer` turns into :class:`PlateReading` objects;
:func:`raw_responses` reads the answers of a stream with their request ids.
"""

from __future__ import annotations

from collections.abc import AsyncIterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from tritonclient.grpc import InferInput, InferRequestedOutput, InferResult
from tritonclient.grpc.service_pb2 import ModelStreamInferResponse

from streamer.domain.frames import CHAR_PROB_FLOOR, CharProbs, Frame, PlateReading

OUTPUTS = ("boxes", "det_scores", "texts", "text_scores", "char_probs", "alphabet")
#: What the BLS model (model_repository/plate_recognition/1/model.py) and Triton's queue
#: policy say when a request's timeout has passed.
DEADLINE_MARKERS = ("deadline exceeded", "request timeout expired")
_US_PER_S = 1_000_000


#: The model's input for a frame in planar YUV 4:2:0; ``image`` takes BGR.
I420_INPUT = "image_i420"
#: The model's input for where in the frame plates can be (``Frame.focus``).
FOCUS_INPUT = "focus"


@dataclass(frozen=True)
class ModelInputs:
    """Which of its optional inputs the model has: a repository older than one lacks it."""

    i420: bool = False
    focus: bool = False

    @classmethod
    def of(cls, metadata: dict[str, Any]) -> ModelInputs:
        """From the model's metadata, as JSON."""
        names = {i.get("name") for i in metadata.get("inputs", [])}
        return cls(i420=I420_INPUT in names, focus=FOCUS_INPUT in names)


@dataclass(frozen=True)
class FrameInput:
    """A frame's picture as the model's input tensor, with the request parameters it needs."""

    tensor: InferInput
    parameters: dict[str, str] | None = None


def image_input(frame: Frame, i420: bool) -> FrameInput:
    """The frame as the model's input: its decoded planes when ``i420`` and they are planar
    YUV 4:2:0, else BGR (converting the picture: call it off the event loop)."""
    planar = frame.planar_yuv() if i420 else None
    if planar is not None:
        planes, full_range = planar
        tensor = InferInput(I420_INPUT, list(planes.shape), "UINT8")
        tensor.set_data_from_numpy(planes)
        return FrameInput(tensor, {"yuv_range": "full"} if full_range else None)
    image = frame.image
    tensor = InferInput("image", list(image.shape), "UINT8")
    tensor.set_data_from_numpy(np.ascontiguousarray(image))
    return FrameInput(tensor)


def focus_input(frame: Frame) -> InferInput | None:
    """The frame's focus boxes as the model's ``focus`` input; None where it has none (the
    model then detects on the whole frame)."""
    if frame.focus is None or len(frame.focus) == 0:
        return None
    boxes = np.ascontiguousarray(frame.focus, dtype=np.float32).reshape(-1, 4)
    tensor = InferInput(FOCUS_INPUT, list(boxes.shape), "FP32")
    tensor.set_data_from_numpy(boxes)
    return tensor


def frame_request(
    model: str, request_id: str, image: FrameInput, focus: InferInput | None = None
) -> dict[str, Any]:
    """The ``stream_infer`` request of one frame; its ``timeout`` is set when it is sent."""
    return {
        "model_name": model,
        "inputs": [image.tensor] if focus is None else [image.tensor, focus],
        "request_id": request_id,
        "outputs": [InferRequestedOutput(name) for name in OUTPUTS],
        "parameters": image.parameters,
    }


def timeout_us(remaining_s: float) -> int:
    """Triton's request timeout (µs) for what is left of a deadline: the BLS model ends the
    work once it passes (at least 1: zero would mean no timeout)."""
    return max(1, int(remaining_s * _US_PER_S))


def is_deadline_error(error: str) -> bool:
    """Whether an error answer says the request's deadline passed (not that the model failed)."""
    return bool(error) and any(m in error.lower() for m in DEADLINE_MARKERS)


def parse_answer(result: InferResult) -> tuple[PlateReading, ...]:
    """The plates of one answer; raises ValueError for outputs missing or of the wrong shape."""
    outputs = {name: result.as_numpy(name) for name in OUTPUTS}
    missing = [name for name, value in outputs.items() if value is None]
    if missing:
        raise ValueError(
            f"missing outputs {', '.join(missing)} (a model repository older than this "
            "streamer? rebuild it: make models)"
        )
    boxes, scores, texts, text_scores, char_probs, alphabet_out = outputs.values()
    assert boxes is not None and scores is not None and texts is not None
    assert text_scores is not None and char_probs is not None and alphabet_out is not None
    alphabet = _text(alphabet_out.reshape(-1)[0])
    decoded = [_text(t) for t in texts]
    n = len(decoded)
    if char_probs.ndim != 3 or char_probs.shape[0] != n or char_probs.shape[2] != len(alphabet):
        raise ValueError(
            f"char_probs must be [{n}, L, {len(alphabet)}], got {list(char_probs.shape)}"
        )
    if any(len(text) > char_probs.shape[1] for text in decoded):
        raise ValueError(f"char_probs has {char_probs.shape[1]} rows, fewer than a text")
    return tuple(
        PlateReading(
            box=(float(b[0]), float(b[1]), float(b[2]), float(b[3])),
            det_score=float(s),
            text=text,
            text_score=float(ts),
            char_probs=_sparse(rows[: len(text)], alphabet),
        )
        for b, s, text, ts, rows in zip(
            boxes.reshape(-1, 4), scores, decoded, text_scores, char_probs, strict=True
        )
    )


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _sparse(rows: np.ndarray, alphabet: str) -> CharProbs:
    """Each row's likely characters, most likely first (see ``PlateReading.char_probs``)."""
    out = []
    for row in rows:
        order = np.argsort(-row, kind="stable")
        out.append(
            tuple(
                (alphabet[i], round(float(row[i]), 4))
                for i in order.tolist()
                if row[i] >= CHAR_PROB_FLOOR
            )
        )
    return tuple(out)


def raw_responses(call: Any) -> AsyncIterable[ModelStreamInferResponse]:
    """The responses of a ``stream_infer`` call as Triton sent them, request ids included.

    tritonclient's public iterator (``async for result, error in call``) yields
    ``(InferResult, None)`` or ``(None, InferenceServerException)``: an error answer loses
    its ``infer_response.id``, so a frame's error could not be told from another frame's. Only
    the private ``_grpc_call`` (the grpc.aio stream-stream call the iterator wraps; tritonclient
    2.73) yields the ``ModelStreamInferResponse`` messages whole. Cancelling the
    stream stays public: ``call.cancel()``.
    """
    responses: AsyncIterable[ModelStreamInferResponse] = call._grpc_call
    return responses
