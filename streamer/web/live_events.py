"""``GET /api/events/live``: new event messages as server-sent events, for the events page.

Each message (a new pass, or a correction of one) is sent as ``event: plate`` with the
:class:`~streamer.web.api_models.Event` as its ``data`` and its message id as ``id``; a
comment every :data:`PING_S` keeps proxies from closing a quiet stream (aiohttp-sse), and
finds a listener that has gone away (its stream ends then, with its watcher).

Nothing waits for a listener: the service hands each message to every listener's queue
(:data:`LISTENER_QUEUE` messages) without blocking; a listener that falls that far behind is
disconnected rather than slowing anyone, and its browser reconnects (EventSource does) and
reads the first page again. At most :data:`MAX_LISTENERS` at once (503 beyond); all of them
end when the server stops.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web
from aiohttp_sse import sse_response

from streamer.delivery.events import PlateEvent
from streamer.web.errors import json_error
from streamer.web.history import live_event
from streamer.web.view_source import ViewSource

#: Messages waiting for one listener; one more disconnects it.
LISTENER_QUEUE = 64
MAX_LISTENERS = 32
#: What a browser waits before it reconnects, in milliseconds.
RETRY_MS = 2000
#: Seconds between two keep-alive comments.
PING_S = 15.0


class LiveEvents:
    """The listeners of the live updates of ``view``."""

    def __init__(self, view: ViewSource, closing: asyncio.Event) -> None:
        self.view = view
        self.closing = closing
        self.listeners = 0

    async def stream(self, request: web.Request) -> web.StreamResponse:
        if self.closing.is_set():
            raise json_error(web.HTTPServiceUnavailable, "the server is stopping")
        if self.listeners >= MAX_LISTENERS:
            raise json_error(web.HTTPServiceUnavailable, "too many listeners to live updates")
        queue: asyncio.Queue[PlateEvent] = asyncio.Queue(LISTENER_QUEUE)
        behind = asyncio.Event()

        def take(event: PlateEvent) -> None:
            try:
                queue.put_nowait(event)
            except asyncio.QueueFull:  # this listener is dropped, not the message for others
                behind.set()

        self.listeners += 1
        unwatch = self.view.watch_events(take)
        try:
            async with sse_response(request, ping_interval=PING_S) as sse:
                await sse.send("", event="hello", retry=RETRY_MS)
                gone = asyncio.ensure_future(sse.wait())  # ends when a ping cannot be sent
                ends = (
                    asyncio.ensure_future(self.closing.wait()),
                    asyncio.ensure_future(behind.wait()),
                    gone,
                )
                try:
                    while not (self.closing.is_set() or behind.is_set() or gone.done()):
                        get = asyncio.ensure_future(queue.get())
                        await asyncio.wait({get, *ends}, return_when=asyncio.FIRST_COMPLETED)
                        if not get.done():
                            get.cancel()
                            break
                        event = get.result()
                        text = json.dumps(live_event(event), separators=(",", ":"))
                        await sse.send(text, event="plate", id=event.message_id)
                finally:
                    for end in ends:
                        end.cancel()
                    await asyncio.gather(*ends, return_exceptions=True)
                return sse
        finally:
            unwatch()
            self.listeners -= 1
