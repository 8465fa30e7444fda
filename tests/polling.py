"""Waiting on a running service from a test: its state, or its HTTP endpoints."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any


async def until(predicate: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds until ``predicate()`` holds; fails naming ``what`` after ``timeout_s``."""
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        await asyncio.sleep(0.2)
    return time.monotonic() - start


def until_value(check: Callable[[], Any], timeout_s: float, what: str) -> Any:
    """The first truthy ``check()``, polled from a thread that may block (a browser driver);
    fails naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def get_json(url: str) -> tuple[int, dict[str, Any]]:
    """Status and JSON body of a GET (error statuses included)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return int(response.status), json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def until_status(url: str, status: int, timeout_s: float) -> tuple[float, dict[str, Any]]:
    """Seconds until ``url`` answers ``status``, and its body. Asked from a thread: the
    service under test runs on the caller's event loop."""
    start = time.monotonic()
    while True:
        code, body = await asyncio.to_thread(get_json, url)
        if code == status:
            return time.monotonic() - start, body
        if time.monotonic() - start > timeout_s:
            raise AssertionError(f"{url} did not answer {status} within {timeout_s:.0f} s")
        await asyncio.sleep(0.2)


async def answering(service: Any, camera: str) -> str:
    """Wait until a running ``Service`` has its ops endpoint up and Triton has answered a
    frame of ``camera``; the URL of its ``/readyz``."""
    await until(lambda: service.ops is not None and bool(service.ops.port), 120, "the ops")
    await until(
        lambda: camera in service.cameras and service.cameras[camera].pipeline.stats.answered > 0,
        240,
        f"the first answers for {camera}",
    )
    return f"http://127.0.0.1:{service.ops.port}/readyz"
