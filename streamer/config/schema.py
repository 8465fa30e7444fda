"""The service's YAML configuration: one pydantic schema, and its loader.

``load_config(path)`` reads the file, expands ``${VAR}`` / ``${VAR:-default}``
in string values (``$${`` is a literal ``${``), validates the tree against
:class:`Settings` and raises :class:`ConfigError` with one message that names
the file, the key (``cameras[gate].sample_fps``) and the reason.

Rules the schema keeps (see ``docs/config.md``):

* every model forbids unknown keys, so a typo fails loudly;
* every field has a description and bounds; cross-field checks are small
  field validators, so an error points at the field to fix;
* validators do no I/O: a file camera's existence is checked by the reader;
* relative paths (file cameras, ``events.file``, ``triton.model_repository``,
  ``outbox.path``) resolve against the folder of the config file, lexically;
* secrets stay out of logs: a camera's ``repr``/``str`` shows
  :attr:`CameraConfig.redacted_url` (webhook URLs likewise), ``web.token`` and
  ``webhooks[].secret`` are ``SecretStr``, and no
  :class:`ConfigError` message quotes a URL's user, password or secret query
  parameter.
"""

from __future__ import annotations

import base64
import binascii
import difflib
import os
import re
import types
import typing
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import unquote, urlsplit

import annotated_types
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic.fields import FieldInfo

from streamer.ops.paths import DEFAULT_MODEL_REPOSITORY
from streamer.ops.redact import redact_text, redact_url, url_scheme
from streamer.tracking import evidence
from streamer.tracking.known_plates import PLATE_ENTRY, KnownList, KnownPlates
from streamer.tracking.passes import MIN_CONFIDENCE
from streamer.tracking.plate_formats import RUSSIAN_FORMATS

#: URL schemes read over the network; anything without ``scheme://`` is a file path.
NETWORK_SCHEMES = ("rtsp", "rtsps", "http", "https")
FILE_PREFIX = "file://"
CAMERA_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"

_CAMERA_NAME = re.compile(CAMERA_NAME_PATTERN)
_TRITON_URL = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


class ConfigError(Exception):
    """The config file cannot be used: ``str()`` names the file, the key and the reason.

    ``problems`` holds ``(key path or None, reason)`` pairs, one per problem found.
    """

    def __init__(self, path: Path | str, problems: Sequence[tuple[str | None, str]]) -> None:
        self.path = Path(path)
        self.problems: tuple[tuple[str | None, str], ...] = tuple(problems)
        super().__init__(self._message())

    def _message(self) -> str:
        # _redact_text: a last net for URL credentials in a key or a reason.
        lines = [
            redact_text(f"{key}: {reason}" if key else reason) for key, reason in self.problems
        ]
        if len(lines) == 1:
            return f"{self.path}: {lines[0]}"
        return f"{self.path}: {len(lines)} problems:\n" + "\n".join(f"  - {line}" for line in lines)

    def __str__(self) -> str:
        return str(self.args[0])


# --------------------------------------------------------------------------- URLs


def is_network_url(url: str) -> bool:
    """Whether ``url`` is read over the network (``rtsp(s)://``, ``http(s)://``)."""
    return url_scheme(url) in NETWORK_SCHEMES


# --------------------------------------------------------------------------- models


#: Characters no config string may hold (a newline in a camera URL would forge log lines).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class _Section(BaseModel):
    """Base of every config model: unknown keys are errors, values are immutable, strings
    hold no control characters and numbers are not booleans (``sample_fps: true`` is not
    1.0)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _plain_values(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _wants_number(field.annotation):
            raise ValueError(f"must be a number, got {str(value).lower()}")
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and _CONTROL.search(text):
                raise ValueError("must not contain control characters (newline, tab, ...)")
        return value


def _wants_number(annotation: Any) -> bool:
    """Whether a field takes an int or a float and not a bool."""
    kinds = {a for a in typing.get_args(annotation) if isinstance(a, type)} or {annotation}
    for arg in typing.get_args(annotation):  # Annotated[float, ...] and the like
        kinds |= {a for a in typing.get_args(arg) if isinstance(a, type)}
    return bool(kinds & {int, float}) and bool not in kinds


def _empty_to_none(value: Any) -> Any:
    """``key: ""`` (say, from ``${VAR:-}``) means "not set" for optional fields."""
    return None if isinstance(value, str) and not value.strip() else value


def _resolve_path(value: str | Path, info: ValidationInfo) -> str:
    """A relative path joined to the config file's folder (``context["base_dir"]``)."""
    base = info.context.get("base_dir") if isinstance(info.context, Mapping) else None
    path = os.fspath(value)
    if base is None or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(os.fspath(base), path))


def _check_known_entry(entry: str) -> str:
    if not PLATE_ENTRY.fullmatch(entry):
        _check_regex(entry)
    return entry


class KnownPlatesConfig(_Section):
    """One labelled list of known plates (docs/events.md#known-plates)."""

    plates: list[
        Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_check_known_entry)]
    ] = Field(
        min_length=1,
        max_length=100_000,
        description="Plates (only 0-9 and A-Z: matched within max_distance edits) or regular "
        "expressions (anything else: matched whole, at distance 0).",
    )
    max_distance: int = Field(
        1,
        ge=0,
        le=3,
        description="Edits (a character changed, added or dropped) allowed between the "
        "decided text and a plate of this list.",
    )
    snap: bool = Field(
        False,
        description="Report the known plate's text instead of the decided one when they "
        "match within max_distance.",
    )
    alert: bool = Field(False, description='Mark events matching this list "alert": true.')

    @model_validator(mode="before")
    @classmethod
    def _list_shorthand(cls, value: Any) -> Any:
        return {"plates": value} if isinstance(value, list) else value


def _check_known_labels(lists: dict[str, KnownPlatesConfig]) -> dict[str, KnownPlatesConfig]:
    for label in lists:
        if not _CAMERA_NAME.match(label):
            raise ValueError(
                f"label {label!r}: use 1-63 of a-z 0-9 _ -, starting with a letter or digit"
            )
    return lists


