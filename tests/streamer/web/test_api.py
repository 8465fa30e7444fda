"""The API of the running service, as its users meet it: signed picture links in webhook
payloads, the login session, the CSV export, withheld passes searched apart, no answer from a
history that is not open yet, the OpenAPI document (validated; the service is fuzzed against
it in test_api_fuzz.py)."""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import http.cookiejar
import io
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from openapi_spec_validator import validate

from streamer.config import StorageConfig
from streamer.delivery.events import PlateEvent, build_event
from streamer.store.base import open_event_store
from streamer.web.openapi import document
from tests.plate_passes import a_pass
from tests.streamer.web.running_service import CLIP, TOKEN, RunningService, running_service
from tests.webhook_receiver import make_event

BEARER = {"Authorization": f"Bearer {TOKEN}"}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any) -> None:
        return None


def send(
    url: str,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    body: bytes | None = None,
    opener: urllib.request.OpenerDirector | None = None,
) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    opener = opener or urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=20) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_signed_picture_links_answer_without_the_token_until_they_expire(
    running: RunningService,
) -> None:
    payloads = {r.payload["text"]: r.payload for r in running.receiver.delivered()}
    event = payloads["O567AM76"]
    links = {k: event[k] for k in ("crop_url", "frame_url")}
    assert all(url.startswith("https://lpr.example.com/api/events/") for url in links.values())
    assert TOKEN not in json.dumps(event)
    local = {
        k: running.base + url.removeprefix("https://lpr.example.com") for k, url in links.items()
    }
    for kind, url in local.items():  # no token: the link is the permission
        status, headers, body = send(url)
        assert status == 200 and headers["Content-Type"] == "image/jpeg", (kind, status, body)
        picture = cv2.imdecode(np.frombuffer(body, np.uint8), cv2.IMREAD_COLOR)
        assert picture is not None
    # Tampered with: another picture, a later expiry, another signature.
    crop = local["crop_url"]
    other = payloads["Y836XH76"]["event_id"]
    expires = crop.split("expires=")[1].split("&")[0]
    for url in (
        crop.replace(event["event_id"], other),
        crop.replace(f"expires={expires}", f"expires={int(expires) + 3600}"),
        crop[:-2] + ("AA" if not crop.endswith("AA") else "BB"),
    ):
        status, headers, body = send(url)
        assert status == 403 and headers["Content-Type"].startswith("application/problem+json")
        assert json.loads(body)["detail"] == "this picture link is not valid"
    status, _, _ = send(crop.split("?")[0])  # the plain path still needs the token
    assert status == 401
    while time.time() < int(expires) + 0.2:
        time.sleep(0.2)
    status, _, body = send(crop)
    assert status == 403 and json.loads(body)["detail"] == "this picture link has expired"


def test_login_exchanges_the_token_for_a_session_cookie(running: RunningService) -> None:
    base = running.base
    status, headers, _ = send(f"{base}/events?plate=O567AM76")
    assert status == 303 and headers["Location"].startswith("/login?next=")
    status, _, body = send(f"{base}/login")
    assert status == 200 and b"<form" in body
    status, _, body = send(f"{base}/api/session")  # open to all: what the login page asks
    assert status == 200 and json.loads(body) == {"login": True, "authenticated": False}
    login = json.dumps({"token": TOKEN}).encode()
    json_type = {"Content-Type": "application/json"}
    status, _, body = send(
        f"{base}/api/session", "POST", json_type, json.dumps({"token": "wrong"}).encode()
    )
    assert status == 401 and json.loads(body)["detail"] == "this is not the token"
    status, _, _ = send(
        f"{base}/api/session", "POST", {**json_type, "Origin": "https://evil.example"}, login
    )
    assert status == 403
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(_NoRedirect, urllib.request.HTTPCookieProcessor(jar))
    status, headers, _ = send(f"{base}/api/session", "POST", json_type, login, browser)
    assert status == 204
    cookie = headers["Set-Cookie"]
    assert "lpr_session=" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
    assert TOKEN not in cookie
    status, _, body = send(f"{base}/api/events?plate=O567AM76", opener=browser)
    assert status == 200 and json.loads(body)["events"][0]["text"] == "O567AM76"
    status, _, body = send(f"{base}/api/session", opener=browser)
    assert status == 200 and json.loads(body) == {"login": True, "authenticated": True}
    status, _, _ = send(f"{base}/events", opener=browser)
    assert status == 200
    status, _, _ = send(f"{base}/api/session", "DELETE", opener=browser)
    assert status == 204
    # The old cookie, sent again by hand, opens nothing: the session ended on the server.
    value = cookie.split("lpr_session=")[1].split(";")[0]
    status, _, _ = send(f"{base}/api/events", headers={"Cookie": f"lpr_session={value}"})
    assert status == 401


