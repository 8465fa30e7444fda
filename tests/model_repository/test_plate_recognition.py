"""The plate pipeline inside a real Triton server (CPU build), reached over gRPC."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import av
import cv2
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import InferInput, InferRequestedOutput, InferResult

from bench.common import inference_counts
from converters import assets
from converters.paths import import_plate_ops
from streamer.domain.plate_formats import PlateFormats

plate_ops = import_plate_ops()

SEED_BOX = np.array([232.4, 814.2, 324.6, 841.9], np.float32)
SEED_TEXT = "B840CK197"
OUTPUTS = ("boxes", "det_scores", "texts", "text_scores", "char_probs", "alphabet")


def _media(name: str) -> Path:
    return assets.verify(assets.asset(name), assets.default_assets_dir())


def _car_1920x1080() -> np.ndarray:
    """As the seed pipeline prepared it: OpenCV BGR, resized with INTER_AREA."""
    image = cv2.imread(str(_media("car.jpg")))
    return cv2.resize(image, (1920, 1080), interpolation=cv2.INTER_AREA)


def _request(frame: np.ndarray, request_id: str, dtype: str = "UINT8") -> dict[str, Any]:
    tensor = InferInput("image", list(frame.shape), dtype)
    tensor.set_data_from_numpy(frame)
    return {
        "model_name": "plate_recognition",
        "inputs": [tensor],
        "request_id": request_id,
        "outputs": [InferRequestedOutput(name) for name in OUTPUTS],
    }


async def _stream(
    url: str, requests: list[dict[str, Any]], timeout_s: float = 240.0
) -> dict[str, tuple[InferResult | None, str | None]]:
    """Send all requests on one stream; collect one final response per request id.

    The aio client drops the request id of error responses, so the raw gRPC
    responses are read (``_grpc_call``) to correlate errors too.
    """
    client = aioclient.InferenceServerClient(url)

    async def feed() -> AsyncIterator[dict[str, Any]]:
        for request in requests:
            yield request

    results: dict[str, tuple[InferResult | None, str | None]] = {}
    try:
        call = client.stream_infer(feed(), stream_timeout=timeout_s)
        async with asyncio.timeout(timeout_s):
            async for response in call._grpc_call:
                rid = response.infer_response.id
                assert rid not in results, f"second response for {rid}"
                if response.error_message:
                    # Rejected by Triton before the model (dtype, shape) or by the model.
                    results[rid] = (None, response.error_message)
                else:
                    final = response.infer_response.parameters["triton_final_response"]
                    assert final.bool_param, "a result carries the FINAL flag with it"
                    results[rid] = (InferResult(response.infer_response), None)
                if len(results) == len(requests):
                    break
        call.cancel()
    finally:
        await client.close()
    return results


def _plates(result: InferResult) -> list[tuple[np.ndarray, float, str, float]]:
    boxes, scores = result.as_numpy("boxes"), result.as_numpy("det_scores")
    texts, text_scores = result.as_numpy("texts"), result.as_numpy("text_scores")
    assert boxes.shape == (len(scores), 4) and len(texts) == len(scores) == len(text_scores)
    return [
        (boxes[i], float(scores[i]), texts[i].decode(), float(text_scores[i]))
        for i in range(len(scores))
    ]


def test_stn_and_lprnet_read_the_seed_crop_exactly(triton_server: Any) -> None:
    crops = plate_ops.crop_plates(_car_1920x1080(), SEED_BOX[None], plate_ops.SEED_PAD_RATIO)
    client = grpcclient.InferenceServerClient(triton_server.grpc_url)
    try:
        tensor = InferInput("INPUT__0", list(crops.shape), "FP32")
        tensor.set_data_from_numpy(crops)
        straightened = client.infer("stn", [tensor]).as_numpy("OUTPUT__0")
        assert straightened.shape == (1, 3, 24, 94)
        tensor = InferInput("INPUT__0", list(straightened.shape), "FP32")
        tensor.set_data_from_numpy(straightened)
        logits = client.infer("lprnet", [tensor]).as_numpy("OUTPUT__0")
    finally:
        client.close()
    texts, _ = plate_ops.ctc_greedy_decode(logits)
    assert texts == [SEED_TEXT]


def test_bls_finds_and_reads_the_van_plate(triton_server: Any) -> None:
    results = asyncio.run(_stream(triton_server.grpc_url, [_request(_car_1920x1080(), "car")]))
    result, error = results["car"]
    assert error is None and result is not None
    plates = _plates(result)
    formats = PlateFormats()
    near = [p for p in plates if np.abs(p[0] - SEED_BOX).max() <= 10]
    assert len(near) == 1, plates
    _, det_score, text, text_score = near[0]
    # The detector's box, padded by CROP_PAD_RATIO, reads the plate exactly (padded by the
    # seed's 0.2 it read B840OK197).
    assert text == SEED_TEXT
    assert 0 < det_score <= 1 and 0 < text_score <= 1
    others = [p for p in plates if p is not near[0]]
    assert all(not formats.is_valid(p[2]) for p in others), others
    # Per character of every text, what it could have been: its best choices spell the text.
    alphabet = result.as_numpy("alphabet").reshape(-1)[0].decode()
    probs = result.as_numpy("char_probs")
    assert alphabet == plate_ops.ALPHABET
    assert probs.shape[0] == len(plates) and probs.shape[2] == len(alphabet)
    for (_, _, plate_text, _), rows in zip(plates, probs, strict=True):
        best = "".join(alphabet[i] for i in rows[: len(plate_text)].argmax(axis=1))
        assert best == plate_text
        np.testing.assert_allclose(rows[: len(plate_text)].sum(axis=1), 1.0, rtol=1e-4)


def test_cat_has_no_plates(triton_server: Any) -> None:
    cat = cv2.imread(str(_media("cat.jpeg")))
    results = asyncio.run(_stream(triton_server.grpc_url, [_request(cat, "cat")]))
    result, error = results["cat"]
    assert error is None and result is not None
    assert _plates(result) == []
    assert result.as_numpy("boxes").shape == (0, 4)
    assert result.as_numpy("char_probs").shape == (0, 1, len(plate_ops.ALPHABET))


def _yard_frames(count: int, step: int) -> list[np.ndarray]:
    """Every ``step``-th frame of the clip, as a camera sampled at 15/step fps would send."""
    with av.open(str(_media("yard_cam.ts"))) as container:
        frames = []
        for index, frame in enumerate(container.decode(video=0)):
            if index % step == 0:
                frames.append(frame.to_ndarray(format="bgr24"))
                if len(frames) == count:
                    return frames
    raise AssertionError(f"yard_cam.ts has fewer than {count * step} frames")


def test_thirty_frames_at_once_on_one_stream(triton_server: Any) -> None:
    # The 120-frame clip sampled at 3.75 fps: 30 frames spread over its 8 s.
    frames = _yard_frames(30, step=4)
    requests = [_request(frame, f"yard-{i}") for i, frame in enumerate(frames)]
    results = asyncio.run(_stream(triton_server.grpc_url, requests))
    assert sorted(results) == sorted(r["request_id"] for r in requests)
    reads = 0
    for rid, (result, error) in results.items():
        assert error is None, (rid, error)
        assert result is not None
        if "O567AM76" in [p[2] for p in _plates(result)]:
            reads += 1
    assert reads > 15, f"O567AM76 read in only {reads} of 30 frames"


@pytest.mark.parametrize(
    ("bad", "dtype", "message"),
    [
        (np.zeros((0, 64, 3), np.uint8), "UINT8", "empty"),
        (np.zeros((64, 64, 3), np.float32), "FP32", "data-type"),
        (np.zeros((64, 64), np.uint8), "UINT8", "unexpected shape"),
    ],
)
def test_malformed_request_gets_an_error_and_the_stream_goes_on(
    triton_server: Any, bad: np.ndarray, dtype: str, message: str
) -> None:
    cat = cv2.imread(str(_media("cat.jpeg")))
    requests = [_request(bad, "bad", dtype), _request(cat, "after")]
    results = asyncio.run(_stream(triton_server.grpc_url, requests))
    result, error = results["bad"]
    assert result is None and error is not None and message in error, error
    result, error = results["after"]
    assert error is None and result is not None and _plates(result) == []


def _i420_request(
    planes: np.ndarray, request_id: str, parameters: dict[str, str] | None = None
) -> dict[str, Any]:
    request = _request(planes, request_id)
    tensor = InferInput("image_i420", list(planes.shape), "UINT8")
    tensor.set_data_from_numpy(planes)
    return {**request, "inputs": [tensor], "parameters": parameters}


def test_a_frame_sent_as_its_yuv_planes_reads_as_its_bgr(triton_server: Any) -> None:
    """The yard clip's decoded full-range planes (half the bytes) give the texts its BGR
    frames give: 12 frames over the clip, each sent both ways on one stream."""
    pictures = []
    with av.open(str(_media("yard_cam.ts"))) as container:
        for index, picture in enumerate(container.decode(video=0)):
            if index % 10 == 0:
                pictures.append(picture)
    requests = []
    for i, picture in enumerate(pictures):
        assert picture.format.name == "yuvj420p"
        requests.append(_request(picture.to_ndarray(format="bgr24"), f"bgr-{i}"))
        requests.append(_i420_request(picture.to_ndarray(), f"i420-{i}", {"yuv_range": "full"}))
    results = asyncio.run(_stream(triton_server.grpc_url, requests))
    texts: dict[str, list[list[str]]] = {"bgr": [], "i420": []}
    for i in range(len(pictures)):
        for kind in texts:
            result, error = results[f"{kind}-{i}"]
            assert error is None and result is not None, error
            texts[kind].append(sorted(p[2] for p in _plates(result)))
    same = sum(a == b for a, b in zip(texts["bgr"], texts["i420"], strict=True))
    print(f"the same texts in {same} of {len(pictures)} frames")
    assert same >= len(pictures) - 2, texts
    reads = [sum("O567AM76" in t for t in texts[kind]) for kind in ("bgr", "i420")]
    assert reads[1] >= 4 and abs(reads[0] - reads[1]) <= 1, reads


@pytest.mark.parametrize(
    ("request_of", "message"),
    [
        (
            lambda: {
                **_request(np.zeros((64, 64, 3), np.uint8), "bad"),
                "inputs": [
                    _i420_request(np.zeros((96, 64), np.uint8), "x")["inputs"][0],
                    _request(np.zeros((64, 64, 3), np.uint8), "x")["inputs"][0],
                ],
            },
            "exactly one",
        ),
        (lambda: _i420_request(np.zeros((96, 63), np.uint8), "bad"), "even"),
        (
            lambda: _i420_request(np.zeros((96, 64), np.uint8), "bad", {"yuv_range": "pc"}),
            "yuv_range",
        ),
    ],
)
def test_a_malformed_yuv_request_gets_an_error_and_the_stream_goes_on(
    triton_server: Any, request_of: Any, message: str
) -> None:
    cat = cv2.imread(str(_media("cat.jpeg")))
    results = asyncio.run(_stream(triton_server.grpc_url, [request_of(), _request(cat, "after")]))
    result, error = results["bad"]
    assert result is None and error is not None and message in error, error
    result, error = results["after"]
    assert error is None and result is not None and _plates(result) == []


def _focus_request(frame: np.ndarray, request_id: str, focus: np.ndarray) -> dict[str, Any]:
    request = _request(frame, request_id)
    tensor = InferInput("focus", list(focus.shape), "FP32")
    tensor.set_data_from_numpy(focus.astype(np.float32))
    return {**request, "inputs": [*request["inputs"], tensor]}


def _inference_count(url: str, model: str) -> int:
    return inference_counts(url, model)[model]


def test_a_focus_on_the_plate_reads_it_on_a_region_alone(triton_server: Any) -> None:
    """Focus boxes around the van's plate: the region detector finds it where the whole-frame
    pass does, and the whole-frame detector is not run. A focus far from it (top right) does
    not find it, and what that region finds, the whole frame finds too. No focus, or one
    larger than a region, gets the whole frame."""
    car = _car_1920x1080()
    url = triton_server.grpc_url
    region_before = _inference_count(url, "detector_region")
    full_before = _inference_count(url, "detector")
    on_plate = _focus_request(car, "plate", SEED_BOX[None] + [-20, -10, 20, 10])
    elsewhere = _focus_request(car, "elsewhere", np.array([[1500, 50, 1600, 120]]))
    results = asyncio.run(_stream(url, [on_plate, elsewhere]))
    assert _inference_count(url, "detector_region") == region_before + 2
    assert _inference_count(url, "detector") == full_before

    result, error = results["plate"]
    assert error is None and result is not None, error
    near = [p for p in _plates(result) if np.abs(p[0] - SEED_BOX).max() <= 10]
    # The region's box is within 3 px of the whole frame's; C and O swap on boxes that close
    # (the MANIFEST's note on this plate).
    assert [p[2] for p in near] in (["B840CK197"], ["B840OK197"]), near
    result, error = results["elsewhere"]
    assert error is None and result is not None, error
    found_elsewhere = _plates(result)

    whole = _focus_request(car, "whole", np.array([[0, 0, 1900, 1000]]))
    none = _focus_request(car, "none", np.zeros((0, 4)))
    results = asyncio.run(_stream(url, [whole, none]))
    assert _inference_count(url, "detector") == full_before + 2
    for rid in ("whole", "none"):
        result, error = results[rid]
        assert error is None and result is not None, error
        whole_frame = _plates(result)
        assert SEED_TEXT in [p[2] for p in whole_frame]
    assert all(np.abs(p[0] - SEED_BOX).max() > 100 for p in found_elsewhere)
    for plate in found_elsewhere:
        assert any(np.abs(plate[0] - w[0]).max() <= 5 for w in whole_frame), found_elsewhere


@pytest.mark.parametrize(
    ("focus", "message"),
    [
        (np.zeros((2, 3)), "unexpected shape"),  # Triton checks the shape first
        (np.array([[10, 10, 5, 20]]), "x2 >= x1"),
        (np.array([[np.nan, 0, 1, 1]]), "finite"),
    ],
)
def test_a_malformed_focus_gets_an_error_and_the_stream_goes_on(
    triton_server: Any, focus: np.ndarray, message: str
) -> None:
    cat = cv2.imread(str(_media("cat.jpeg")))
    requests = [_focus_request(cat, "bad", focus), _request(cat, "after")]
    results = asyncio.run(_stream(triton_server.grpc_url, requests))
    result, error = results["bad"]
    assert result is None and error is not None and message in error, error
    result, error = results["after"]
    assert error is None and result is not None and _plates(result) == []
