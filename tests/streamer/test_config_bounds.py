"""Every number of the config schema at its bounds, loaded and run through the real components.

The walk (:func:`numeric_fields`) goes from :class:`~streamer.config.Settings` into every
section, list item (``cameras[]``), dict value (``known_plates.*``), optional section and
container of numbers (``cameras[].roi[]``): each ``int`` or ``float`` (not ``bool``) is a
case, with its bounds from its metadata (annotated_types ``Ge``, ``Gt``, ``Le``, ``Lt``). A
field added later is walked too; a number without both a lower and an upper bound fails.

At a bound: ``ge`` / ``le``, the bound; ``gt`` / ``lt``, one step inside, 1 for an integer,
1e-3 for a float: the finest value anyone writes here (a millisecond, 0.1 % of a share), where
``math.nextafter`` would probe float rounding that no component is meant to handle.

Each value goes into a minimal config (a file camera on a synthetic clip, a webhook target
nothing listens for, known-plate lists where the path needs them) with the companions a
cross-field rule needs (:data:`COMPANIONS`), through :func:`~streamer.config.load_config`,
then through what ``Service._start`` builds, without Triton or the network: scheduler and
inference client (never connected), ``Cameras.build`` (queue, motion gate, source, pipeline,
pass detector; a stand-in answers for Triton under the real permits) on the clip and on an
RTSP URL that refuses, events, the outbox sink (a webhook and an MQTT broker that refuse), retry
delays, the web server (not started) and the config watcher. A log record with a traceback
fails the case.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import logging
import math
import random
import time
import types
import typing
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import annotated_types
import av
import cv2
import numpy as np
import pytest
import yaml
from pydantic import BaseModel

from streamer.app import Service
from streamer.config import MQTT_TARGET, ConfigError, Settings, load_config
from streamer.delivery.deliverer import Outcome
from streamer.delivery.events import PlateEvent, build_event
from streamer.delivery.outbox import Outbox
from streamer.delivery.retry import retry_delay
from streamer.domain.frames import Frame, PlateReading
from streamer.domain.plate_pass import PlatePass
from streamer.foundation.metrics import Metrics
from streamer.foundation.supervisor import Supervisor
from streamer.inference.client import InferenceError, PlateRecognizer
from streamer.inference.embedded.server import EmbeddedTriton
from streamer.inference.scheduler import FairScheduler, Permit, scheduler_for
from streamer.ops.reload import ConfigWatcher, plan
from streamer.pipeline.cameras import Cameras
from streamer.store.base import MAX_LIMIT, EventQuery
from streamer.store.sqlite import SQLiteEventStore
from streamer.web import WebServer
from tests.log_records import traceback_of
from tests.plate_passes import a_pass
from tests.streamer.delivery.webhook_setup import open_consumers

PLATE = "O567AM76"
#: Where the embedded Triton would listen; nothing is ever sent there.
STAND_IN_URL = "127.0.0.1:1"
#: A camera nothing listens for: refused at once, retried with the camera's backoff.
REFUSING_RTSP = "rtsp://127.0.0.1:1/cam"
#: The synthetic clip: a white "plate" moving CLIP_STEP pixels a frame over fixed noise.
CLIP_FPS, CLIP_FRAMES, CLIP_STEP, CLIP_SIZE = 10, 20, 4, (160, 96)
BOUNDS = ("ge", "gt", "le", "lt")
SECRET = "whsec_" + "A" * 32  # base64 of 24 bytes
#: The minimal item of each list and dict of sections, by its path in the walk.
ITEMS: dict[str, dict[str, Any]] = {
    "cameras[]": {"name": "gate", "url": "<the clip>", "realtime": False},
    "webhooks[]": {"name": "crm", "url": "http://127.0.0.1:1/hook", "secret": SECRET},
    "known_plates.*": {"plates": [PLATE]},
    "cameras[].known_plates.*": {"plates": [PLATE]},
    "storage.retention_by_label[]": {"label": "staff", "days": 365},
    "web.ice_servers[]": {"urls": ["turn:127.0.0.1:9"], "shared_secret": "turn-secret"},
}
#: Values a cross-field rule needs beside a field at one of its bounds (path, side) -> values.
COMPANIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("tracker.high_score", "lower"): {"tracker.low_score": 0},  # low_score < high_score
    ("tracker.low_score", "upper"): {"tracker.high_score": 1},
    ("events.min_reads", "upper"): {"events.confident_reads": 1000},  # confident >= min_reads
    ("events.confident_reads", "lower"): {"events.min_reads": 1},
    ("cameras[].read_timeout_s", "upper"): {"cameras[].stall_timeout_s": 3600},  # stall > read
    ("cameras[].stall_timeout_s", "lower"): {"cameras[].read_timeout_s": 0.0005},
    ("cameras[].reconnect_initial_delay_s", "upper"): {"cameras[].reconnect_max_delay_s": 3600},
    ("cameras[].reconnect_max_delay_s", "lower"): {"cameras[].reconnect_initial_delay_s": 0.001},
    ("webhooks[].retry_initial_delay_s", "upper"): {"webhooks[].retry_max_delay_s": 86_400},
    ("webhooks[].retry_max_delay_s", "lower"): {"webhooks[].retry_initial_delay_s": 0.001},
    ("mqtt.retry_initial_delay_s", "upper"): {"mqtt.retry_max_delay_s": 3600},  # max >= initial
    ("mqtt.retry_max_delay_s", "lower"): {"mqtt.retry_initial_delay_s": 0.05},
    ("triton.min_in_flight", "upper"): {"triton.max_in_flight": 1024},  # min <= max
    ("triton.max_in_flight", "lower"): {"triton.min_in_flight": 1},
}
#: Containers of numbers, as one valid value from a number ``v`` at a bound and ``n``, its
#: neighbour inside the bounds.
SHAPES: dict[str, Callable[[int, int], Any]] = {
    "cameras[].roi": lambda v, n: [min(v, n), min(v, n), max(v, n), max(v, n)],  # x2>x1, y2>y1
    "cameras[].motion.mask": lambda v, n: [[[v, v], [n, v], [v, n]]],
}


@dataclasses.dataclass(frozen=True)
class Numeric:
    """A number of the schema: its path (``cameras[].motion.threshold``), type and bounds."""

    path: str
    kind: type
    bounds: tuple[tuple[str, float], ...]  # ("ge", 0), ("le", 1), ...

    def bound(self, side: str) -> tuple[str, float] | None:
        names = ("ge", "gt") if side == "lower" else ("le", "lt")
        return next(((k, v) for k, v in self.bounds if k in names), None)

    def at(self, side: str) -> tuple[Any, Any]:
        """The value at the bound of ``side``, and its neighbour inside the bounds."""
        name, bound = self.bound(side) or ("", math.nan)
        inward = (1 if self.kind is int else 1e-3) * (1 if side == "lower" else -1)
        value = bound + inward if name in ("gt", "lt") else bound
        return self.kind(value), self.kind(value + inward)


def numeric_fields(model: type[BaseModel] = Settings, prefix: str = "") -> Iterator[Numeric]:
    """Every number of ``model`` and of the models inside it (see the module docstring)."""
    for name, field in model.model_fields.items():
        yield from _walk(field.annotation, list(field.metadata), prefix + name)


def _walk(annotation: Any, metadata: list[Any], path: str) -> Iterator[Numeric]:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        yield from _walk(args[0], [*metadata, *args[1:]], path)
    elif origin in (typing.Union, types.UnionType):
        for arg in args:
            yield from _walk(arg, metadata, path)
    elif origin in (list, tuple, set, frozenset):
        for arg in args:
            yield from _walk(arg, [], path + "[]")
    elif origin is dict:
        yield from _walk(args[1], [], path + ".*")
    elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield from numeric_fields(annotation, path + ".")
    elif annotation in (int, float):  # bool is neither: a subclass, not the same type
        yield Numeric(path, annotation, tuple(_bounds(metadata)))


def _bounds(metadata: list[Any]) -> Iterator[tuple[str, float]]:
    for item in metadata:  # a Field(...) inside Annotated[...] carries its own metadata
        for meta in getattr(item, "metadata", [item]):
            if isinstance(meta, annotated_types.BaseMetadata):
                yield from ((k, v) for k in BOUNDS if (v := getattr(meta, k, None)) is not None)


FIELDS = {numeric.path: numeric for numeric in numeric_fields()}  # a tuple's items: one path
CASES = [
    pytest.param(path, side, id=f"{path}-{side}") for path in FIELDS for side in ("lower", "upper")
]


def _tokens(path: str) -> list[str]:
    return path.replace("[]", ".[]").split(".")


def _set(config: dict[str, Any], path: str, value: Any) -> None:
    """Put ``value`` at ``path`` of a config mapping, adding the list and dict items it needs."""
    node: Any = config
    tokens, prefix = _tokens(path), ""
    for token, following in itertools.pairwise(tokens):
        prefix = _join(prefix, token)
        if token == "[]":
            node = node[0]
        elif token == "*":
            node = node["vip"]
        elif following in ("[]", "*"):
            item = _join(prefix, following)
            assert item in ITEMS, f"{path}: add a minimal item of {item} to ITEMS"
            first = [dict(ITEMS[item])] if following == "[]" else {"vip": dict(ITEMS[item])}
            node = node.setdefault(token, first)
        else:
            node = node.setdefault(token, {})
    node[tokens[-1]] = value


def _join(prefix: str, token: str) -> str:
    return prefix + token if token == "[]" or not prefix else f"{prefix}.{token}"


def _as_tuples(value: Any) -> Any:
    return tuple(map(_as_tuples, value)) if isinstance(value, list) else value


def _get(settings: Settings, path: str) -> Any:
    node: Any = settings
    for token in _tokens(path):
        node = node[0] if token == "[]" else node["vip"] if token == "*" else getattr(node, token)
    return node


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small real video file: 2 s at 10 fps, a plate-like rectangle moving right."""
    path = tmp_path_factory.mktemp("bounds") / "clip.mp4"
    width, height = CLIP_SIZE
    background = np.random.default_rng(3).integers(0, 120, (height, width, 3), dtype=np.uint8)
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=CLIP_FPS)
        stream.width, stream.height, stream.pix_fmt = width, height, "yuv420p"
        for i in range(CLIP_FRAMES):
            image = background.copy()
            x = 20 + CLIP_STEP * i
            image[40:52, x : x + 40] = 255
            image[43:49, x + 4 : x + 36 : 6] = 0
            frame = av.VideoFrame.from_ndarray(image, format="bgr24")
            frame.pts, frame.time_base = i, Fraction(1, CLIP_FPS)
            out.mux(stream.encode(frame))
        out.mux(stream.encode(None))
    return path