def test_csv_export_holds_every_event_of_the_search(running: RunningService) -> None:
    status, _, body = send(f"{running.base}/api/events?camera=yard&limit=500", headers=BEARER)
    events = json.loads(body)["events"]
    status, headers, body = send(f"{running.base}/api/events.csv?camera=yard", headers=BEARER)
    assert status == 200 and headers["Content-Type"].startswith("text/csv")
    assert "attachment" in headers["Content-Disposition"]
    rows = list(csv.DictReader(io.StringIO(body.decode())))
    assert [r["event_id"] for r in rows] == [e["event_id"] for e in events] and len(rows) >= 2
    staff = next(r for r in rows if r["text"] == "O567AM76")
    assert staff["label"] == "staff" and staff["alert"] == "true"
    status, _, body = send(f"{running.base}/api/events.csv?label=staff&alert=false", headers=BEARER)
    assert status == 200 and len(body.decode().splitlines()) == 1  # the header only
    status, _, _ = send(f"{running.base}/api/events.csv?after=soon", headers=BEARER)
    assert status == 400


def _withheld_event() -> PlateEvent:
    """A withheld pass of now (within the history's retention), of a plate not in the clip."""
    base = a_pass()
    seen = dataclasses.replace(base.first_seen, camera="yard", wall_time=time.time())
    plate_pass = dataclasses.replace(
        base,
        camera="yard",
        text="B222BB22",
        candidates=[("B222BB22", 0.4), ("8222BB22", 0.35)],
        confidence=0.4,
        event_id=str(uuid.uuid4()),
        first_seen=seen,
        withheld="low_confidence",
    )
    return asyncio.run(build_event(plate_pass, 80, 320))


def test_withheld_passes_are_searched_apart_shown_and_erased(running: RunningService) -> None:
    store = running.service.store
    assert store is not None
    event = _withheld_event()
    running.call(store.add(event))  # as the history consumer keeps one
    base = f"{running.base}/api/events"

    def ids(query: str) -> list[str]:
        status, _, body = send(f"{base}?limit=500{query}", headers=BEARER)
        assert status == 200, body[:300]
        return [e["event_id"] for e in json.loads(body)["events"]]

    try:
        reported = ids("")
        assert event.event_id not in reported and len(reported) >= 2  # by default: reported
        assert ids("&withheld=false") == reported
        assert event.event_id in ids("&withheld=true")
        assert event.event_id not in ids("&withheld=true&camera=gate")
        both = ids("&withheld=any")
        assert event.event_id in both and set(reported) <= set(both)
        status, _, body = send(f"{base}?withheld=true&plate=B222BB2&fuzzy=true", headers=BEARER)
        (found,) = json.loads(body)["events"]
        assert found["type"] == "plate.withheld" and found["withheld"] == "low_confidence"
        assert found["crop_url"].endswith(f"/{event.event_id}/crop.jpg") and found["frame_url"]
        for bad in ("maybe", "yes", "2"):
            status, headers, body = send(f"{base}?withheld={bad}", headers=BEARER)
            assert status == 400 and headers["Content-Type"].startswith("application/problem")
            assert json.loads(body)["detail"] == "withheld must be true, false or any"
        # One withheld pass, as any, with its versions and pictures.
        status, _, body = send(f"{base}/{event.event_id}", headers=BEARER)
        assert status == 200, body[:300]
        detail = json.loads(body)
        assert (detail["type"], detail["withheld"], detail["text"]) == (
            "plate.withheld",
            "low_confidence",
            "B222BB22",
        )
        assert [(v["type"], v["withheld"]) for v in detail["versions"]] == [
            ("plate.withheld", "low_confidence")
        ]
        status, headers, body = send(running.base + detail["frame_url"], headers=BEARER)
        assert (
            status == 200 and headers["Content-Type"] == "image/jpeg" and body == event.frame_jpeg
        )
        # The CSV export: the same search, with the reason.
        status, _, body = send(f"{base}.csv?withheld=true&plate=B222BB22", headers=BEARER)
        (row,) = list(csv.DictReader(io.StringIO(body.decode())))
        assert row["event_id"] == event.event_id and row["withheld"] == "low_confidence"
        status, _, body = send(f"{base}.csv?plate=B222BB22", headers=BEARER)
        assert status == 200 and len(body.decode().splitlines()) == 1  # the header only
        status, _, _ = send(f"{base}.csv?withheld=sometimes", headers=BEARER)
        assert status == 400
    finally:
        # Erased as any pass (which leaves the shared service as it was).
        status, _, body = send(f"{base}/{event.event_id}", "DELETE", headers=BEARER)
    assert status == 200 and json.loads(body)["erased"]["history"] == 1, body
    status, _, _ = send(f"{base}/{event.event_id}", headers=BEARER)
    assert status == 404
    assert event.event_id not in ids("&withheld=any")


