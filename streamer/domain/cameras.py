"""A running camera as the service shows it: its status, and its latest recognised frame with
the plates to draw on it (made by the pipeline, read by the web view)."""

from __future__ import annotations

from dataclasses import dataclass

from streamer.domain.frames import Frame
from streamer.domain.plate_pass import TrackedPlate


@dataclass(frozen=True)
class CameraStatus:
    name: str
    state: str  # starting | connected | reconnecting | ended | stopped
    health: str  # the state and rates in words (streamer/pipeline/camera_health.py)
    url: str  # redacted: never the password
    decode_fps: float
    sample_fps: float  # configured
    answered_fps: float  # measured over the last seconds
    last_error: str | None  # redacted
    frames_decoded: int
    frames_sent: int
    frames_answered: int
    frames_dropped: int
    width: int | None  # of the latest recognised frame
    height: int | None


@dataclass(frozen=True)
class Snapshot:
    """The latest recognised frame of a camera and the plates to draw on it."""

    frame: Frame
    plates: tuple[TrackedPlate, ...]