def _write(tmp_path: Path, clip: Path, values: dict[str, Any]) -> Path:
    config: dict[str, Any] = {
        "cameras": [{**ITEMS["cameras[]"], "url": str(clip)}],
        "webhooks": [dict(ITEMS["webhooks[]"])],
    }
    if any(path.startswith("mqtt.") for path in values):  # (the others need no broker)
        config["mqtt"] = {"host": "127.0.0.1", "port": 1}  # a port that refuses
    for path, value in values.items():
        _set(config, path, value)
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


def test_the_walk_finds_every_kind_of_number() -> None:
    kinds = ("cameras[].motion.threshold", "webhooks[].timeout_s", "outbox.retention_s")
    kinds += ("cameras[].known_plates.*.max_distance", "cameras[].motion.mask[][][]")
    assert set(kinds) <= set(FIELDS), f"the walk missed {set(kinds) - set(FIELDS)}"
    assert not any(path.endswith("enabled") for path in FIELDS), "booleans are not numbers"
    assert len({(n.path, n.bounds) for n in numeric_fields()}) == len(FIELDS), "items differ"
    stale = {path for path, _ in COMPANIONS} - set(FIELDS)
    assert not stale, f"COMPANIONS names fields the schema no longer has: {stale}"


@pytest.mark.parametrize(("path", "side"), CASES)
async def test_a_number_at_its_bound_runs_through_the_service(
    path: str, side: str, clip: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    numeric = FIELDS[path]
    if numeric.bound(side) is None:
        pytest.fail(
            f"{path} has no {side} bound: every number in a config needs both a lower "
            "(ge/gt) and an upper (le/lt) bound in the schema"
        )
    value, neighbour = numeric.at(side)
    target, written = path, value
    if path.endswith("[]"):  # a number inside a container: the container holds it
        found = [shape for shape in SHAPES if path.startswith(shape + "[]")]
        if not found:
            pytest.fail(f"{path}: add to SHAPES a valid value of its container holding one number")
        target, written = found[0], SHAPES[found[0]](value, neighbour)
    config_path = _write(tmp_path, clip, {**COMPANIONS.get((path, side), {}), target: written})
    try:
        settings = load_config(config_path, env={})
    except ConfigError as exc:
        pytest.fail(
            f"{path} = {value!r} (its {side} bound) is refused by the schema: {exc}\n"
            "if a cross-field rule refuses it, add companion values to COMPANIONS"
        )
    assert _get(settings, target) == _as_tuples(written)
    with caplog.at_level(logging.WARNING):
        await _run_service_parts(settings, config_path)
    crashes = [r for r in caplog.records if r.exc_info or r.exc_text]
    assert not crashes, f"{path} = {value!r}: {crashes[0].getMessage()}\n{traceback_of(crashes[0])}"


async def test_the_parts_decide_and_deliver_at_the_defaults(clip: Path, tmp_path: Path) -> None:
    """The harness itself: with every default, the clip gives one pass, and so an event."""
    settings = load_config(_write(tmp_path, clip, {}), env={})
    passes = await _run_service_parts(settings, tmp_path / "config.yaml")
    assert [p.text for p in passes] == [PLATE]


async def _run_service_parts(settings: Settings, config_path: Path) -> list[PlatePass]:
    """Build and run what ``Service._start`` builds (see the module docstring); the passes."""
    triton = settings.triton
    if triton.url is None:  # what the service would start: built, never started
        EmbeddedTriton(triton.model_repository, startup_timeout_s=triton.embedded_startup_timeout_s)
    recognizer = PlateRecognizer(
        triton.url or STAND_IN_URL,
        triton.model,
        scheduler=scheduler_for(triton),
        request_timeout_s=triton.request_timeout_s,
        connect_timeout_s=triton.connect_timeout_s,
    )
    await _check_inference(settings, recognizer)
    service = Service(settings, once=True, config_path=config_path)
    web = WebServer(service, settings.web)
    assert web.requested_port == settings.web.port and web.app() is not None
    passes = await _run_camera(settings, recognizer)
    quality, width = settings.events.crop_jpeg_quality, settings.storage.frame_max_width
    events = [await build_event(p, quality, width) for p in [*passes, a_pass()]]
    for event in events:
        crop = cv2.imdecode(np.frombuffer(event.crop_jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert crop is not None and crop.size > 0 and 0 <= event.confidence <= 1
        assert event.frame_jpeg is not None
        vehicle = cv2.imdecode(np.frombuffer(event.frame_jpeg, np.uint8), cv2.IMREAD_COLOR)
        assert vehicle is not None and 0 < vehicle.shape[1] <= width
    await _keep(settings, events)
    await _deliver(settings, events[-1])
    await _watch(settings, config_path)
    return passes


async def _check_inference(settings: Settings, recognizer: PlateRecognizer) -> None:
    triton, scheduler = settings.triton, recognizer.scheduler
    window = scheduler.window
    assert math.isfinite(recognizer.overdue_grace_s)
    assert recognizer.overdue_grace_s >= triton.request_timeout_s / 2
    for i in range(200):  # answers that slow down, then speed up: the window stays in bounds
        window.on_answer(0.05 * (1 + abs(i % 40 - 20)), window.limit, now=i * 0.05)
        assert triton.min_in_flight <= window.limit <= triton.max_in_flight
    permits = [
        await asyncio.wait_for(recognizer.acquire("gate"), 1)
        for _ in range(min(window.limit, triton.max_in_flight_per_camera))
    ]
    assert scheduler.in_flight == len(permits) <= triton.max_in_flight_per_camera
    for permit in permits:
        permit.release(0.05)
    # A frame sent to a client never connected fails (its deadline, or the client closing)
    # and gives its permit back.
    frame = Frame("gate", 0, 0.0, time.time(), time.monotonic(), np.zeros((8, 8, 3), np.uint8))
    task = asyncio.create_task(recognizer.recognise(frame))
    await asyncio.sleep(0.02)
    await recognizer.close()
    with pytest.raises(InferenceError):
        await task
    assert scheduler.in_flight == 0


class _StandInTriton:
    """Answers each frame with the clip's plate, under the real scheduler's permits."""

    def __init__(self, scheduler: FairScheduler) -> None:
        self.scheduler = scheduler

    async def acquire(self, camera: str) -> Permit:
        return await self.scheduler.acquire(camera)

    async def recognise(
        self, frame: Frame, permit: Permit | None = None
    ) -> tuple[PlateReading, ...]:
        permit = permit or await self.acquire(frame.camera)
        assert frame.image.shape == (CLIP_SIZE[1], CLIP_SIZE[0], 3)
        permit.release(0.01)
        x = 20.0 + CLIP_STEP * round(frame.pts_s * CLIP_FPS)
        return (PlateReading((x, 40.0, x + 40.0, 52.0), 0.9, PLATE, 0.95),)


async def _run_camera(settings: Settings, recognizer: PlateRecognizer) -> list[PlatePass]:
    """The first camera on the clip through its pipeline, then on a refusing RTSP URL."""
    decided: list[PlatePass] = []

    async def on_passes(passes: list[PlatePass]) -> None:
        decided.extend(passes)

    cameras = Cameras(Supervisor(), Metrics(), on_passes, decided.extend, once=True)
    cameras.recognizer = recognizer
    config = settings.cameras[0]
    camera = cameras.build(config, settings)
    camera.pipeline.inference = _StandInTriton(recognizer.scheduler)
    camera.source.start()
    try:
        async with asyncio.timeout(30):
            await camera.pipeline.run()
    finally:
        await camera.source.astop()
    stats = camera.source.stats
    assert stats.decoded >= 1 or stats.last_error, "the clip gave no frame and no reason"
    assert not camera.source.running and camera.pipeline.passes.live_tracks == 0
    assert recognizer.scheduler.in_flight == 0
    for plate_pass in decided:
        assert plate_pass.text == PLATE and math.isfinite(plate_pass.time_s)
        assert 0 <= plate_pass.confidence <= 1 and plate_pass.decided_after_s >= 0

    live = cameras.build(config.model_copy(update={"url": REFUSING_RTSP}), settings)
    live.source.start()
    try:
        await _until(lambda: live.source.stats.last_error is not None, 5, "the refusal")
    finally:
        await live.source.astop()
    assert live.source.state == "stopped" and not live.source.running
    return decided


async def _deliver(settings: Settings, event: PlateEvent) -> None:
    """Retry delays, one POST refused and scheduled again, a delivered event pruned or kept."""
    target, outbox_config = settings.webhooks[0], settings.outbox
    rng = random.Random(7)
    for attempts in range(1, 31):
        delay = retry_delay(target, attempts, None, rng)
        assert math.isfinite(delay) and 0 <= delay <= target.retry_max_delay_s
        assert retry_delay(target, attempts, 1e9, rng) == target.retry_after_max_s
    metrics = Metrics()
    sink = await open_consumers(settings, metrics, poll_interval_s=0.2, close_timeout_s=1.0)
    assert sink is not None
    try:
        await sink.append(event)
        retries = {"name": "lpr_webhook_retries_total", "labels": {"target": target.name}}
        await _until(lambda: bool(metrics.registry.get_sample_value(**retries)), 5, "a retry")
        assert await sink.outbox.state(event.message_id, target.name) == "pending"
        if settings.mqtt is not None:  # (the cases of mqtt.* keys)
            # The broker refuses: said why, retried with a bounded backoff, the event kept.
            await _until(lambda: sink.problem is not None, 5, "the broker's refusal")
            mqtt, broker = settings.mqtt, sink.deliverer(MQTT_TARGET)
            assert broker is not None
            for attempts in range(1, 31):
                delay = broker.retry_delay(attempts, Outcome("retry"), rng)
                assert math.isfinite(delay) and 0 <= delay <= mqtt.retry_max_delay_s
            assert await sink.outbox.state(event.message_id, MQTT_TARGET) == "pending"
    finally:
        await sink.close()
    outbox = await Outbox.open(outbox_config.path, [target.name])
    try:
        delivered = dataclasses.replace(event, event_id=str(uuid.uuid4()))
        assert await outbox.add(delivered)
        await outbox.mark_delivered(delivered.message_id, target.name)
        short = outbox_config.retention_s < 1
        if short:
            await asyncio.sleep(outbox_config.retention_s + 0.01)
        assert await outbox.prune(outbox_config.retention_s) == (1 if short else 0)
    finally:
        await outbox.close()


async def _keep(settings: Settings, events: list[PlateEvent]) -> None:
    """The history keeps the events, finds them, and prunes exactly those past retention."""
    storage = settings.storage
    store = await SQLiteEventStore.open(storage.path)
    try:
        for event in events:
            await store.add(event)
        found = await store.search(EventQuery(limit=MAX_LIMIT, withheld=None))
        assert {e.event_id for e in found.events} == {e.event_id for e in events}
        now = time.time()
        retention_s = storage.retention_days * 86_400
        old = [
            e
            for e in events
            if datetime.fromisoformat(e.first_seen.utc).timestamp() < now - retention_s
        ]
        deleted = await store.prune(
            now=now,
            retention_s=retention_s,
            by_label={r.label: r.days * 86_400 for r in storage.retention_by_label},
            max_bytes=int(storage.max_size_gb * 1e9),
        )
        assert deleted == len(old)
    finally:
        await store.close()


async def _watch(settings: Settings, config_path: Path) -> None:
    """The watcher sees an edit at its interval; reloading the same settings changes nothing."""
    interval = settings.reload.interval_s
    watcher = ConfigWatcher(config_path, interval)
    await asyncio.to_thread(lambda: config_path.write_text(config_path.read_text() + "#\n"))
    if interval <= 0.5:
        await asyncio.wait_for(watcher.changed(), 5)
    else:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(watcher.changed(), 0.05)
    assert plan(settings, load_config(config_path, env={})).empty


async def _until(predicate: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        await asyncio.sleep(0.01)
