"""The shapes of the API's answers: every JSON answer is one of these models, dumped
(:func:`dump`), and the OpenAPI document (streamer/web/openapi.py) is generated from them, so
the two cannot drift apart.

An event's fields are those of ``PlateEvent.to_dict`` (docs/events.md): the optional ones are
left out when empty, as in the webhook payloads.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


def _none(value: Any) -> bool:
    return value is None


def _false(value: Any) -> bool:
    return value is False


class Model(BaseModel):
    # Fields that an older row of the history may lack have defaults; unknown ones are left
    # out of the answer rather than failing it.
    model_config = ConfigDict(extra="ignore", frozen=True)


class Sighting(Model):
    utc: str = Field(description="ISO 8601 UTC time of the frame.")
    stream_time_s: float = Field(description="The frame's time in its stream, in seconds.")


class Candidate(Model):
    text: str
    score: float = Field(ge=0, le=1)


class KnownPlateMatch(Model):
    label: str = Field(description="The known-plate list matched.")
    plate: str = Field(description="The known plate.")
    distance: int = Field(ge=0, description="Edits between the read text and the known plate.")


class Lease(Model):
    token: int = Field(description="The fencing token of the camera lease it was decided under.")
    decided_at: str = Field(description="ISO 8601 UTC time the replica decided it.")


class EventVersion(Model):
    """One message of a pass: its first report (``plate``), a correction (``plate.updated``),
    or the pass withheld (``plate.withheld``: decided, not reported)."""

    type: Literal["plate", "plate.updated", "plate.withheld"]
    event_id: str
    version: int = Field(ge=1)
    camera: str
    text: str
    confidence: float = Field(ge=0, le=1)
    char_confidence: list[float] = Field(default_factory=list)
    candidates: list[Candidate] = Field(default_factory=list)
    track_id: int
    reads: int = Field(ge=0)
    evidence: int = Field(ge=0)
    first_seen: Sighting
    last_seen: Sighting
    box: list[float] = Field(min_length=4, max_length=4, description="x1, y1, x2, y2 in pixels.")
    reason: str = Field(description="Why the pass was decided (confident, track_lost, ...).")
    decided_after_s: float = 0.0
    previous_text: str | None = Field(None, exclude_if=_none)
    match: KnownPlateMatch | None = Field(None, exclude_if=_none)
    voted_text: str | None = Field(None, exclude_if=_none)
    alert: bool = Field(False, exclude_if=_false)
    withheld: str | None = Field(
        None,
        exclude_if=_none,
        description="A withheld pass only: why it was not reported (low_confidence: under "
        "events.min_confidence; few_reads: read exactly fewer than events.min_reads times).",
    )
    lease: Lease | None = Field(
        None,
        exclude_if=_none,
        description="Only from a replica that takes camera leases (--shard): the lease it "
        "was decided under.",
    )


class Event(EventVersion):
    """A pass as the API shows it: its latest version and where its pictures are."""

    crop_url: str = Field(description="The plate crop (JPEG).")
    frame_url: str | None = Field(
        None, exclude_if=_none, description="The vehicle around the plate (JPEG), when kept."
    )


class EventDetail(Event):
    versions: list[EventVersion] = Field(
        default_factory=list, description="Every version of the pass, oldest first."
    )


class EventPage(Model):
    """A page of events, newest first: of a search of the history, or without one, of the
    recent events kept in memory."""

    limit: int
    next_cursor: str | None = Field(description="The cursor of the next page; null: the last.")
    events: list[Event]


class Erased(Model):
    erased: dict[str, int] = Field(description="What was taken out, per place.")


class Plate(Model):
    text: str
    read: str
    decided: bool
    track_id: int | None
    confirmed: bool
    box: list[float] = Field(min_length=4, max_length=4)


class Camera(Model):
    name: str
    state: Literal["starting", "connected", "reconnecting", "ended", "stopped"]
    health: str = Field(description="The camera's state in words.")
    url: str = Field(description="The camera's URL, without its password.")
    decode_fps: float
    sample_fps: float = Field(description="Frames per second configured to be sampled.")
    answered_fps: float = Field(description="Frames per second inference answered lately.")
    last_error: str | None
    frames_decoded: int
    frames_sent: int
    frames_answered: int
    frames_dropped: int
    width: int | None
    height: int | None
    viewers: int
    plates: list[Plate] = Field(description="The plates of the latest recognised frame.")
    snapshot_url: str
    mjpeg_url: str
    webrtc_url: str


class BoxColor(Model):
    kind: Literal["confirmed", "tentative"]
    color: str = Field(
        pattern=r"^#[0-9a-f]{6}$", description="CSS colour of those boxes in the live video."
    )
    meaning: str = Field(description="What the colour means, for the page's legend.")


class Info(Model):
    version: str
    login: bool = Field(description="A token is required (the page's login).")
    history: bool = Field(description="The service keeps a searchable history.")
    cameras: list[str]
    labels: list[str] = Field(description="The known-plate lists.")
    box_colors: list[BoxColor] = Field(
        description="The live view's legend: the colours of the boxes drawn into the video."
    )


class IceServer(Model):
    urls: list[str] = Field(description="stun:, turn: or turns: URLs of one server.")
    username: str | None = Field(None, description="TURN user name.")
    credential: str | None = Field(
        None, description="TURN password (made for this browser where the service can)."
    )


class WebRtcSettings(Model):
    ice_servers: list[IceServer] = Field(
        description="STUN and TURN servers for the page's peer connections (web.ice_servers)."
    )
    fallback_s: float = Field(
        description="Seconds to wait for WebRTC to connect before showing the MJPEG stream."
    )


class Shards(Model):
    shard: str = Field(description="This replica, I/N (0/1: one replica runs every camera).")
    cameras: dict[str, int] = Field(
        description="Every enabled camera of the config -> the index of the replica that "
        "runs it (rendezvous hashing: the same map in every replica)."
    )


class Login(Model):
    model_config = ConfigDict(extra="forbid", frozen=True)
    token: str = Field(min_length=1, max_length=4096)


class SessionState(Model):
    login: bool = Field(description="A token is required (log in).")
    authenticated: bool = Field(description="This request carries an open login session.")


class SessionDescription(Model):
    sdp: str
    type: Literal["offer", "answer"]


class ReloadOutcome(Model):
    model_config = ConfigDict(extra="allow", frozen=True)
    outcome: Literal["applied", "unchanged", "refused"]
    trigger: str


class Problem(Model):
    """An RFC 9457 problem: every refusal."""

    model_config = ConfigDict(extra="allow", frozen=True)
    type: str
    title: str
    status: int
    detail: str


def dump(model: type[Model], data: Any) -> Any:
    """``data`` as ``model`` shapes it, ready for ``json_response``."""
    return model.model_validate(data).model_dump(mode="json")


def dump_list(model: type[Model], items: list[Any]) -> list[Any]:
    return [dump(model, item) for item in items]
