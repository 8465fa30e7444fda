"""The web view behind a real reverse proxy (Debian's nginx on loopback): without a token it
refuses what the proxy relays; with one, the events page works through it, and the login
page does not send the browser off-site whatever ``next=`` says."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
from selenium.webdriver.common.by import By

from streamer.web import WebServer
from tests.nginx_proxy import nginx_proxy
from tests.polling import until_value
from tests.streamer.web.clip_view import web_url
from tests.streamer.web.running_service import TOKEN, RunningService


async def test_without_a_token_nothing_is_answered_through_a_proxy(
    server: WebServer, http: aiohttp.ClientSession, tmp_path: Path
) -> None:
    with nginx_proxy(server.port, tmp_path / "nginx") as port:
        for path in ("/api/cameras", "/api/events", "/", "/events"):
            async with http.get(f"http://127.0.0.1:{port}{path}") as response:
                assert response.status == 403, path
                assert response.content_type == "application/problem+json"
                assert "web.token" in (await response.json())["detail"]
        async with http.post(f"http://127.0.0.1:{port}/api/reload") as response:
            assert response.status == 403
    # A local client straight to the server is answered as before.
    async with http.get(web_url(server, "/api/cameras")) as response:
        assert response.status == 200


def _log_in(chromium: Any) -> None:
    until_value(lambda: "/login" in chromium.current_url, 10, "the login page")
    chromium.find_element(By.ID, "token").send_keys(TOKEN)
    chromium.find_element(By.ID, "login").click()


def _plates(chromium: Any) -> list[str]:
    return [e.text.strip() for e in chromium.find_elements(By.CSS_SELECTOR, "#results .plate")]


def test_with_a_token_the_events_page_works_through_a_proxy(
    running: RunningService, chromium: Any, tmp_path: Path
) -> None:
    upstream = int(running.base.rsplit(":", 1)[1])
    with nginx_proxy(upstream, tmp_path / "nginx") as port:
        proxy = f"http://127.0.0.1:{port}"
        chromium.get(f"{proxy}/events")
        _log_in(chromium)
        until_value(lambda: chromium.current_url == f"{proxy}/events", 10, "the events page")
        plates = until_value(lambda: _plates(chromium), 20, "the events through the proxy")
        assert {"O567AM76", "Y836XH76"} <= set(plates)
        access = (tmp_path / "nginx" / "access.log").read_text()
        assert "GET /api/events" in access  # the page's data came through the proxy

        # next= names another site, as browsers read it (a tab dropped, then "//"): the
        # login goes to this site's events page instead.
        for hostile in ("/%09/evil.example", "//evil.example", "/%5Cevil.example"):
            chromium.delete_all_cookies()
            chromium.get(f"{proxy}/login?next={hostile}")
            _log_in(chromium)
            until_value(
                lambda: chromium.current_url == f"{proxy}/events", 10, f"/events, {hostile}"
            )
        # A path of this site is where it goes.
        chromium.delete_all_cookies()
        chromium.get(f"{proxy}/login?next=/events%3Fplate%3DO567AM76")
        _log_in(chromium)
        until_value(
            lambda: chromium.current_url == f"{proxy}/events?plate=O567AM76", 10, "next= kept"
        )
