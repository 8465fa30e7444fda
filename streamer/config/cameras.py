"""A camera's section: where its video comes from, how it is sampled, and its motion gate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import unquote, urlsplit

from pydantic import Field, ValidationInfo, field_validator

from streamer.config.base import (
    CAMERA_NAME,
    CAMERA_NAME_PATTERN,
    Section,
    quote,
    resolve_path,
    type_name,
)
from streamer.config.decisions import KnownPlatesLists
from streamer.foundation.redact import redact_url, url_scheme

#: URL schemes read over the network; anything without ``scheme://`` is a file path.
NETWORK_SCHEMES = ("rtsp", "rtsps", "http", "https")
FILE_PREFIX = "file://"


def is_network_url(url: str) -> bool:
    """Whether ``url`` is read over the network (``rtsp(s)://``, ``http(s)://``)."""
    return url_scheme(url) in NETWORK_SCHEMES


#: The largest pixel coordinate of a roi or a mask point (JPEG's limit; an 8K frame is
#: 7680x4320): a larger value is a typo, and mask points are drawn as 32-bit integers
#: (10**400 passed the schema and crashed the motion gate at start).
MAX_PIXEL = 65_535
#: A pixel coordinate in a frame.
Pixel = Annotated[int, Field(ge=0, le=MAX_PIXEL)]
#: A mask polygon: 3 to 100 [x, y] points in frame pixels.
MaskPolygon = tuple[tuple[Pixel, Pixel], ...]


class MotionConfig(Section):
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
    regions: bool = Field(
        True,
        description="Send, with each frame, the boxes of what moved and of the live plates, "
        "so that Triton runs the detector on the regions around them when that is cheaper "
        "than the whole frame (needs a repository with a region detector: `converters build "
        "--region-size`). The first frame of each session is always detected whole. With "
        "`enabled: false` the motion check still runs for this, and every frame is sent.",
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
                    f"got {type_name(polygon)}"
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
                        f"got {quote(point) if not isinstance(point, list | tuple) else point}"
                    )
        return mask


class CameraConfig(Section):
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
    area: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        description="Where the camera is (Driveway, Car park north): the suggested area of "
        "its Home Assistant device.",
    )
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
        "(false: deterministic, never ahead of its own answers, so a file gives the same "
        "events on any machine). Network streams always arrive in real time.",
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
    roi: tuple[Pixel, Pixel, Pixel, Pixel] | None = Field(
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
        if not CAMERA_NAME.match(name):
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
            return resolve_path(url, info)
        if scheme == "file":
            path = unquote(url[len(FILE_PREFIX) :])
            if not path:
                raise ValueError("file:// URL without a path")
            return resolve_path(path, info)
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