#: ``known_plates:`` (global, or per camera): label -> list.
KnownPlatesLists = Annotated[
    dict[str, KnownPlatesConfig], AfterValidator(_check_known_labels), Field(max_length=100)
]


#: A mask polygon: 3 to 100 [x, y] points in frame pixels.
MaskPolygon = tuple[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]], ...]


class MotionConfig(_Section):
    """Motion gating: a still scene's sampled frames are not sent (streamer/ingest/motion.py)."""

    enabled: bool = Field(
        True,
        description="Send a sampled frame only when something moves, or while a track lives "
        "(at sample_fps with motion, every stationary_interval_s without).",
    )
    threshold: int = Field(
        20,
        ge=1,
        le=255,
        description="Grey levels (0-255, after a 5x5 blur) by which a pixel must differ from "
        "the latest frame with motion to count as changed.",
    )
    min_area: float = Field(
        0.0005,
        gt=0,
        le=1,
        description="Smallest connected changed region that counts as motion, as a share of "
        "the frame's area (0.0005: 0.05 %, 29 pixels of the 320x180 check image).",
    )
    mask: tuple[MaskPolygon, ...] = Field(
        (),
        max_length=32,
        description="Polygons [[x, y], ...] in frame pixels where changes are ignored "
        "(a timestamp overlay, trees); each of 3 to 100 points.",
    )
    stationary_interval_s: float = Field(
        1.0,
        gt=0,
        le=3600,
        description="With a live track but no motion, a frame is still sent this often "
        "(stream seconds), so a stopped vehicle is re-read; keep it below "
        "tracker.lost_track_buffer_s so its track lives on between reads.",
    )

    @field_validator("mask", mode="before")
    @classmethod
    def _mask_shape(cls, mask: Any) -> Any:
        if not isinstance(mask, list | tuple):
            return mask  # pydantic reports the type
        for i, polygon in enumerate(mask):
            if not isinstance(polygon, list | tuple):
                raise ValueError(
                    f"mask[{i}] must be a polygon, a list of [x, y] points, "
                    f"got {_type_name(polygon)}"
                )
            if polygon and not any(isinstance(point, list | tuple) for point in polygon):
                raise ValueError(
                    f"mask[{i}] is one point, not a polygon: mask is a list of polygons, "
                    "each a list of [x, y] points: [[[x1, y1], [x2, y2], [x3, y3]], ...]"
                )
            if not 3 <= len(polygon) <= 100:
                raise ValueError(
                    f"mask[{i}] has {len(polygon)} points: a polygon needs 3 to 100 [x, y] points"
                )
            for j, point in enumerate(polygon):
                if not isinstance(point, list | tuple) or len(point) != 2:
                    raise ValueError(
                        f"mask[{i}][{j}] must be one [x, y] point in frame pixels, "
                        f"got {_quote(point) if not isinstance(point, list | tuple) else point}"
                    )
        return mask


