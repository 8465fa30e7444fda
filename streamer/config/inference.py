"""The ``triton:`` section: the inference server, a remote gRPC Triton or an embedded one."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, ValidationInfo, field_validator

from streamer.config.base import Section, config_path, empty_to_none, quote
from streamer.foundation.paths import BLS_MODEL, DEFAULT_MODEL_REPOSITORY

ModelRepositoryPath = config_path(DEFAULT_MODEL_REPOSITORY)

_TRITON_URL = re.compile(r"^(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9._-]+):(\d{1,5})$")


def _check_triton_url(url: str | None) -> str | None:
    if url is None:
        return None
    match = _TRITON_URL.match(url)
    if not match:
        hint = " without a scheme" if "://" in url else ""
        raise ValueError(f"expected host:port{hint} (e.g. 'triton:8001'), got {quote(url)}")
    if not 1 <= int(match.group(1)) <= 65535:
        raise ValueError(f"port must be 1-65535, got {match.group(1)}")
    return url


class TritonConfig(Section):
    """The inference server: a remote gRPC Triton, or an embedded local one."""

    url: str | None = Field(
        None,
        max_length=300,
        description="host:port of a Triton gRPC endpoint (a name with several addresses, such "
        "as a Kubernetes headless Service, is one endpoint per address); absent or empty, "
        "with no urls: start an embedded CPU Triton on model_repository.",
    )
    urls: tuple[str, ...] = Field(
        (),
        max_length=64,
        description="Several Triton gRPC endpoints (host:port each), instead of url: cameras "
        "are balanced over them and move to the others when one fails.",
    )
    resolve_interval_s: float = Field(
        30.0,
        ge=1,
        le=3600,
        description="Host names of url/urls are resolved again this often (endpoints that "
        "appear or go away in DNS are added or removed).",
    )
    health_interval_s: float = Field(
        1.0,
        ge=0.1,
        le=60,
        description="Each endpoint's server and model readiness is checked this often.",
    )
    health_timeout_s: float = Field(
        1.0, gt=0, le=60, description="A readiness check not answered within this fails."
    )
    recover_after_s: float = Field(
        5.0,
        ge=0,
        le=600,
        description="An endpoint back from a failure gets cameras again once it has been "
        "healthy this long (doubled for each relapse while its cameras come back, up to 8x).",
    )
    rebalance_s: float = Field(
        20.0,
        ge=0,
        le=3600,
        description="Then its share of the cameras grows from none to full over this many "
        "seconds, so that they move back a few at a time.",
    )
    keepalive_time_s: float = Field(
        10.0, ge=1, le=3600, description="gRPC keepalive: a ping after this much silence."
    )
    keepalive_timeout_s: float = Field(
        5.0,
        ge=1,
        le=600,
        description="gRPC keepalive: a ping not answered within this closes the connection.",
    )
    model: str = Field(
        BLS_MODEL,
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
    model_repository: ModelRepositoryPath = Field(
        DEFAULT_MODEL_REPOSITORY,
        description="Model repository of the embedded Triton (relative: to the config file's "
        "folder); default: the project's model_repository/.",
    )

    @field_validator("url", mode="before")
    @classmethod
    def _url_empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str | None) -> str | None:
        return _check_triton_url(url)

    @field_validator("urls")
    @classmethod
    def _check_urls(cls, urls: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        if urls and info.data.get("url") is not None:
            raise ValueError("set url or urls, not both")
        for index, url in enumerate(urls):
            try:
                _check_triton_url(url)
            except ValueError as exc:
                raise ValueError(f"[{index}]: {exc}") from None
            if url in urls[:index]:
                raise ValueError(f"[{index}]: {quote(url)} is listed twice")
        return urls

    @property
    def endpoints(self) -> tuple[str, ...]:
        """The configured endpoints (url or urls); empty: the embedded Triton."""
        return self.urls or ((self.url,) if self.url is not None else ())

    @field_validator("max_in_flight")
    @classmethod
    def _check_window(cls, maximum: int, info: ValidationInfo) -> int:
        minimum = info.data.get("min_in_flight")
        if minimum is not None and maximum < minimum:
            raise ValueError(f"must be >= min_in_flight ({minimum}), got {maximum}")
        return maximum
