"""Fixtures of the delivery tests: an outbox with two targets (the webhook receiver is
tests/conftest.py's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from streamer.delivery.outbox import Outbox
from streamer.foundation.metrics import Metrics


@pytest.fixture
async def outbox(tmp_path: Path) -> AsyncIterator[Outbox]:
    box = await Outbox.open(tmp_path / "data" / "outbox.sqlite3", ["a", "b"], metrics=Metrics())
    try:
        yield box
    finally:
        await box.close()