class CameraConfig(_Section):
    """One camera: where its video comes from and how it is sampled."""

    name: str = Field(
        description="Unique camera id, used in events, metrics and logs "
        "(1-63 of a-z 0-9 _ -, starting with a letter or digit).",
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": CAMERA_NAME_PATTERN},
    )
    url: str = Field(
        description="rtsp://, rtsps://, http://, https:// URL, or a video file path "
        "(file:// prefix allowed; relative to the config file's folder).",
        min_length=1,
        max_length=4096,
    )
    enabled: bool = Field(True, description="Read this camera; false keeps it configured but off.")
    sample_fps: float = Field(
        5.0,
        gt=0,
        le=60,
        description="Frames per second sent to recognition (decoded frames "
        "in between are dropped).",
    )
    realtime: bool = Field(
        True,
        description="Files only: play at the clip's own pace (true) or as fast as possible "
        "(false). Network streams always arrive in real time.",
    )
    skip_non_reference_frames: bool = Field(
        True,
        description="When the stream has at least twice sample_fps, do not decode frames that "
        "no other frame refers to (B-frames): less decode CPU; decoding every frame again when "
        "the rest come slower than sample_fps.",
    )
    known_plates: KnownPlatesLists = Field(
        default_factory=dict,
        description="This camera's own known-plate lists (label -> list), matched before the "
        "global ones.",
    )
    decide: Literal["fast", "sure"] = Field(
        "fast",
        description="fast: report a pass at events.max_delay_s on what evidence there is, and "
        "correct it later (plate.updated) if more evidence says otherwise; sure: report only "
        "on confident evidence or when the plate leaves.",
    )
    weight: float = Field(
        1.0,
        gt=0,
        le=100,
        description="This camera's share of Triton under overload, relative to the others "
        "(2: twice the frames of a camera of weight 1).",
    )
    roi: (
        tuple[
            Annotated[int, Field(ge=0)],
            Annotated[int, Field(ge=0)],
            Annotated[int, Field(ge=0)],
            Annotated[int, Field(ge=0)],
        ]
        | None
    ) = Field(
        None,
        description="Region of interest [x1, y1, x2, y2] in frame pixels; plates whose box "
        "centre lies outside are ignored. None: the whole frame.",
    )
    min_plate_width: int = Field(
        0, ge=0, le=10_000, description="Plates narrower than this many pixels are ignored."
    )
    rtsp_transport: Literal["tcp", "udp"] = Field(
        "tcp", description="RTSP transport: tcp (robust) or udp (lower latency, may lose packets)."
    )
    open_timeout_s: float = Field(
        5.0, gt=0, le=300, description="Seconds to wait for a stream or file to open."
    )
    read_timeout_s: float = Field(
        5.0, gt=0, le=300, description="Seconds one network read may block before it fails."
    )
    stall_timeout_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="Seconds without a decoded frame before the camera is reconnected "
        "(> read_timeout_s).",
    )
    reconnect_initial_delay_s: float = Field(
        0.5, gt=0, le=300, description="First delay before reconnecting; doubles on each failure."
    )
    reconnect_max_delay_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="Upper bound of the reconnect delay (>= reconnect_initial_delay_s).",
    )
    motion: MotionConfig = Field(default_factory=MotionConfig, description=MotionConfig.__doc__)

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not _CAMERA_NAME.match(name):
            raise ValueError(
                f"camera name {name!r} is not allowed: use 1-63 characters of a-z, 0-9, "
                "'_' and '-', starting with a letter or digit (e.g. 'gate-1')"
            )
        return name

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str, info: ValidationInfo) -> str:
        if url != url.strip() or not url.strip():
            raise ValueError("the URL must not be empty or start or end with spaces")
        scheme = url_scheme(url)
        if not scheme:
            return _resolve_path(url, info)
        if scheme == "file":
            path = unquote(url[len(FILE_PREFIX) :])
            if not path:
                raise ValueError("file:// URL without a path")
            return _resolve_path(path, info)
        if scheme not in NETWORK_SCHEMES:
            raise ValueError(
                f"unsupported URL scheme '{scheme}://' in {redact_url(url)}: use rtsp://, "
                "rtsps://, http://, https://, or a file path"
            )
        parts = urlsplit(url)
        if "@" in parts.path or "@" in parts.fragment:
            raise ValueError(
                f"cannot tell the host of {redact_url(url)}: if the user or password contains "
                "'/', '?', '#' or '@', percent-encode it (%2F, %3F, %23, %40)"
            )
        try:
            parts.port  # noqa: B018  (raises on a bad port)
        except ValueError:
            # The netloc is malformed, so a password in it cannot be told apart:
            # never echo it.
            raise ValueError(
                f"bad port in {scheme}://(hidden){parts.path}: check the host:port, and if the "
                "password contains '/', '?', '#' or '@', percent-encode it (%2F, %3F, %23, %40)"
            ) from None
        if not parts.hostname:
            raise ValueError(f"no host in {redact_url(url)}")
        return url

    @field_validator("roi", mode="before")
    @classmethod
    def _roi_length(cls, roi: Any) -> Any:
        if isinstance(roi, list | tuple) and len(roi) != 4:
            raise ValueError(f"roi must be 4 pixel values [x1, y1, x2, y2], got {len(roi)}")
        return roi

    @field_validator("roi")
    @classmethod
    def _check_roi(cls, roi: tuple[int, int, int, int] | None) -> tuple[int, int, int, int] | None:
        if roi is not None:
            x1, y1, x2, y2 = roi
            if x2 <= x1 or y2 <= y1:
                raise ValueError(
                    f"roi must be [x1, y1, x2, y2] with x2 > x1 and y2 > y1, got {list(roi)}"
                )
        return roi

    @field_validator("stall_timeout_s")
    @classmethod
    def _check_stall(cls, stall: float, info: ValidationInfo) -> float:
        read = info.data.get("read_timeout_s")
        if read is not None and stall <= read:
            raise ValueError(
                f"must be greater than read_timeout_s ({read:g}), got {stall:g}: "
                "raise stall_timeout_s or lower read_timeout_s"
            )
        return stall

    @field_validator("reconnect_max_delay_s")
    @classmethod
    def _check_max_delay(cls, max_delay: float, info: ValidationInfo) -> float:
        initial = info.data.get("reconnect_initial_delay_s")
        if initial is not None and max_delay < initial:
            raise ValueError(
                f"must be >= reconnect_initial_delay_s ({initial:g}), got {max_delay:g}"
            )
        return max_delay

    @property
    def is_file(self) -> bool:
        """True when the camera is a file (not an rtsp/http URL)."""
        return not is_network_url(self.url)

    @property
    def file_path(self) -> Path | None:
        """The video file's path for a file camera (already resolved), else None."""
        return Path(self.url) if self.is_file else None

    @property
    def redacted_url(self) -> str:
        """The URL with user, password and secret query values replaced by ``***``."""
        return redact_url(self.url)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # Used by pydantic's __repr__ and __str__ (and so by a Settings' repr).
        for name, value in super().__repr_args__():
            yield name, (self.redacted_url if name == "url" else value)


def _check_triton_url(url: str | None) -> str | None:
    if url is None:
        return None
    match = _TRITON_URL.match(url)
    if not match:
        hint = " without a scheme" if "://" in url else ""
        raise ValueError(f"expected host:port{hint} (e.g. 'triton:8001'), got {_quote(url)}")
    if not 1 <= int(match.group(1)) <= 65535:
        raise ValueError(f"port must be 1-65535, got {match.group(1)}")
    return url


