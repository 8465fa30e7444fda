"""The service's own endpoints, logs and reload: the ``web:``, ``metrics:``, ``log:`` and
``reload:`` sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from streamer.config.base import Section, config_path, empty_to_none

#: Hosts the web server may listen on without a token (this machine only).
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
#: The key of signed picture links when ``web.link_secret`` is not set (relative: to the
#: config file's folder).
DEFAULT_LINK_KEY_PATH = Path("data/link.key")
LinkKeyPath = config_path(DEFAULT_LINK_KEY_PATH)
#: Characters of a ``web.link_secret``, at least.
MIN_LINK_SECRET_CHARS = 32


#: The schemes of an ICE server's URLs (RFC 7064, RFC 7065).
ICE_SCHEMES = ("stun:", "turn:", "turns:")


class IceServerConfig(Section):
    """A STUN or TURN server for the live view's WebRTC: the browser and the service both
    use it to find a path to each other (a TURN server relays the video where no direct path
    exists, e.g. no UDP between them)."""

    urls: list[str] = Field(
        min_length=1,
        max_length=16,
        description="stun:, turn: or turns: URLs of one server (turn:host:3478?transport=tcp "
        "for TURN over TCP).",
    )
    username: str | None = Field(
        None, max_length=512, description="TURN user name, with credential."
    )
    credential: SecretStr | None = Field(
        None,
        description="TURN password, with username. A logged-in browser receives it (it "
        "cannot use the server otherwise): prefer shared_secret.",
    )
    shared_secret: SecretStr | None = Field(
        None,
        description="The TURN server's shared secret (coturn's static-auth-secret): each "
        "browser gets a user name and password of its own, valid for credential_ttl_s "
        "(the TURN REST API); the secret itself never leaves the service.",
    )
    credential_ttl_s: float = Field(
        86_400.0,
        ge=60,
        le=30 * 86_400,
        description="How long the password made from shared_secret stays valid.",
    )

    @field_validator("urls")
    @classmethod
    def _ice_urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(ICE_SCHEMES) or len(url) > 1024:
                raise ValueError(f"{url!r} is not a stun:, turn: or turns: URL")
        return urls

    @field_validator("credential", "shared_secret", mode="before")
    @classmethod
    def _secret_empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @model_validator(mode="after")
    def _one_way_to_log_in(self) -> IceServerConfig:
        turn = any(url.startswith(("turn:", "turns:")) for url in self.urls)
        if self.shared_secret is not None and (self.username or self.credential):
            raise ValueError("give shared_secret, or username and credential, not both")
        if (self.username is None) != (self.credential is None):
            raise ValueError("username and credential go together")
        if turn and self.shared_secret is None and self.credential is None:
            raise ValueError("a TURN server needs username and credential, or shared_secret")
        return self


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

    session_ttl_s: float = Field(
        12 * 3600.0,
        ge=60,
        le=30 * 86_400,
        description="Seconds a browser stays logged in after the login page took the token "
        "(an HttpOnly session cookie); sessions end on logout and on a restart.",
    )
    auth_failures_burst: int = Field(
        10,
        ge=1,
        le=10_000,
        description="Wrong tokens (header, ?token=, login) one client address may send "
        "within auth_failures_window_s; beyond, its requests that need the token are "
        "answered 429 with Retry-After until the oldest failure is that old.",
    )
    auth_failures_window_s: float = Field(
        60.0,
        gt=0,
        le=86_400,
        description="The sliding window of auth_failures_burst, in seconds.",
    )
    link_ttl_s: float = Field(
        7 * 86_400.0,
        ge=1,
        le=366 * 86_400,
        description="Seconds a signed picture link in a webhook payload (crop_url, "
        "frame_url) answers without the token, from the POST that carried it.",
    )
    link_secret: SecretStr | None = Field(
        None,
        description=f"Key of the signed picture links (at least {MIN_LINK_SECRET_CHARS} "
        "characters; replicas behind one address must share it); absent: a random key kept "
        "in link_key_path.",
    )
    ice_servers: list[IceServerConfig] = Field(
        default_factory=list,
        max_length=16,
        description="STUN and TURN servers for the live view's WebRTC; none: direct "
        "connections only (the same network, or a port-forwarded host).",
    )
    webrtc_fallback_s: float = Field(
        8.0,
        ge=1,
        le=120,
        description="Seconds the live view waits for a camera's WebRTC to connect before it "
        "shows the MJPEG stream instead (also at once when WebRTC fails before it played).",
    )
    link_key_path: LinkKeyPath = Field(
        DEFAULT_LINK_KEY_PATH,
        validate_default=True,  # so that the default resolves against the config's folder
        description="File of the random link key used when link_secret is absent (made on "
        "first start, mode 0600; relative: to the config file's folder).",
    )

    @field_validator("token", "link_secret", mode="before")
    @classmethod
    def _secret_empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @field_validator("link_secret")
    @classmethod
    def _long_secret(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_LINK_SECRET_CHARS:
            raise ValueError(f"use at least {MIN_LINK_SECRET_CHARS} random characters")
        return value

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
