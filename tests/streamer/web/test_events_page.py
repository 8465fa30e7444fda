"""The events page in a real headless Chromium, on the running service: log in with the
token, search (fuzzy), open an event and the picture of its vehicle, log out; at 1600 px and
at 412 px; withheld passes shown apart, with their reason; with the screenshots kept in
test-output/test_events_page/."""

from __future__ import annotations

import time
from typing import Any

from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from converters.paths import PROJECT_ROOT
from tests.polling import until_value
from tests.streamer.web.running_service import TOKEN, RunningService
from tests.streamer.web.test_api import _withheld_event

ARTIFACTS = PROJECT_ROOT / "test-output" / "test_events_page"


def _texts(driver: Any, selector: str) -> list[str]:
    """The rendered text of every element ``selector`` matches, read in one script: the list
    can be drawn again between a lookup and a read (a stale element reference, seen in CI
    when the search's results replaced the first page)."""
    texts = driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText);",
        selector,
    )
    return [text.strip() for text in texts]


def _click(driver: Any, selector: str, timeout_s: float = 10) -> None:
    """Click the first element ``selector`` matches, looked up again if the list was drawn
    again in between (live events redraw it)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            driver.find_element(By.CSS_SELECTOR, selector).click()
            return
        except StaleElementReferenceException:
            assert time.monotonic() < deadline, f"{selector} kept being drawn again"
            time.sleep(0.1)


def _overflows(driver: Any) -> bool:
    return bool(
        driver.execute_script(
            "return document.documentElement.scrollWidth > window.innerWidth + 1;"
        )
    )


def test_log_in_search_open_an_event_and_log_out(running: RunningService, chromium: Any) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    chromium.set_window_size(1600, 1000)
    chromium.get(f"{running.base}/events")
    until_value(lambda: "/login" in chromium.current_url, 10, "the login page")
    chromium.find_element(By.ID, "token").send_keys("not the token")
    chromium.find_element(By.ID, "login").click()
    until_value(lambda: chromium.find_element(By.ID, "login-error").text, 10, "the refusal")
    chromium.find_element(By.ID, "token").clear()
    chromium.find_element(By.ID, "token").send_keys(TOKEN)
    chromium.find_element(By.ID, "login").click()
    until_value(lambda: chromium.current_url.endswith("/events"), 10, "the events page")
    assert TOKEN not in chromium.current_url
    # The cookie the browser holds is out of the scripts' reach.
    assert "lpr_session" not in chromium.execute_script("return document.cookie;")
    plates = until_value(lambda: _texts(chromium, "#results .event .plate"), 20, "the events")
    assert {"O567AM76", "Y836XH76"} <= set(plates)
    (alert,) = _texts(chromium, "#results .event.alert")
    assert "O567AM76" in alert and "staff" in alert
    health = until_value(lambda: " ".join(_texts(chromium, "#health li")), 10, "camera health")
    assert "yard" in health and "frames/s" in health
    chromium.save_screenshot(str(ARTIFACTS / "events_1600.png"))

    # A fuzzy search: one character short still finds the plate.
    box = chromium.find_element(By.ID, "search")
    box.send_keys("O567AM7")
    Select(chromium.find_element(By.ID, "mode")).select_by_value("fuzzy")
    chromium.find_element(By.ID, "search-button").click()
    until_value(
        lambda: _texts(chromium, "#results .event .plate") == ["O567AM76"],
        10,
        "the fuzzy search's one result",
    )
    assert "fuzzy=true" in chromium.current_url and "plate=O567AM7" in chromium.current_url

    # The event, and the picture of its vehicle.
    _click(chromium, "#results .event")
    detail = until_value(
        lambda: (
            chromium.find_element(By.ID, "detail").get_attribute("open") is not None
            and chromium.find_element(By.ID, "detail")
        ),
        10,
        "the event's detail",
    )
    width = until_value(
        lambda: chromium.execute_script(
            "const i = document.getElementById('detail-frame');"
            "return i && i.complete ? i.naturalWidth : 0;"
        ),
        10,
        "the vehicle's picture",
    )
    assert width > 100 and "O567AM76" in detail.text
    chromium.save_screenshot(str(ARTIFACTS / "event_detail_1600.png"))
    chromium.find_element(By.ID, "detail-close").click()
    until_value(
        lambda: chromium.find_element(By.ID, "detail").get_attribute("open") is None,
        5,
        "the detail to close",
    )

    # A phone's width: everything fits, nothing scrolls sideways.
    chromium.set_window_size(412, 900)
    chromium.get(f"{running.base}/events")
    until_value(lambda: _texts(chromium, "#results .event .plate"), 20, "the events at 412 px")
    assert not _overflows(chromium)
    chromium.save_screenshot(str(ARTIFACTS / "events_412.png"))
    chromium.get(f"{running.base}/")
    until_value(lambda: " ".join(_texts(chromium, "body")).count("yard"), 20, "the live view")
    assert not _overflows(chromium)
    chromium.save_screenshot(str(ARTIFACTS / "live_412.png"))

    logout = chromium.find_element(By.ID, "logout")
    assert logout.text == "Log out"
    logout.click()
    until_value(lambda: "/login" in chromium.current_url, 10, "the login page after logout")
    chromium.get(f"{running.base}/events")
    until_value(lambda: "/login" in chromium.current_url, 10, "no way back in without the token")
    severe = [
        entry
        for entry in chromium.get_log("browser")
        if entry["level"] == "SEVERE" and "401" not in entry["message"]
    ]
    assert severe == [], severe


def test_withheld_passes_are_shown_apart_with_their_reason(
    running: RunningService, chromium: Any
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    store = running.service.store
    assert store is not None
    event = _withheld_event()
    running.call(store.add(event))
    row = f'#results .event[data-event-id="{event.event_id}"]'
    try:
        chromium.set_window_size(1600, 1000)
        chromium.get(f"{running.base}/events?token={TOKEN}")
        plates = until_value(lambda: _texts(chromium, "#results .event .plate"), 20, "the events")
        assert "O567AM76" in plates and "B222BB22" not in plates  # by default: reported only
        assert _texts(chromium, "#results .event.withheld") == []

        Select(chromium.find_element(By.ID, "withheld")).select_by_value("true")
        until_value(lambda: _texts(chromium, row), 10, "the withheld pass")
        assert "withheld=true" in chromium.current_url
        shown = _texts(chromium, "#results .event")
        assert len(_texts(chromium, "#results .event.withheld")) == len(shown)
        assert "O567AM76" not in _texts(chromium, "#results .event .plate")
        (tag,) = _texts(chromium, f"{row} .withheld-badge")
        assert tag == "withheld: low confidence"
        chromium.save_screenshot(str(ARTIFACTS / "events_withheld_1600.png"))

        _click(chromium, row)
        until_value(
            lambda: (
                "withheld: low confidence" in chromium.find_element(By.ID, "detail").text
                and "not reported" in chromium.find_element(By.ID, "detail-fields").text
            ),
            10,
            "the withheld pass's detail",
        )
        chromium.find_element(By.ID, "detail-close").click()

        Select(chromium.find_element(By.ID, "withheld")).select_by_value("any")
        until_value(
            lambda: {"O567AM76", "B222BB22"} <= set(_texts(chromium, "#results .event .plate")),
            10,
            "both kinds of passes",
        )
        # Opened again from its URL: the same search, the filter shown.
        chromium.get(f"{running.base}/events?token={TOKEN}&withheld=true")
        until_value(lambda: _texts(chromium, row), 10, "the withheld pass from the URL")
        select = Select(chromium.find_element(By.ID, "withheld"))
        assert select.first_selected_option.text == "withheld"
        severe = [e for e in chromium.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == [], severe
    finally:
        running.call(store.erase(event_id=event.event_id))