class TritonConfig(_Section):
    """The inference server: a remote gRPC Triton, or an embedded local one."""

    url: str | None = Field(
        None,
        max_length=300,
        description="host:port of a Triton gRPC endpoint; absent or empty: start an embedded "
        "CPU Triton on model_repository.",
    )
    model: str = Field(
        "plate_recognition",
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Name of the decoupled BLS model frames are sent to.",
    )
    request_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Deadline of one inference request, in seconds."
    )
    connect_timeout_s: float = Field(
        10.0, gt=0, le=600, description="Seconds to wait for the server and model to be ready."
    )
    max_in_flight_per_camera: int = Field(
        2,
        ge=1,
        le=16,
        description="Frames of one camera at Triton at once (a cap within the shared window).",
    )
    min_in_flight: int = Field(
        2,
        ge=1,
        le=1024,
        description="Lower bound of the adaptive window (<= max_in_flight): two frames keep "
        "Triton busy while the next one travels.",
    )
    max_in_flight: int = Field(
        32,
        ge=1,
        le=1024,
        description="Upper bound of the adaptive window: frames of all cameras at this Triton "
        "at once. The window itself is sized from the measured answer rate and latency.",
    )
    latency_tolerance: float = Field(
        2.0,
        ge=1.0,
        le=10.0,
        description="The window shrinks while answers take longer than this many times the "
        "no-load latency (the fastest answer of the last minute); it grows only while a "
        "larger window buys throughput.",
    )
    embedded_startup_timeout_s: float = Field(
        300.0, gt=0, le=3600, description="Seconds the embedded Triton may take to load the models."
    )
    model_repository: Path = Field(
        DEFAULT_MODEL_REPOSITORY,
        description="Model repository of the embedded Triton (relative: to the config file's "
        "folder); default: the project's model_repository/.",
    )

    @field_validator("url", mode="before")
    @classmethod
    def _url_empty_is_none(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        return _check_triton_url(url)

    @field_validator("max_in_flight")
    @classmethod
    def _check_window(cls, maximum: int, info: ValidationInfo) -> int:
        minimum = info.data.get("min_in_flight")
        if minimum is not None and maximum < minimum:
            raise ValueError(f"must be >= min_in_flight ({minimum}), got {maximum}")
        return maximum

    @field_validator("model_repository", mode="before")
    @classmethod
    def _default_repository(cls, value: Any) -> Any:
        return DEFAULT_MODEL_REPOSITORY if _empty_to_none(value) is None else value

    @field_validator("model_repository")
    @classmethod
    def _resolve_repository(cls, value: Path, info: ValidationInfo) -> Path:
        return Path(_resolve_path(value, info))


class TrackerConfig(_Section):
    """Tracking of plates across the sampled frames of one camera (ByteTrack style)."""

    iou_threshold: float = Field(
        0.2, gt=0, le=1, description="Minimum box IoU to match a detection to a track."
    )
    high_score: float = Field(
        0.4, gt=0, le=1, description="Detections at or above this score start and extend tracks."
    )
    low_score: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Detections between low_score and high_score only extend existing tracks "
        "(< high_score); below low_score they are ignored.",
    )
    lost_track_buffer_s: float = Field(
        2.0, gt=0, le=600, description="Seconds a track survives without a matching detection."
    )
    min_hits: int = Field(
        2, ge=1, le=100, description="Matched frames before a track is confirmed."
    )

    @field_validator("low_score")
    @classmethod
    def _check_low(cls, low: float, info: ValidationInfo) -> float:
        high = info.data.get("high_score")
        if high is not None and low >= high:
            raise ValueError(f"must be less than high_score ({high:g}), got {low:g}")
        return low


def _check_regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


