"""The event history: the ``storage:`` section."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator

from streamer.config.base import (
    CAMERA_NAME_PATTERN,
    Section,
    config_path,
    empty_to_none,
)
from streamer.foundation.redact import url_scheme

DEFAULT_STORE_PATH = Path("data/events.sqlite3")
StorePath = config_path(DEFAULT_STORE_PATH)


class LabelRetention(Section):
    """How long the events of one known-plate list are kept (longer or shorter)."""

    label: str = Field(pattern=CAMERA_NAME_PATTERN, description="The known-plate list (its label).")
    days: float = Field(gt=0, le=36_600, description="Days its events are kept.")


class StorageConfig(Section):
    """The searchable history of events (SQLite, or PostgreSQL for many replicas): every
    event, its corrections, its plate crop and a picture of the vehicle, kept across
    restarts (docs/config.md#storage)."""

    enabled: bool = Field(True, description="Keep the event history (search, pictures).")
    backend: Literal["sqlite", "postgresql"] = Field(
        "sqlite",
        description="sqlite: a file on this machine (path); postgresql: a server every "
        "replica shares (dsn), so search and the events page span them.",
    )
    dsn: SecretStr | None = Field(
        None,
        validate_default=True,  # so that backend: postgresql without it is an error
        description="postgresql://user:password@host:5432/database (keep it in the "
        "environment: ${LPR_HISTORY_DSN}); required when backend is postgresql. Never logged.",
    )
    path: StorePath = Field(
        DEFAULT_STORE_PATH,
        validate_default=True,  # so that the default resolves against the config's folder
        description="SQLite file of the history (relative: to the config file's folder); "
        "its folder is created when missing.",
    )
    retention_days: float = Field(
        30.0,
        gt=0,
        le=36_600,
        description="Days an event is kept (by the time it was first seen); older ones are "
        "deleted with their pictures.",
    )
    retention_by_label: list[LabelRetention] = Field(
        default_factory=list,
        max_length=64,
        description="Another retention for the events of chosen known-plate lists.",
    )
    max_size_gb: float = Field(
        10.0,
        gt=0,
        le=100_000,
        description="Size the history may take on disk, in GB; past it the oldest events "
        "are deleted first.",
    )
    prune_interval_s: float = Field(
        600.0, gt=0, le=86_400, description="Seconds between two prunings of the history."
    )
    lease_ttl_s: float = Field(
        15.0,
        ge=3,
        le=600,
        description="With postgresql and --shard: seconds a replica's camera lease lasts "
        "unless renewed (every lease_ttl_s / 5). A replica that cannot renew stops the "
        "camera before it expires; another takes it over within this time of a replica "
        "dying or freezing.",
    )
    frame_max_width: int = Field(
        640,
        ge=160,
        le=1920,
        description="Width in pixels the vehicle picture (the frame around the plate) is "
        "scaled down to, at most.",
    )

    @field_validator("dsn", mode="before")
    @classmethod
    def _empty_dsn_is_none(cls, value: Any) -> Any:
        return empty_to_none(value)

    @field_validator("dsn")
    @classmethod
    def _check_dsn(cls, dsn: SecretStr | None, info: ValidationInfo) -> SecretStr | None:
        # The value is never quoted: it holds the password.
        if dsn is None:
            if info.data.get("backend") == "postgresql":
                raise ValueError(
                    "required when backend is postgresql, e.g. "
                    "postgresql://lpr:${PGPASSWORD}@db:5432/lpr"
                )
            return None
        if url_scheme(dsn.get_secret_value()) not in ("postgresql", "postgres"):
            raise ValueError("must start with postgresql:// (or postgres://)")
        return dsn
