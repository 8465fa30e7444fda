"""A camera's health in words: measured rates against the configured one."""

from __future__ import annotations

from streamer.pipeline.camera_health import RateMeter, Rates, describe


def test_rates_are_measured_over_the_recent_window() -> None:
    meter = RateMeter(window_s=10.0, now=98.0)  # the camera starts, its counters at zero
    assert meter.read(0, 0, now=100.0) == Rates(0.0, 0.0)
    assert meter.read(20, 0, now=102.0) == Rates(5.0, 0.0)  # since the start
    meter = RateMeter(window_s=10.0, now=100.0)
    assert meter.read(0, 0, now=100.0) == Rates(0.0, 0.0)
    assert meter.read(10, 0, now=102.0) == Rates(5.0, 0.0)
    for t in range(103, 130):  # 2 answered and 1 dropped a second from here on
        rates = meter.read(10 + 2 * (t - 102), t - 102, now=float(t))
    assert 1.9 <= rates.answered_fps <= 2.1 and 0.9 <= rates.dropped_fps <= 1.1
    # A reader that comes back after a long time still gets the rate since its last reading.
    late = meter.read(64 + 600, 27, now=430.0)
    assert 1.9 <= late.answered_fps <= 2.1 and late.dropped_fps == 0.0


def test_health_says_what_a_user_can_act_on() -> None:
    fine = describe("connected", Rates(4.9, 0.0), 5.0, None)
    assert fine == "live: 4.9 of 5 frames/s answered"
    behind = describe("connected", Rates(2.0, 3.0), 5.0, None)
    assert "2.0 of 5" in behind and "3.0 frames/s dropped (inference is behind)" in behind
    assert "without motion" in describe("connected", Rates(0.5, 0.0), 5.0, None)
    assert describe("reconnecting", Rates(0, 0), 5.0, "connection refused") == (
        "reconnecting: connection refused"
    )
    assert describe("ended", Rates(0, 0), 5.0, None).startswith("ended")
