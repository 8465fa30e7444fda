"""Plate events: what a vehicle pass becomes (:class:`PlateEvent`, its pictures).

A decided pass becomes an event (:func:`build_event`: the crop and the vehicle picture
encoded, the frame's pixels let go), is committed to the event log
(streamer/delivery/publisher.py) and read from there by every consumer
(streamer/delivery/consumers.py), which rebuilds it with :meth:`PlateEvent.from_payload`.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import cv2
import numpy as np

from streamer.domain.frames import Frame
from streamer.domain.plate_pass import PlatePass

#: Extra context around the plate in the crop, as a fraction of the box size.
CROP_MARGIN = 0.15
#: The vehicle picture around a plate, in plate widths across and plate heights above and
#: below it (a car is about 4-5 plates wide; the plate sits low on it).
VEHICLE_WIDTHS = 6.0
VEHICLE_ABOVE = 8.0
VEHICLE_BELOW = 3.0


@dataclass(frozen=True)
class Sighting:
    """When a plate was seen: UTC wall time and the stream's own time."""

    utc: str
    stream_time_s: float

    @classmethod
    def of(cls, frame: Frame) -> Sighting:
        return cls(utc_iso(frame.wall_time), round(frame.pts_s, 3))


def utc_iso(unix_s: float) -> str:
    """Unix time ``unix_s`` as the events write times: ISO 8601 UTC, to the millisecond."""
    return datetime.fromtimestamp(unix_s, tz=UTC).isoformat(timespec="milliseconds")


@dataclass(frozen=True)
class LeaseStamp:
    """The camera lease an event was decided under (streamer/pipeline/leases.py, "Fencing"):
    its fencing token, and when (UTC) the replica decided the event while it held it."""

    token: int
    decided_at: str

    @property
    def decided_at_unix(self) -> float:
        return datetime.fromisoformat(self.decided_at).timestamp()


@dataclass(frozen=True)
class PlateEvent:
    """One vehicle pass: the payload every sink receives (see docs/events.md)."""

    event_id: str
    camera: str
    text: str
    confidence: float
    candidates: list[tuple[str, float]]
    track_id: int
    reads: int
    evidence: int
    first_seen: Sighting
    last_seen: Sighting
    box: tuple[float, float, float, float]
    crop_jpeg: bytes = field(repr=False)
    reason: str
    #: ``time.monotonic()`` of the frame first seen: frame-to-event latency.
    first_seen_monotonic: float = field(repr=False, compare=False)
    #: 1 for a pass's first report, + 1 for each correction (``plate.updated``).
    version: int = 1
    #: The text a correction replaces (None for version 1).
    previous_text: str | None = None
    #: ``{"label", "plate", "distance"}`` of the known plate matched, if any.
    match: dict[str, Any] | None = None
    #: The matched list is marked ``alert: true``.
    alert: bool = False
    #: The vote's own text when ``text`` is the known plate it was snapped to.
    voted_text: str | None = None
    #: Stream seconds from the pass's first read to this decision.
    decided_after_s: float = 0.0
    #: Per character of the voted text, its fused probability.
    char_confidence: tuple[float, ...] = ()
    #: JPEG of the vehicle around the plate, downscaled (for the history; None: not made).
    frame_jpeg: bytes | None = field(default=None, repr=False, compare=False)
    #: Why the pass was withheld (``low_confidence``, ``few_reads``), for a
    #: ``plate.withheld`` event; None for a reported pass.
    withheld: str | None = None
    #: The camera lease it was decided under (None: the replica takes no leases).
    lease: LeaseStamp | None = None

    @property
    def type(self) -> str:
        if self.withheld is not None:
            return "plate.withheld"
        return "plate" if self.version == 1 else "plate.updated"

    @property
    def message_id(self) -> str:
        """This message's id (``webhook-id``, the outbox's key): the event id for the first
        report, ``<event_id>.v<version>`` for a correction."""
        return self.event_id if self.version == 1 else f"{self.event_id}.v{self.version}"

    def to_dict(self, include_crop: bool = True) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "type": self.type,
            "event_id": self.event_id,
            "version": self.version,
            "camera": self.camera,
            "text": self.text,
            "confidence": round(self.confidence, 4),
            "char_confidence": [round(c, 3) for c in self.char_confidence],
            "candidates": [{"text": t, "score": round(s, 4)} for t, s in self.candidates],
            "track_id": self.track_id,
            "reads": self.reads,
            "evidence": self.evidence,
            "first_seen": {
                "utc": self.first_seen.utc,
                "stream_time_s": self.first_seen.stream_time_s,
            },
            "last_seen": {
                "utc": self.last_seen.utc,
                "stream_time_s": self.last_seen.stream_time_s,
            },
            "box": [round(v, 1) for v in self.box],
            "reason": self.reason,
            "decided_after_s": round(self.decided_after_s, 3),
        }
        if self.previous_text is not None:
            payload["previous_text"] = self.previous_text
        if self.match is not None:
            payload["match"] = dict(self.match)
        if self.voted_text is not None:
            payload["voted_text"] = self.voted_text
        if self.alert:
            payload["alert"] = True
        if self.withheld is not None:
            payload["withheld"] = self.withheld
        if self.lease is not None:
            payload["lease"] = {"token": self.lease.token, "decided_at": self.lease.decided_at}
        if include_crop:
            payload["crop_jpeg_base64"] = base64.b64encode(self.crop_jpeg).decode("ascii")
        return payload

    @classmethod
    def from_payload(
        cls, payload: Mapping[str, Any], crop: bytes, frame: bytes | None = None
    ) -> PlateEvent:
        """The event whose :meth:`to_dict` (without the crop) is ``payload``, as the event
        log keeps it, with its pictures (a consumer of the log rebuilds it so)."""
        first, last = payload["first_seen"], payload["last_seen"]
        box = payload["box"]
        lease = payload.get("lease")
        return cls(
            event_id=str(payload["event_id"]),
            camera=str(payload["camera"]),
            text=str(payload["text"]),
            confidence=float(payload["confidence"]),
            candidates=[(str(c["text"]), float(c["score"])) for c in payload["candidates"]],
            track_id=int(payload["track_id"]),
            reads=int(payload["reads"]),
            evidence=int(payload["evidence"]),
            first_seen=Sighting(str(first["utc"]), float(first["stream_time_s"])),
            last_seen=Sighting(str(last["utc"]), float(last["stream_time_s"])),
            box=(float(box[0]), float(box[1]), float(box[2]), float(box[3])),
            crop_jpeg=crop,
            reason=str(payload["reason"]),
            first_seen_monotonic=0.0,  # (a time of the process that decided it)
            version=int(payload.get("version", 1)),
            previous_text=payload.get("previous_text"),
            match=dict(payload["match"]) if payload.get("match") is not None else None,
            alert=bool(payload.get("alert", False)),
            voted_text=payload.get("voted_text"),
            decided_after_s=float(payload.get("decided_after_s", 0.0)),
            char_confidence=tuple(float(c) for c in payload.get("char_confidence", ())),
            frame_jpeg=frame,
            withheld=payload.get("withheld"),
            lease=(
                LeaseStamp(int(lease["token"]), str(lease["decided_at"]))
                if lease is not None
                else None
            ),
        )