class EventsConfig(_Section):
    """When a tracked plate becomes an event, and where events go."""

    plate_formats: list[Annotated[str, AfterValidator(_check_regex)]] = Field(
        default_factory=lambda: list(RUSSIAN_FORMATS.values()),
        min_length=1,
        max_length=100,
        description="Regular expressions a plate text must match whole to be valid; "
        "default: the Russian formats of streamer/tracking/plate_formats.py.",
    )
    min_text_score: float = Field(
        0.5, ge=0, le=1, description="Readings with a lower text score are not counted."
    )
    min_reads: int = Field(
        2,
        ge=1,
        le=1000,
        description="Readings exactly equal to a track's text before it may be reported.",
    )
    min_confidence: float = Field(
        MIN_CONFIDENCE,
        ge=0,
        le=1,
        description="Confidence (the text's probability among the valid plates, from the "
        "fused character probabilities) a track needs to be reported at all; below it the "
        'pass is withheld (lpr_passes_withheld_total{reason="low_confidence"}).',
    )
    confident_reads: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Pieces of evidence after which a track is reported at once if its text "
        "has confident_share confidence and they back it (>= min_reads).",
    )
    confident_share: float = Field(
        0.8, ge=0.5, le=1, description="Confidence a track's text needs to be reported early."
    )
    confident_span_s: float = Field(
        2.0,
        ge=0,
        le=3600,
        description="Seconds of stream time a track's evidence must span before an early "
        "report: consecutive frames repeat the same misread, so many reads in a short time "
        "prove little.",
    )
    evidence_min_change: float = Field(
        evidence.MIN_CHANGE,
        ge=0,
        le=255,
        description="A reading is new evidence when the plate's crop changed by this mean "
        "grey-level difference (0-255) since the track's last counted reading...",
    )
    evidence_min_shift: float = Field(
        evidence.MIN_SHIFT,
        ge=0,
        le=10,
        description="...or the plate moved by this fraction of its height; a still image "
        "read again is not (0 and 0: every reading counts).",
    )
    max_delay_s: float = Field(
        6.0,
        gt=0,
        le=3600,
        description="Seconds after a track's first reading by which it is reported anyway "
        "(or when it ends, if sooner).",
    )
    updates: bool = Field(
        True,
        description="Report a correction (plate.updated, same event_id) when later evidence "
        "changes a reported pass's text.",
    )
    dedup_window_s: float = Field(
        300.0,
        ge=0,
        le=86_400,
        description="Seconds during which the same text on the same camera is not reported "
        "again; 0: no deduplication.",
    )
    crop_jpeg_quality: int = Field(
        90, ge=10, le=100, description="JPEG quality of the plate crop attached to an event."
    )
    stdout: bool = Field(True, description="Write events to stdout as JSON lines.")
    file: Path | None = Field(
        None,
        description="Also append events as JSON lines to this file (relative: to the config "
        "file's folder); absent: no file.",
    )

    @field_validator("plate_formats", mode="before")
    @classmethod
    def _default_formats(cls, value: Any) -> Any:
        return list(RUSSIAN_FORMATS.values()) if value is None else value

    @field_validator("file", mode="before")
    @classmethod
    def _file_empty_is_none(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @field_validator("confident_reads")
    @classmethod
    def _check_confident_reads(cls, value: int, info: ValidationInfo) -> int:
        min_reads = info.data.get("min_reads")
        if min_reads is not None and value < min_reads:
            raise ValueError(f"must be >= min_reads ({min_reads}), got {value}")
        return value

    @field_validator("file")
    @classmethod
    def _resolve_file(cls, value: Path | None, info: ValidationInfo) -> Path | None:
        return None if value is None else Path(_resolve_path(value, info))


_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class WebConfig(_Section):
    """The HTTP server (live view and API)."""

    enabled: bool = Field(True, description="Serve the live view and the REST API.")
    host: str = Field(
        "127.0.0.1",
        min_length=1,
        max_length=255,
        description="Address to listen on; 0.0.0.0 for every interface.",
    )
    port: int = Field(8080, ge=0, le=65535, description="TCP port to listen on (0: any free).")
    token: SecretStr | None = Field(
        None,
        description="Token every page, API and stream request must carry (Authorization: "
        "Bearer, or ?token=); required unless host is 127.0.0.1, ::1 or localhost; absent or "
        "empty: no authentication.",
    )

    @field_validator("token", mode="before")
    @classmethod
    def _token_empty_is_none(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @model_validator(mode="after")
    def _token_off_loopback(self) -> WebConfig:
        if self.enabled and self.token is None and self.host not in _LOOPBACK_HOSTS:
            raise ValueError(
                f"web.token is required when web.host is {self.host!r} (not loopback): "
                "set it, e.g. token: ${WEB_TOKEN}"
            )
        return self


class MetricsConfig(_Section):
    """The operations endpoint: Prometheus /metrics, /healthz and /readyz."""

    enabled: bool = Field(True, description="Serve /metrics, /healthz and /readyz.")
    host: str = Field(
        "127.0.0.1",
        min_length=1,
        description="Address to bind (0.0.0.0 in a container so Prometheus can scrape it).",
    )
    port: int = Field(
        9108, ge=0, le=65535, description="TCP port of /metrics, /healthz, /readyz (0: any free)."
    )


class LogConfig(_Section):
    """Logging."""

    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        "INFO", description="Minimum level logged (case-insensitive)."
    )
    format: Literal["text", "json"] = Field(
        "text", description="text: human-readable lines; json: one JSON object per line."
    )

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


#: ``whsec_`` + base64 of 24-64 random bytes (Standard Webhooks symmetric secret).
WEBHOOK_SECRET_PREFIX = "whsec_"
WEBHOOK_SECRET_HINT = (
    "use 'whsec_' followed by the base64 of 24 to 64 random bytes; generate one with: "
    "python -c \"import base64,os; print('whsec_'+base64.b64encode(os.urandom(24)).decode())\""
)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")


def _check_http_url(url: str, what: str) -> str:
    """An http(s):// URL with a host; credentials in it are never echoed."""
    if url != url.strip() or not url:
        raise ValueError(f"the {what} must not be empty or start or end with spaces")
    scheme = url_scheme(url)
    if scheme not in ("http", "https"):
        raise ValueError(f"the {what} must start with http:// or https://, got {redact_url(url)}")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        raise ValueError(f"bad host or port in the {what}: check host:port") from None
    if not parts.hostname:
        raise ValueError(f"no host in {redact_url(url)}")
    return url


class WebhookTargetConfig(_Section):
    """One webhook receiver: every event is POSTed to it, signed, retried until delivered."""

    name: str = Field(
        description="Unique target id, used in metrics, logs and the dead-letter CLI "
        "(1-63 of a-z 0-9 _ -, starting with a letter or digit).",
        min_length=1,
        max_length=63,
        json_schema_extra={"pattern": CAMERA_NAME_PATTERN},
    )
    url: str = Field(
        description="http:// or https:// URL events are POSTed to.", min_length=1, max_length=4096
    )
    secret: SecretStr = Field(
        description="Standard Webhooks signing secret, 'whsec_' + base64 of 24-64 random bytes "
        "(keep it in the environment: ${WEBHOOK_SECRET}). Never logged."
    )
    enabled: bool = Field(True, description="Deliver to this target; false keeps it configured.")
    timeout_s: float = Field(
        10.0, gt=0, le=300, description="Seconds one POST may take (connect + answer)."
    )
    max_concurrency: int = Field(
        4,
        ge=1,
        le=64,
        description="POSTs in flight at once to this target (each camera's events go one at "
        "a time, in order; cameras in parallel up to this).",
    )
    retry_initial_delay_s: float = Field(
        1.0, gt=0, le=3600, description="Backoff before the first retry; doubles on each failure."
    )
    retry_max_delay_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="Cap of the exponential backoff (>= retry_initial_delay_s); each delay is "
        "drawn at random below it (full jitter).",
    )
    retry_after_max_s: float = Field(
        600.0,
        ge=0,
        le=86_400,
        description="Longest Retry-After (of a 429 or 5xx answer) that is honoured; longer "
        "ones are cut to this.",
    )
    crop: Literal["base64", "url", "none"] = Field(
        "base64",
        description="The plate crop in the payload: base64 (crop_jpeg_base64), url (crop_url "
        "on public_base_url) or none.",
    )
    public_base_url: str | None = Field(
        None,
        max_length=4096,
        validate_default=True,  # so that crop: url without it is an error
        description="Base URL under which this service is reachable by the receiver "
        "(crop_url = <public_base_url>/api/events/<event_id>/crop.jpg); required when crop is url.",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not _CAMERA_NAME.match(name):
            raise ValueError(
                f"target name {name!r} is not allowed: use 1-63 characters of a-z, 0-9, "
                "'_' and '-', starting with a letter or digit (e.g. 'crm')"
            )
        return name

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        return _check_http_url(url, "webhook URL")

    @field_validator("secret")
    @classmethod
    def _check_secret(cls, secret: SecretStr) -> SecretStr:
        # The value is never quoted: an error says what is wrong, not what it is.
        value = secret.get_secret_value()
        if not value.startswith(WEBHOOK_SECRET_PREFIX):
            raise ValueError(f"the secret does not start with 'whsec_': {WEBHOOK_SECRET_HINT}")
        body = value[len(WEBHOOK_SECRET_PREFIX) :]
        if not _BASE64.match(body):
            raise ValueError(f"the secret after 'whsec_' is not base64: {WEBHOOK_SECRET_HINT}")
        try:
            key = base64.b64decode(body + "=" * (-len(body) % 4), validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(
                f"the secret after 'whsec_' is not base64: {WEBHOOK_SECRET_HINT}"
            ) from None
        if not 24 <= len(key) <= 64:
            raise ValueError(f"the secret holds {len(key)} bytes: {WEBHOOK_SECRET_HINT}")
        return secret

    @field_validator("public_base_url", mode="before")
    @classmethod
    def _base_url_empty_is_none(cls, value: Any) -> Any:
        return _empty_to_none(value)

    @field_validator("public_base_url")
    @classmethod
    def _check_base_url(cls, url: str | None, info: ValidationInfo) -> str | None:
        if url is None:
            if info.data.get("crop") == "url":
                raise ValueError(
                    "required when crop is url: the address receivers fetch the crop from "
                    "(e.g. https://lpr.example.com)"
                )
            return None
        return _check_http_url(url, "public_base_url").rstrip("/")

    @field_validator("retry_max_delay_s")
    @classmethod
    def _check_retry_max(cls, max_delay: float, info: ValidationInfo) -> float:
        initial = info.data.get("retry_initial_delay_s")
        if initial is not None and max_delay < initial:
            raise ValueError(f"must be >= retry_initial_delay_s ({initial:g}), got {max_delay:g}")
        return max_delay

    @property
    def redacted_url(self) -> str:
        """The URL with user, password and secret query values replaced by ``***``."""
        return redact_url(self.url)

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, (self.redacted_url if name == "url" else value)


#: The outbox file when the config names none (relative: to the config file's folder).
DEFAULT_OUTBOX_PATH = Path("data/outbox.sqlite3")


class OutboxConfig(_Section):
    """The durable webhook outbox (SQLite): every event is stored here before delivery."""

    path: Path = Field(
        DEFAULT_OUTBOX_PATH,
        validate_default=True,  # so that the default resolves against the config's folder
        description="SQLite file of the outbox (relative: to the config file's folder); "
        "its folder is created when missing.",
    )
    retention_s: float = Field(
        7 * 86_400.0,
        ge=0,
        le=366 * 86_400,
        description="Seconds a delivered event is kept (to re-serve its crop) before it is "
        "pruned; undelivered events and dead letters are never pruned.",
    )
    prune_interval_s: float = Field(
        600.0, gt=0, le=86_400, description="Seconds between two prunings of delivered events."
    )

    @field_validator("path", mode="before")
    @classmethod
    def _default_path(cls, value: Any) -> Any:
        return DEFAULT_OUTBOX_PATH if _empty_to_none(value) is None else value

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: Path, info: ValidationInfo) -> Path:
        return Path(_resolve_path(value, info))


class Settings(_Section):
    """The whole config file."""

    cameras: list[CameraConfig] = Field(
        min_length=1, max_length=256, description="The cameras to read (at least one)."
    )
    triton: TritonConfig = Field(default_factory=TritonConfig, description=TritonConfig.__doc__)
    tracker: TrackerConfig = Field(default_factory=TrackerConfig, description=TrackerConfig.__doc__)
    events: EventsConfig = Field(default_factory=EventsConfig, description=EventsConfig.__doc__)
    web: WebConfig = Field(default_factory=WebConfig, description=WebConfig.__doc__)
    metrics: MetricsConfig = Field(
        default_factory=MetricsConfig,
        validate_default=True,  # so that the port check below sees a default metrics.port
        description=MetricsConfig.__doc__,
    )
    log: LogConfig = Field(default_factory=LogConfig, description=LogConfig.__doc__)
    known_plates: KnownPlatesLists = Field(
        default_factory=dict,
        description="Known-plate lists (label -> list of plates or patterns) every decided "
        "text is matched against (docs/events.md#known-plates).",
    )
    webhooks: list[WebhookTargetConfig] = Field(
        default_factory=list,
        max_length=32,
        description="Webhook targets every event is delivered to (see docs/events.md); "
        "none: no webhooks.",
    )
    outbox: OutboxConfig = Field(
        # A mapping, validated like a written section, so that the default path
        # resolves against the config file's folder too.
        default_factory=dict,
        validate_default=True,
        description=OutboxConfig.__doc__,
    )

    @field_validator("cameras")
    @classmethod
    def _unique_names(cls, cameras: list[CameraConfig]) -> list[CameraConfig]:
        first: dict[str, int] = {}
        for index, camera in enumerate(cameras):
            if camera.name in first:
                raise ValueError(
                    f"cameras[{first[camera.name]}] and cameras[{index}] are both named "
                    f"{camera.name!r}: camera names must be unique"
                )
            first[camera.name] = index
        return cameras

    @field_validator("webhooks")
    @classmethod
    def _unique_targets(cls, targets: list[WebhookTargetConfig]) -> list[WebhookTargetConfig]:
        first: dict[str, int] = {}
        for index, target in enumerate(targets):
            if target.name in first:
                raise ValueError(
                    f"webhooks[{first[target.name]}] and webhooks[{index}] are both named "
                    f"{target.name!r}: target names must be unique"
                )
            first[target.name] = index
        return targets

    @field_validator("metrics")
    @classmethod
    def _distinct_ports(cls, metrics: MetricsConfig, info: ValidationInfo) -> MetricsConfig:
        web = info.data.get("web")
        if metrics.enabled and web is not None and metrics.port == web.port != 0:
            raise ValueError(
                f"metrics.port and web.port are both {web.port}: choose another port for one"
            )
        return metrics

    def known_plates_for(self, camera: CameraConfig) -> KnownPlates:
        """The camera's known-plate lists, then the global ones it does not override."""
        lists = {**camera.known_plates}
        lists.update({k: v for k, v in self.known_plates.items() if k not in lists})
        return KnownPlates(
            KnownList(label, tuple(c.plates), c.max_distance, c.snap, c.alert)
            for label, c in lists.items()
        )

    @property
    def enabled_cameras(self) -> tuple[CameraConfig, ...]:
        return tuple(c for c in self.cameras if c.enabled)

    def redacted(self) -> dict[str, Any]:
        """The settings as plain JSON-able data, safe to log: URLs redacted, token masked."""
        data = self.model_dump(mode="json")
        for camera, dumped in zip(self.cameras, data["cameras"], strict=True):
            dumped["url"] = camera.redacted_url
        for target, dumped in zip(self.webhooks, data["webhooks"], strict=True):
            dumped["url"] = target.redacted_url
        return data


# --------------------------------------------------------------------------- loading


def load_config(path: Path | str, env: Mapping[str, str] | None = None) -> Settings:
    """Read, interpolate and validate a YAML config file.

    ``env`` supplies the ``${VAR}`` values (default: ``os.environ``). Relative
    paths in the file resolve against its folder. Raises :class:`ConfigError`.
    """
    path = Path(path)
    try:
        with path.open("rb") as file:  # bounded: --config /dev/zero must not fill memory
            data = file.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(path, [(None, f"larger than {MAX_CONFIG_BYTES // 1024} KiB")])
        text = data.decode("utf-8")
    except FileNotFoundError:
        raise ConfigError(path, [(None, "config file not found")]) from None
    except IsADirectoryError:
        raise ConfigError(path, [(None, "is a directory, not a config file")]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError(path, [(None, f"not UTF-8 text (byte {exc.start})")]) from None
    except OSError as exc:
        raise ConfigError(path, [(None, f"cannot read the file: {exc.strerror}")]) from None

    raw = parse_yaml(text, path)
    _check_size(raw, path)
    if raw is None:
        raise ConfigError(path, [(None, "the file is empty: it needs at least a 'cameras:' list")])
    if not isinstance(raw, dict):
        sections = ", ".join(Settings.model_fields)
        reason = f"the top level must be a mapping of sections ({sections}), got {_type_name(raw)}"
        raise ConfigError(path, [(None, reason)])
    problems: list[tuple[tuple[Any, ...], str]] = []
    data = interpolate(raw, os.environ if env is None else env, problems=problems)
    if problems:
        raise ConfigError(path, [(_key_path(loc, raw), reason) for loc, reason in problems])
    # An empty section (`web:`) means its defaults; an empty `cameras:` means none.
    for section in list(data):
        if data[section] is None and section in Settings.model_fields:
            if section == "cameras":
                data[section] = []
            else:
                del data[section]
    try:
        return Settings.model_validate(data, context={"base_dir": path.absolute().parent})
    except ValidationError as exc:
        raise format_validation_error(path, exc, data) from None


class _UniqueKeyLoader(yaml.SafeLoader):
    """A safe loader that rejects a key repeated in one mapping (PyYAML keeps the last)."""

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> dict[Any, Any]:
        if isinstance(node, yaml.MappingNode):
            seen: set[Any] = set()
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                    seen.add(key)
                except TypeError:  # unhashable: SafeLoader reports it
                    continue
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
        return super().construct_mapping(node, deep=deep)


#: A config file larger than this is refused.
MAX_CONFIG_BYTES = 1024 * 1024
#: Values (mappings, lists, scalars) a config may expand to; YAML aliases can make a small
#: file expand exponentially ("billion laughs").
MAX_CONFIG_VALUES = 100_000


def _check_size(raw: Any, path: Path) -> None:
    """Refuse a document that expands to more than ``MAX_CONFIG_VALUES`` values."""
    stack, count = [raw], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(
                path,
                [(None, f"expands to more than {MAX_CONFIG_VALUES} values (YAML aliases?)")],
            )
        if isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)


def parse_yaml(text: str, path: Path | str = "<config>") -> Any:
    """``yaml.safe_load`` that rejects duplicate keys; errors are :class:`ConfigError`
    with the line and column (the offending line itself is not quoted: it may hold a
    password)."""
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown place"
        reason = exc.problem or exc.context or "syntax error"
        if exc.context and exc.problem and exc.context_mark:
            reason += (
                f" ({exc.context} started at line {exc.context_mark.line + 1}, "
                f"column {exc.context_mark.column + 1})"
            )
        raise ConfigError(path, [(None, f"invalid YAML at {where}: {reason}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, [(None, f"invalid YAML: {exc}")]) from None


# --------------------------------------------------------------------------- interpolation

_REFERENCE = re.compile(r"\$\$\{|\$\{([^}]*)\}|\$\{")
_VAR_NAME = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?$", re.DOTALL)


def interpolate(
    node: Any,
    env: Mapping[str, str],
    loc: tuple[Any, ...] = (),
    problems: list[tuple[tuple[Any, ...], str]] | None = None,
) -> Any:
    """A copy of a parsed YAML tree with ``${VAR}`` and ``${VAR:-default}`` expanded in
    every string value (keys are left alone); ``$${`` gives a literal ``${``.

    Problems (unset variable without default, malformed reference) are appended to
    ``problems`` as ``(key location, reason)``; without a list the first raises ValueError.
    """
    collected: list[tuple[tuple[Any, ...], str]] = [] if problems is None else problems
    result = _interpolate(node, env, loc, collected, set())
    if problems is None and collected:
        raise ValueError(collected[0][1])
    return result


def _interpolate(
    node: Any,
    env: Mapping[str, str],
    loc: tuple[Any, ...],
    problems: list[tuple[tuple[Any, ...], str]],
    active: set[int],
) -> Any:
    if isinstance(node, str):
        return _interpolate_str(node, env, loc, problems)
    if not isinstance(node, dict | list):
        return node
    if id(node) in active:
        problems.append((loc, "recursive YAML alias"))
        return None
    active.add(id(node))
    try:
        if isinstance(node, dict):
            return {k: _interpolate(v, env, (*loc, k), problems, active) for k, v in node.items()}
        return [_interpolate(v, env, (*loc, i), problems, active) for i, v in enumerate(node)]
    finally:
        active.discard(id(node))


def _interpolate_str(
    text: str,
    env: Mapping[str, str],
    loc: tuple[Any, ...],
    problems: list[tuple[tuple[Any, ...], str]],
) -> str:
    def replace(match: re.Match[str]) -> str:
        whole = match.group(0)
        if whole == "$${":
            return "${"
        body = match.group(1)
        ref = _VAR_NAME.match(body) if body is not None else None
        if ref is None:
            shown = whole if body is not None else "${"
            problems.append(
                (
                    loc,
                    f"malformed reference {redact_text(shown)!r}: write ${{NAME}} or "
                    "${NAME:-default} (NAME of letters, digits and _), or $${ for a literal ${",
                )
            )
            return whole
        name, default = ref.group(1), ref.group(2)
        value = env.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        problems.append(
            (
                loc,
                f"environment variable {name} is not set: set it, or give a default with "
                f"${{{name}:-value}}",
            )
        )
        return whole

    return _REFERENCE.sub(replace, text)


# --------------------------------------------------------------------------- error messages

#: Field names whose values are never quoted in an error message.
_SENSITIVE_FIELD = re.compile(r"url|token|password|secret|key", re.IGNORECASE)


def format_validation_error(path: Path | str, exc: ValidationError, data: Any) -> ConfigError:
    """A :class:`ConfigError` for a pydantic error of ``Settings`` validating ``data``.

    Keys are written ``cameras[gate].sample_fps`` (the camera's name when it is valid
    and unique, else its index); input values are quoted only for scalar, non-secret
    fields, and any URL credentials in them are masked.
    """
    problems: list[tuple[str | None, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "invalid_key":  # loc ends with the key itself
            reason = (
                f"key {_quote(err.get('input'))} is not a string: quote it "
                "(YAML reads yes/no/on/off/true/false and numbers as other types)"
            )
            problems.append((_key_path(loc[:-1], data) or None, reason))
        else:
            problems.append((_key_path(loc, data) or None, _reason(err)))
    return ConfigError(path, problems)


def _reason(err: Any) -> str:
    loc: tuple[Any, ...] = tuple(err["loc"])
    kind: str = err["type"]
    value = err.get("input")
    field = _field_at(loc)
    if kind == "missing":
        if loc == ("cameras",):
            return "required key is missing: list at least one camera under 'cameras:'"
        return "required key is missing"
    if kind == "extra_forbidden":
        return _unknown_key_reason(loc)
    if kind == "too_short" and loc == ("cameras",):
        return "no cameras configured: list at least one under 'cameras:'"
    if kind == "too_short" and loc == ("events", "plate_formats"):
        return "at least one plate format is needed (or leave the key out for the defaults)"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"should be a mapping (key: value), got {_type_name(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"should be a list, got {_type_name(value)}"
    if kind == "value_error":
        message = str(err.get("ctx", {}).get("error", err["msg"]))
        return redact_text(message)
    message = str(err["msg"])
    if _quotable(loc, value):
        message += f" (got {_quote(value)})"
    bounds = _bounds_text(field) if field is not None else ""
    if bounds and kind in _NUMBER_ERRORS:
        message += f"; allowed: {bounds}"
    return message


_NUMBER_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "float_parsing",
    "float_type",
    "int_parsing",
    "int_type",
    "int_from_float",
    "finite_number",
}


def _unknown_key_reason(loc: tuple[Any, ...]) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    allowed = list(model.model_fields) if model is not None else []
    reason = "unknown key"
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"{reason}; did you mean '{close[0]}'?"
    elsewhere = [name for name, other in _SECTIONS.items() if key in other.model_fields]
    if elsewhere:
        reason += f" here ('{key}' belongs under {' or '.join(elsewhere)})"
    if allowed:
        reason += f"; allowed keys: {', '.join(allowed)}"
    return reason


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``list[X]``, ``X | None``, ``Annotated[X, ...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (list, tuple, Union, Annotated, types.UnionType):
        for arg in get_args(annotation):
            model = _unwrap_model(arg)
            if model is not None:
                return model
    return None


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model whose keys live at ``loc`` (list indices skipped), or None."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None or part not in model.model_fields:
            return None
        model = _unwrap_model(model.model_fields[part].annotation)
    return model


def _field_at(loc: Sequence[Any]) -> FieldInfo | None:
    names = list(loc)
    while names and isinstance(names[-1], int):
        names.pop()
    if not names:
        return None
    model = _model_at(names[:-1])
    return model.model_fields.get(names[-1]) if model is not None else None


def _bounds_text(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Gt):
            parts.append(f"> {meta.gt}")
        elif isinstance(meta, annotated_types.Ge):
            parts.append(f">= {meta.ge}")
        elif isinstance(meta, annotated_types.Lt):
            parts.append(f"< {meta.lt}")
        elif isinstance(meta, annotated_types.Le):
            parts.append(f"<= {meta.le}")
    kind = {float: "a number", int: "an integer"}.get(field.annotation)  # type: ignore[call-overload]
    if not parts or kind is None:
        return ""
    return f"{kind} {' and '.join(parts)}"


def _quotable(loc: tuple[Any, ...], value: Any) -> bool:
    if isinstance(value, dict | list | tuple):
        return False
    return not any(isinstance(p, str) and _SENSITIVE_FIELD.search(p) for p in loc)


def _quote(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = redact_text(value)
        return repr(text if len(text) <= 80 else text[:77] + "...")
    return repr(value)


def _type_name(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    for kind, name in (
        (bool, "a boolean"),
        (dict, "a mapping"),
        (list, "a list"),
        (str, "a string"),
        (int, "an integer"),
        (float, "a number"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__


def _key_path(loc: Sequence[Any], data: Any) -> str:
    """``("cameras", 1, "sample_fps")`` -> ``cameras[gate].sample_fps`` (or ``cameras[1]...``)."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            label = str(part)
            if isinstance(node, list) and 0 <= part < len(node):
                name = _item_name(node, part)
                if name is not None:
                    label = name
            out += f"[{label}]"
        else:
            out += f".{part}" if out else str(part)
        node = _child(node, part)
    return out


def _item_name(items: list[Any], index: int) -> str | None:
    """The ``name`` of a list item when it is a valid, unique, non-numeric name."""
    item = items[index]
    name = item.get("name") if isinstance(item, dict) else None
    if not isinstance(name, str) or not _CAMERA_NAME.match(name) or name.isdigit():
        return None
    same = sum(1 for other in items if isinstance(other, dict) and other.get("name") == name)
    return name if same == 1 else None


def _child(node: Any, part: Any) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


_SECTIONS: dict[str, type[BaseModel]] = {
    "cameras[]": CameraConfig,
    "cameras[].motion": MotionConfig,
    "triton": TritonConfig,
    "tracker": TrackerConfig,
    "events": EventsConfig,
    "web": WebConfig,
    "metrics": MetricsConfig,
    "log": LogConfig,
    "webhooks[]": WebhookTargetConfig,
    "outbox": OutboxConfig,
}
