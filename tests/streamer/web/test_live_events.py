"""The events page's live updates: server-sent events of every new message, on a real server."""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest

from streamer.web import WebServer, live_events
from streamer.web.history import event_dict
from tests.streamer.web.clip_view import ClipView, web_url


async def _next_message(stream: aiohttp.StreamReader) -> dict[str, str]:
    """The next server-sent event's fields (comments, such as pings, skipped)."""
    fields: dict[str, str] = {}
    while True:
        line = (await asyncio.wait_for(stream.readline(), 10)).decode().rstrip("\r\n")
        if not line:
            if fields:
                return fields
            continue
        if line.startswith(":"):
            continue
        name, _, value = line.partition(": ")
        fields[name] = value


async def test_every_new_message_is_sent_as_it_comes(
    server: WebServer, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_events, "PING_S", 0.2)  # finds a listener gone sooner
    view = server.view
    assert isinstance(view, ClipView)
    async with http.get(web_url(server, "/api/events/live")) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/event-stream")
        assert (await _next_message(response.content))["event"] == "hello"
        assert server.live.listeners == 1 and len(view.watchers) == 1
        first, correction = view.recording.events[0], view.recording.events[1]
        view.publish(first)
        view.publish(correction)
        for event in (first, correction):
            message = await _next_message(response.content)
            assert message["event"] == "plate" and message["id"] == event.message_id
            sent = json.loads(message["data"])
            assert sent == json.loads(json.dumps(event_dict(event)))
            assert sent["crop_url"] == f"/api/events/{event.message_id}/crop.jpg"
    # The browser went away: its watcher is gone, nothing more is queued for it.
    for _ in range(100):
        if server.live.listeners == 0:
            break
        await asyncio.sleep(0.05)
    assert server.live.listeners == 0 and view.watchers == []


async def test_listeners_are_bounded_and_end_when_the_server_stops(
    server: WebServer, http: aiohttp.ClientSession, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(live_events, "MAX_LISTENERS", 1)
    async with http.get(web_url(server, "/api/events/live")) as first:
        await _next_message(first.content)
        async with http.get(web_url(server, "/api/events/live")) as second:
            assert second.status == 503
            assert second.headers["Content-Type"].startswith("application/problem+json")
        await asyncio.wait_for(server.stop(), 10)
        assert await asyncio.wait_for(first.content.read(), 10) == b""  # the stream ended