def test_the_openapi_document_is_valid_and_generated_from_the_models(
    running: RunningService,
) -> None:
    status, headers, body = send(f"{running.base}/api/openapi.json", headers=BEARER)
    assert status == 200 and headers["Content-Type"].startswith("application/json")
    spec = json.loads(body)
    validate(spec)  # openapi-spec-validator: raises on an invalid document
    assert spec["openapi"] == "3.1.0" and spec == document(spec["info"]["version"])
    schemas = spec["components"]["schemas"]
    assert {"Event", "EventPage", "EventDetail", "Camera", "Problem"} <= set(schemas)
    assert "plate.withheld" in schemas["EventVersion"]["properties"]["type"]["enum"]
    search = {p["name"]: p for p in spec["paths"]["/api/events"]["get"]["parameters"]}
    assert search["withheld"]["schema"]["enum"] == ["true", "false", "any"]
    # The answers are what the document says: an event of the API has the Event's fields.
    status, _, body = send(f"{running.base}/api/events?limit=1", headers=BEARER)
    (event,) = json.loads(body)["events"]
    assert set(schemas["Event"]["required"]) <= set(event) <= set(schemas["Event"]["properties"])


def test_the_events_api_answers_503_until_the_history_is_open(tmp_path: Path) -> None:
    """Right after a start, while the history is not open yet (it opens once Triton is ready,
    or once waiting for it gives up: here Triton is down), a search answers 503 with
    Retry-After, never an empty page of a history that holds the plate; then the stored
    event. An erasure is refused the same way, so it cannot miss the history."""
    history = tmp_path / "history.db"
    stored = make_event("yard")

    async def keep() -> None:
        store = await open_event_store(StorageConfig(path=history))
        try:
            await store.add(stored)
        finally:
            await store.close()

    asyncio.run(keep())
    with socket.socket() as probe:  # a port nothing listens on: Triton is down
        probe.bind(("127.0.0.1", 0))
        down = probe.getsockname()[1]
    config = (
        f"cameras:\n  - {{name: yard, url: '{CLIP}', sample_fps: 1}}\n"
        f"triton: {{url: '127.0.0.1:{down}', connect_timeout_s: 4}}\n"
        f"storage: {{path: '{history}'}}\n"
        "events: {stdout: false}\nmetrics: {enabled: false}\n"
        f"web: {{port: 0, token: {TOKEN}}}\n"
    )
    search = f"/api/events?plate={stored.text}"
    with running_service(tmp_path / "service.yaml", config, "unused-secret") as running:
        status, headers, body = send(running.base + search, headers=BEARER)
        assert status == 503, body
        assert headers["Content-Type"].startswith("application/problem+json")
        assert int(headers["Retry-After"]) >= 1
        assert "not open yet" in json.loads(body)["detail"]
        erase = send(running.base + search, "DELETE", BEARER)
        assert erase[0] == 503
        deadline = time.monotonic() + 60
        while (answer := send(running.base + search, headers=BEARER))[0] == 503:
            assert time.monotonic() < deadline, "the history never opened"
            time.sleep(0.5)
        status, _, body = answer
        assert status == 200, body
        assert [e["event_id"] for e in json.loads(body)["events"]] == [stored.event_id]
