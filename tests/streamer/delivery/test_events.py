"""Events: payload, JPEG crop, JSON-lines sinks."""

from __future__ import annotations

import base64
import uuid

import cv2
import numpy as np

from streamer.delivery.events import PlateEvent, build_event, crop_jpeg
from streamer.domain.known_plates import Match
from tests.plate_passes import EVENT_ID, a_pass


async def test_event_payload_and_crop() -> None:
    event = await build_event(a_pass(), jpeg_quality=90)
    payload = event.to_dict()
    uuid.UUID(payload["event_id"])
    assert payload["event_id"] == EVENT_ID == event.message_id
    assert payload["type"] == "plate" and payload["camera"] == "gate"
    assert payload["version"] == 1 and payload["evidence"] == 6
    assert not {"previous_text", "match", "alert", "voted_text"} & payload.keys()
    assert payload["text"] == "O567AM76" and payload["track_id"] == 4 and payload["reads"] == 12
    assert payload["first_seen"] == {"utc": "2025-12-31T23:59:58.750+00:00", "stream_time_s": 11.0}
    assert payload["last_seen"]["utc"] == "2026-01-01T00:00:00.250+00:00"
    assert payload["candidates"][1] == {"text": "C567AM76", "score": 0.1}
    crop = cv2.imdecode(np.frombuffer(base64.b64decode(payload["crop_jpeg_base64"]), np.uint8), 1)
    # 100x20 box with a 15 % margin on each side.
    assert crop.shape[:2] == (27, 131)
    assert crop[13, 65].mean() > 200 and crop[1, 1].mean() < 50
    assert "crop_jpeg_base64" not in event.to_dict(include_crop=False)


async def test_a_correction_keeps_the_event_id_and_names_what_it_replaces() -> None:
    event = await build_event(a_pass(version=3, previous_text="C567AM76"), jpeg_quality=90)
    payload = event.to_dict(include_crop=False)
    assert payload["type"] == "plate.updated" and payload["event_id"] == EVENT_ID
    assert (payload["version"], payload["previous_text"], payload["text"]) == (
        3,
        "C567AM76",
        "O567AM76",
    )
    # Its own message id: the webhook-id and the outbox key of this version.
    assert event.message_id == f"{EVENT_ID}.v3"


async def test_a_known_plate_match_and_alert_are_in_the_payload() -> None:
    match = Match("stolen", "O567AM76", 2, alert=True, snap=True)
    payload = (await build_event(a_pass(match=match), jpeg_quality=90)).to_dict(False)
    assert payload["match"] == {"label": "stolen", "plate": "O567AM76", "distance": 2}
    assert payload["alert"] is True and payload["voted_text"] == "C567AC76"


def test_crop_of_a_box_outside_the_frame_is_still_a_jpeg() -> None:
    jpeg = crop_jpeg(np.zeros((10, 10, 3), np.uint8), (50.0, 50.0, 60.0, 60.0), 80)
    assert jpeg[:2] == b"\xff\xd8"


async def test_an_event_rebuilt_from_its_payload_is_the_same_event() -> None:
    """What a consumer of the log rebuilds (payload, crop, vehicle picture) is the event."""
    event = await build_event(a_pass(), jpeg_quality=90, frame_max_width=320)
    assert event.frame_jpeg is not None
    again = PlateEvent.from_payload(
        event.to_dict(include_crop=False), event.crop_jpeg, event.frame_jpeg
    )
    assert again == event and again.to_dict() == event.to_dict()
    assert again.frame_jpeg == event.frame_jpeg
