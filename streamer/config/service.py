"""The service's own endpoints, logs and reload: the ``web:``, ``metrics:``, ``log:`` and
``reload:`` sections."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from streamer.config.base import Section, empty_to_none

#: Hosts the web server may listen on without a token (this machine only).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})


class WebConfig(Section):
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
        return empty_to_none(value)

    @model_validator(mode="after")
    def _token_off_loopback(self) -> WebConfig:
        if self.enabled and self.token is None and self.host not in LOOPBACK_HOSTS:
            raise ValueError(
                f"web.token is required when web.host is {self.host!r} (not loopback): "
                "set it, e.g. token: ${WEB_TOKEN}"
            )
        return self


class MetricsConfig(Section):
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


class LogConfig(Section):
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


class ReloadConfig(Section):
    """Reload of this file without a restart (also on SIGHUP and ``POST /api/reload``)."""

    watch: bool = Field(
        False, description="Reload when the file changes (polled: works on ConfigMaps too)."
    )
    interval_s: float = Field(
        2.0, ge=0.1, le=3600, description="Seconds between two looks at the file (watch)."
    )
