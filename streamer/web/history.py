"""The events API: the history searched (streamer/store/), or the recent events without one.

* ``GET /api/events``: with a history, a search, newest first: ``plate`` (exact; with
  ``prefix=true`` its start; with ``fuzzy=true`` within one edit), ``camera``, ``after`` and
  ``before`` (first seen; ISO 8601 or Unix seconds), ``label`` (the known-plate list),
  ``alert`` (true or false), ``withheld`` (false, the default: the reported passes; true:
  the withheld ones, ``plate.withheld``; any: both), ``limit`` and ``cursor`` (the
  ``next_cursor`` of the page before: pages hold every event once, however many arrive while
  paging). Without a history: the recent events kept in memory, ``limit`` and ``cursor``; the
  same page either way (``limit``, ``next_cursor``, ``events``).
* ``GET /api/events/{id}``: one pass (withheld or not), its latest version and every version
  (``versions``).
* ``GET /api/events/{id}/crop.jpg`` and ``/frame.jpg``: the plate, the vehicle.
* ``GET /api/events.csv``: the same search (every page of it, up to :data:`CSV_MAX_ROWS`)
  as CSV, one row per pass, streamed.
* ``DELETE /api/events?plate=``: erase every trace of a plate; ``DELETE /api/events/{id}``:
  one pass (streamer/store/erasure.py); what was taken out, as JSON, never the plate.

Answers are shaped by the models of streamer/web/api_models.py (the OpenAPI document's).
While a service that keeps a history has not opened it yet (it opens after Triton, some
seconds after a start), every one of these answers 503 with ``Retry-After``: never an empty
search of a history that holds the plate, nor an erasure that misses it.

Events carry ``crop_url`` (and ``frame_url`` when the vehicle picture was kept).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import re
from datetime import UTC, datetime
from typing import Any

from aiohttp import web

from streamer.delivery.events import PlateEvent
from streamer.domain.picture_links import picture_urls
from streamer.store.base import (
    DEFAULT_LIMIT,
    MAX_LIMIT,
    CursorError,
    EventQuery,
    EventStore,
    StoredEvent,
)
from streamer.web.api_models import Erased, Event, EventDetail, EventPage, dump
from streamer.web.auth import same_origin
from streamer.web.errors import json_error
from streamer.web.view_source import ViewSource

#: Retry-After (seconds) while the history is not open yet.
HISTORY_RETRY_S = 2
#: The recent events (no history): a page, by default and at most.
RECENT_PAGE_DEFAULT = 50
RECENT_PAGE_MAX = 200
#: An event's message id: its UUID, with ``.v<version>`` for a correction.
EVENT_ID_PATTERN = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(\.v[0-9]{1,6})?$"
#: A plate searched or erased; a camera or label searched (the OpenAPI document's too).
PLATE_PATTERN = r"^[0-9A-Za-z -]{1,16}$"
NAME_PATTERN = r"^[0-9A-Za-z_.:-]{1,64}$"
EVENT_ID = re.compile(EVENT_ID_PATTERN)
_UINT = re.compile(r"^[0-9]{1,9}$")
_PLATE = re.compile(PLATE_PATTERN)
_NAME = re.compile(NAME_PATTERN)
_PICTURE_HEADERS = {"Cache-Control": "private, max-age=86400, immutable"}
#: Rows of one CSV export, at most (the newest; narrow the search for older ones).
CSV_MAX_ROWS = 100_000
CSV_COLUMNS = (
    "event_id", "version", "camera", "text", "confidence", "first_seen", "last_seen",
    "reads", "evidence", "reason", "label", "known_plate", "alert", "previous_text", "withheld",
)  # fmt: skip


class HistoryRoutes:
    """The handlers of the events API over a :class:`ViewSource`."""

    def __init__(self, view: ViewSource) -> None:
        self.view = view

    def history(self) -> EventStore | None:
        """The history, None when the service keeps none; a 503 while it is not open yet."""
        store = self.view.history()
        if store is None and self.view.keeps_history():
            raise json_error(
                web.HTTPServiceUnavailable,
                "the event history is not open yet (the service is starting)",
                **{"Retry-After": str(HISTORY_RETRY_S)},
            )
        return store

    def add_to(self, router: web.UrlDispatcher) -> None:
        router.add_get("/api/events", self.events)
        router.add_get("/api/events.csv", self.export)
        router.add_get("/api/events/{event_id}", self.event)
        router.add_get("/api/events/{event_id}/crop.jpg", self.crop)
        router.add_get("/api/events/{event_id}/frame.jpg", self.frame)
        router.add_delete("/api/events", self.erase_plate)
        router.add_delete("/api/events/{event_id}", self.erase_event)

    async def erase_plate(self, request: web.Request) -> web.Response:
        _refuse_other_origins(request)
        plate = request.query.get("plate", "")
        if not _PLATE.match(plate) or not any(ch.isalnum() for ch in plate):
            raise json_error(web.HTTPBadRequest, "plate: 1 to 16 letters, digits, spaces or dashes")
        self.history()
        erased = await self.view.erase(plate=plate, trigger="api")
        return web.json_response(dump(Erased, {"erased": erased}))

    async def erase_event(self, request: web.Request) -> web.Response:
        _refuse_other_origins(request)
        self.history()
        erased = await self.view.erase(event_id=_pass_id(request), trigger="api")
        if not any(erased.values()):
            raise json_error(web.HTTPNotFound, "no such event")
        return web.json_response(dump(Erased, {"erased": erased}))

    async def events(self, request: web.Request) -> web.Response:
        store = self.history()
        if store is None:
            return self._recent(request)
        query = parse_query(request)
        try:
            page = await store.search(query)
        except CursorError as exc:
            raise json_error(web.HTTPBadRequest, str(exc)) from None
        return web.json_response(
            dump(
                EventPage,
                {
                    "limit": query.limit,
                    "next_cursor": page.next_cursor,
                    "events": [stored_dict(e) for e in page.events],
                },
            )
        )

    async def export(self, request: web.Request) -> web.StreamResponse:
        """The search as CSV (see the module docstring), page by page from the history."""
        store = self.history()
        query = parse_query(request)
        if store is None:
            raise json_error(web.HTTPNotFound, "this service keeps no history to export")
        query = dataclasses.replace(query, limit=MAX_LIMIT, cursor=None)
        try:  # the first page before the answer starts: a bad search is still a 400
            page = await store.search(query)
        except CursorError as exc:
            raise json_error(web.HTTPBadRequest, str(exc)) from None
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/csv; charset=utf-8",
                "Content-Disposition": f'attachment; filename="lpr-events-{stamp}.csv"',
            }
        )
        await response.prepare(request)
        await response.write(_csv_rows([CSV_COLUMNS]))
        rows = 0
        while True:
            await response.write(_csv_rows(csv_row(e.payload) for e in page.events))
            rows += len(page.events)
            if page.next_cursor is None or rows >= CSV_MAX_ROWS:
                break
            page = await store.search(dataclasses.replace(query, cursor=page.next_cursor))
        await response.write_eof()
        return response

    def _recent(self, request: web.Request) -> web.Response:
        """A page of the recent events, in the search's shape: its cursor is where the next
        page starts (a count of newer events; they shift as new ones arrive)."""
        limit = int_param(request, "limit", RECENT_PAGE_DEFAULT, 1, RECENT_PAGE_MAX)
        cursor = request.query.get("cursor", "")
        if cursor and not _UINT.match(cursor):
            raise json_error(web.HTTPBadRequest, "cursor: the next_cursor of the page before")
        start = int(cursor or 0)
        events = self.view.recent_events()[::-1]  # newest first
        end = start + limit
        return web.json_response(
            dump(
                EventPage,
                {
                    "limit": limit,
                    "next_cursor": str(end) if end < len(events) else None,
                    "events": [event_dict(e) for e in events[start:end]],
                },
            )
        )

    async def event(self, request: web.Request) -> web.Response:
        event_id = _event_id(request)
        store = self.history()
        stored = await store.get(_pass_id(request)) if store is not None else None
        if stored is not None:
            detail = {**stored_dict(stored), "versions": stored.versions}
            return web.json_response(dump(EventDetail, detail))
        recent = self.view.event(event_id)
        if recent is None:
            raise json_error(web.HTTPNotFound, "no such event")
        return web.json_response(dump(EventDetail, event_dict(recent)))

    async def crop(self, request: web.Request) -> web.Response:
        event_id = _event_id(request)
        recent = self.view.event(event_id)
        if recent is not None:  # a correction's own crop, or no history
            return _jpeg(recent.crop_jpeg)
        store = self.history()
        jpeg = await store.crop(_pass_id(request)) if store is not None else None
        if jpeg is None:
            raise json_error(web.HTTPNotFound, "no such event")
        return _jpeg(jpeg)

    async def frame(self, request: web.Request) -> web.Response:
        event_id = _event_id(request)
        store = self.history()
        jpeg = await store.frame(_pass_id(request)) if store is not None else None
        if jpeg is None:
            recent = self.view.event(event_id)
            jpeg = recent.frame_jpeg if recent is not None else None
        if jpeg is None:
            raise json_error(web.HTTPNotFound, "no picture of this event's vehicle")
        return _jpeg(jpeg)


def _refuse_other_origins(request: web.Request) -> None:
    if not same_origin(request):
        raise json_error(web.HTTPForbidden, "a page of another origin may not erase events")


def _event_id(request: web.Request) -> str:
    event_id = request.match_info["event_id"]
    if not EVENT_ID.match(event_id):
        raise json_error(web.HTTPNotFound, "no such event")
    return event_id


def _pass_id(request: web.Request) -> str:
    """The pass of the route's message id (a correction's ``.v<N>`` left out)."""
    return _event_id(request).split(".v")[0]


def _jpeg(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="image/jpeg", headers=_PICTURE_HEADERS)


def event_dict(event: PlateEvent) -> dict[str, Any]:
    return {
        **event.to_dict(include_crop=False),
        **picture_urls("", event.message_id, None, frame=event.frame_jpeg is not None),
    }


def live_event(event: PlateEvent) -> Any:
    """A new message as the live updates send it (an :class:`Event`)."""
    return dump(Event, event_dict(event))


def stored_dict(stored: StoredEvent) -> dict[str, Any]:
    return {**stored.payload, **picture_urls("", stored.event_id, None, frame=stored.has_frame)}


def csv_row(payload: dict[str, Any]) -> list[Any]:
    match = payload.get("match") or {}
    return [
        payload.get("event_id"),
        payload.get("version"),
        payload.get("camera"),
        payload.get("text"),
        payload.get("confidence"),
        (payload.get("first_seen") or {}).get("utc"),
        (payload.get("last_seen") or {}).get("utc"),
        payload.get("reads"),
        payload.get("evidence"),
        payload.get("reason"),
        match.get("label", ""),
        match.get("plate", ""),
        "true" if payload.get("alert") else "false",
        payload.get("previous_text") or "",
        payload.get("withheld") or "",
    ]


def _csv_rows(rows: Any) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def parse_query(request: web.Request) -> EventQuery:
    """The search a request asks for; 400 (naming the parameter) for what cannot be one."""
    q = request.query
    plate = q.get("plate") or None
    if plate is not None and not _PLATE.match(plate):
        raise json_error(web.HTTPBadRequest, "plate: 1 to 16 letters, digits, spaces or dashes")
    for name in ("camera", "label"):
        if name in q and not _NAME.match(q[name]):
            raise json_error(web.HTTPBadRequest, f"{name}: not a {name} name")
    return EventQuery(
        plate=plate,
        prefix=bool_param(request, "prefix") or False,
        fuzzy=bool_param(request, "fuzzy") or False,
        camera=q.get("camera"),
        after=time_param(request, "after"),
        before=time_param(request, "before"),
        label=q.get("label"),
        alert=bool_param(request, "alert"),
        withheld=withheld_param(request),
        limit=int_param(request, "limit", DEFAULT_LIMIT, 1, MAX_LIMIT),
        cursor=q.get("cursor") or None,
    )


def int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name, "")
    if not raw:
        return default
    if not _UINT.match(raw) or not low <= int(raw) <= high:
        raise json_error(web.HTTPBadRequest, f"{name} must be an integer from {low} to {high}")
    return int(raw)


def bool_param(request: web.Request, name: str) -> bool | None:
    raw = request.query.get(name, "").lower()
    if not raw:
        return None
    if raw not in ("true", "false", "1", "0"):
        raise json_error(web.HTTPBadRequest, f"{name} must be true or false")
    return raw in ("true", "1")


def withheld_param(request: web.Request) -> bool | None:
    """``withheld``: false (or absent) the reported passes, true the withheld ones, any both."""
    raw = request.query.get("withheld", "").lower()
    if raw == "any":
        return None
    if raw not in ("", "true", "false", "1", "0"):
        raise json_error(web.HTTPBadRequest, "withheld must be true, false or any")
    return raw in ("true", "1")


def time_param(request: web.Request, name: str) -> float | None:
    """ISO 8601 (a time without a zone is UTC) or Unix seconds."""
    raw = request.query.get(name, "")
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        try:
            moment = datetime.fromisoformat(raw.replace("Z", "+00:00"))
        except ValueError:
            raise json_error(
                web.HTTPBadRequest,
                f"{name} must be ISO 8601 (2026-12-01T18:00:00Z) or Unix seconds",
            ) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        value = moment.timestamp()
    if not math.isfinite(value):
        raise json_error(web.HTTPBadRequest, f"{name} must be a finite time")
    return value