def crop_jpeg(image: np.ndarray, box: tuple[float, float, float, float], quality: int) -> bytes:
    """JPEG of the plate with a small margin (CPU work: call it in a thread)."""
    h, w = image.shape[:2]
    x1, y1, x2, y2 = box
    mx, my = (x2 - x1) * CROP_MARGIN, (y2 - y1) * CROP_MARGIN
    left, top = max(int(x1 - mx), 0), max(int(y1 - my), 0)
    right, bottom = min(int(x2 + mx) + 1, w), min(int(y2 + my) + 1, h)
    crop = image[top:bottom, left:right]
    if crop.size == 0:
        crop = np.zeros((8, 8, 3), np.uint8)
    ok, encoded = cv2.imencode(".jpg", crop, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()


def vehicle_jpeg(
    image: np.ndarray, box: tuple[float, float, float, float], quality: int, max_width: int
) -> bytes:
    """JPEG of the vehicle around a plate: the plate's box grown to about a car (the plate
    sits low and centred on it), at most ``max_width`` wide (CPU work: call it in a thread)."""
    h, w = image.shape[:2]
    x1, y1, x2, y2 = box
    bw, bh = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
    cx = (x1 + x2) / 2
    left, right = (
        max(int(cx - VEHICLE_WIDTHS * bw / 2), 0),
        min(int(cx + VEHICLE_WIDTHS * bw / 2), w),
    )
    top, bottom = max(int(y1 - VEHICLE_ABOVE * bh), 0), min(int(y2 + VEHICLE_BELOW * bh), h)
    region = image[top:bottom, left:right]
    if region.size == 0:
        region = image
    if region.shape[1] > max_width:
        scale = max_width / region.shape[1]
        size = (max_width, max(round(region.shape[0] * scale), 1))
        region = cv2.resize(region, size, interpolation=cv2.INTER_AREA)
    ok, encoded = cv2.imencode(".jpg", region, [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return encoded.tobytes()


async def build_event(
    plate_pass: PlatePass,
    jpeg_quality: int,
    frame_max_width: int | None = None,
    lease: LeaseStamp | None = None,
) -> PlateEvent:
    """The event of a decided pass (``lease``: decided under that camera lease); with
    ``frame_max_width``, with its vehicle picture."""
    best_frame, best = plate_pass.best_frame, plate_pass.best

    def pictures() -> tuple[bytes, bytes | None]:
        # best_frame.image in this thread: its BGR conversion must not run on the loop
        image = best_frame.image
        crop = crop_jpeg(image, best.box, jpeg_quality)
        if frame_max_width is None:
            return crop, None
        return crop, vehicle_jpeg(image, best.box, jpeg_quality, frame_max_width)

    jpeg, frame_jpeg = await asyncio.to_thread(pictures)
    return PlateEvent(
        event_id=plate_pass.event_id,
        camera=plate_pass.camera,
        text=plate_pass.text,
        confidence=plate_pass.confidence,
        candidates=list(plate_pass.candidates),
        track_id=plate_pass.track_id,
        reads=plate_pass.reads,
        evidence=plate_pass.evidence,
        first_seen=Sighting.of(plate_pass.first_seen),
        last_seen=Sighting.of(plate_pass.last_seen),
        box=best.box,
        crop_jpeg=jpeg,
        reason=plate_pass.reason,
        first_seen_monotonic=plate_pass.first_seen.monotonic,
        version=plate_pass.version,
        previous_text=plate_pass.previous_text,
        match=plate_pass.match.to_dict() if plate_pass.match is not None else None,
        alert=plate_pass.match is not None and plate_pass.match.alert,
        voted_text=plate_pass.voted_text,
        decided_after_s=plate_pass.decided_after_s,
        char_confidence=plate_pass.char_confidence,
        frame_jpeg=frame_jpeg,
        withheld=plate_pass.withheld,
        lease=lease,
    )


class EventSink(Protocol):
    """An in-process observer of events (``python -m streamer replay``'s collector, the
    benchmarks' recorders): given each event once it is committed to the event log, within
    a timeout. The durable consumers (the history, files, webhooks, MQTT) read the log
    instead (streamer/delivery/consumers.py)."""

    name: str

    async def publish(self, event: PlateEvent) -> None: ...

    async def close(self) -> None: ...
