"""Where events go: the ``webhooks:`` targets, and the ``outbox:`` that keeps events until
every target has them."""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, SecretStr, ValidationInfo, field_validator

from streamer.config.base import (
    CAMERA_NAME,
    CAMERA_NAME_PATTERN,
    Section,
    config_path,
    empty_to_none,
)
from streamer.foundation.redact import redact_url, url_scheme

#: ``whsec_`` + base64 of 24-64 random bytes (Standard Webhooks symmetric secret).
WEBHOOK_SECRET_PREFIX = "whsec_"
WEBHOOK_SECRET_HINT = (
    "use 'whsec_' followed by the base64 of 24 to 64 random bytes; generate one with: "
    "python -c \"import base64,os; print('whsec_'+base64.b64encode(os.urandom(24)).decode())\""
)
_BASE64 = re.compile(r"^[A-Za-z0-9+/]+={0,2}$")
#: The event log's consumers in this process (streamer/delivery/consumers.py): the history,
#: ``events.stdout`` and ``events.file``. A webhook target may not take their names.
HISTORY_CONSUMER = "history"
STDOUT_CONSUMER = "stdout"
FILE_CONSUMER = "file"
LOCAL_CONSUMERS = (HISTORY_CONSUMER, STDOUT_CONSUMER, FILE_CONSUMER)


def check_http_url(url: str, what: str) -> str:
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


def check_webhook_secret(secret: SecretStr) -> SecretStr:
    """A Standard Webhooks secret: ``whsec_`` + base64 of 24-64 bytes. The value is never
    quoted: an error says what is wrong, not what it is."""
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


#: A webhook secret checked as :func:`check_webhook_secret` does (an item of a list).
WebhookSecret = Annotated[SecretStr, AfterValidator(check_webhook_secret)]

#: Longest ``retry_rejected_for_s``: 7 days.
MAX_REJECTED_WINDOW_S = 7 * 86_400.0


class WebhookTargetConfig(Section):
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
    previous_secrets: list[WebhookSecret] = Field(
        default_factory=list,
        max_length=3,
        description="Secrets being rotated out (at most 3, each like secret): every request "
        "is signed with secret and with each of these, so that a receiver holding the old or "
        "the new one accepts it. Never logged.",
    )
    enabled: bool = Field(True, description="Deliver to this target; false keeps it configured.")
    withheld: bool = Field(
        False,
        description="Also POST withheld passes (type plate.withheld: decided but under "
        "events.min_confidence or events.min_reads, not reported as plates).",
    )
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
    retry_rejected_for_s: float = Field(
        600.0,
        ge=0,
        le=MAX_REJECTED_WINDOW_S,
        description="Seconds a target answering 401, 403 or 404 (since its last 2xx) is "
        "retried with the backoff before its events become dead letters; 0: dead letters at "
        "once.",
    )
    payload: Literal["envelope", "bare"] = Field(
        "envelope",
        description="The body: envelope ({type, timestamp, data}: the event in data, as "
        "Standard Webhooks recommends) or bare (the event itself).",
    )
    crop: Literal["base64", "url", "none"] = Field(
        "base64",
        description="The plate crop in the payload: base64 (crop_jpeg_base64), url (crop_url, "
        "and frame_url with the history: signed links on public_base_url that expire after "
        "web.link_ttl_s) or none.",
    )
    public_base_url: str | None = Field(
        None,
        max_length=4096,
        validate_default=True,  # so that crop: url without it is an error
        description="Base URL under which this service is reachable by the receiver "
        "(crop_url = <public_base_url>/api/events/<event_id>/crop.jpg?expires=..&sig=..); "
        "required when crop is url.",
    )

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not CAMERA_NAME.match(name):
            raise ValueError(
                f"target name {name!r} is not allowed: use 1-63 characters of a-z, 0-9, "
                "'_' and '-', starting with a letter or digit (e.g. 'crm')"
            )
        if name in LOCAL_CONSUMERS:
            raise ValueError(
                f"target name {name!r} is taken: the event log's consumers "
                f"{', '.join(LOCAL_CONSUMERS)} have these names; choose another (e.g. 'crm')"
            )
        return name

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        return check_http_url(url, "webhook URL")

    @field_validator("secret")
    @classmethod
    def _check_secret(cls, secret: SecretStr) -> SecretStr:
        return check_webhook_secret(secret)

    @field_validator("public_base_url", mode="before")
    @classmethod
    def _base_url_empty_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

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
        return check_http_url(url, "public_base_url").rstrip("/")

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
OutboxPath = config_path(DEFAULT_OUTBOX_PATH)


class OutboxConfig(Section):
    """The durable event log (SQLite): every event is committed here first, and each
    consumer (the history, stdout, the file, each webhook target, MQTT) reads it from here at
    its own pace."""

    path: OutboxPath = Field(
        DEFAULT_OUTBOX_PATH,
        validate_default=True,  # so that the default resolves against the config's folder
        description="SQLite file of the event log (relative: to the config file's folder); "
        "its folder is created when missing. One service per file: a second one refuses to "
        "start.",
    )
    retention_s: float = Field(
        7 * 86_400.0,
        ge=0,
        le=366 * 86_400,
        description="Seconds an event every consumer has is kept (to re-serve its crop) "
        "before it is pruned; pending events are never pruned.",
    )
    dead_letter_retention_s: float = Field(
        30 * 86_400.0,
        ge=0,
        le=3660 * 86_400,
        description="Seconds a dead letter is kept for `deadletters redrive` before it is pruned.",
    )
    prune_interval_s: float = Field(
        600.0, gt=0, le=86_400, description="Seconds between two prunings of the log."
    )
    max_pending: int = Field(
        100_000,
        ge=1,
        le=100_000_000,
        description="Events one consumer may have pending: at 80 % it is warned of and a "
        "readiness problem; beyond it, its oldest pending events become dead letters "
        "(re-drivable), so that a consumer gone for good cannot fill the disk.",
    )
    max_lag_s: float = Field(
        300.0,
        ge=0,
        le=30 * 86_400,
        description="Seconds a consumer's oldest pending event may wait before the service "
        "reports it not ready, naming the consumer; 0: never.",
    )
    queue_max_mb: int = Field(
        64,
        ge=1,
        le=4096,
        description="MiB of decided events (their pictures) held in memory while the log "
        "cannot commit (a full disk); beyond it the cameras' decisions wait (none is "
        "dropped) and the service reports not ready.",
    )
