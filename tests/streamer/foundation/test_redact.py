"""streamer.foundation.redact: the one rule for URLs and texts in logs, metrics, API and UI."""

from __future__ import annotations

import pytest

from streamer.foundation.redact import redact_text, redact_url, secrets_of


@pytest.mark.parametrize(
    ("url", "redacted"),
    [
        ("rtsp://user:secret@cam/stream", "rtsp://***:***@cam/stream"),
        ("rtsp://admin:secret@10.0.0.5:554/s1", "rtsp://***:***@10.0.0.5:554/s1"),
        ("rtsp://user@cam:554/stream", "rtsp://***@cam:554/stream"),
        ("rtsp://:secret@cam/stream", "rtsp://***:***@cam/stream"),
        ("rtsp://cam/stream", "rtsp://cam/stream"),
        (
            "https://cam/live.m3u8?channel=1&token=abc&api_key=k&Password=p",
            "https://cam/live.m3u8?channel=1&token=***&api_key=***&Password=***",
        ),
        ("rtsp://u:p@ss@cam/x?auth=1#frag", "rtsp://***:***@cam/x?auth=***#frag"),
        # An '@' after the authority: maybe a password with a '/' in it, so nothing is shown.
        ("rtsp://u:pa/ss@cam/x", "rtsp://***"),
        ("rtsp://u:p@ss@host/a@b", "rtsp://***"),
        ("rtsp://10.0.0.5/s1?user=a@b", "rtsp://***"),
        ("/data/clip.ts", "/data/clip.ts"),
        # Keys in the path or in a query value of an innocent name: masked, names kept.
        (
            "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/abcDEF123ghiJKL456mnoPQR",
            "https://hooks.slack.com/services/T0AAAAAAA/B0BBBBBBB/***",
        ),
        (
            "https://discord.com/api/webhooks/123456789012345678/" + "x" * 68,
            "https://discord.com/api/webhooks/123456789012345678/***",
        ),
        (
            "https://fn.example/api/hook?code=Zx81kLmQ0pRt7VbN3cYw&x=1",
            "https://fn.example/api/hook?code=***&x=1",
        ),
        (
            "rtsp://10.0.0.5:554/Streaming/Channels/101",
            "rtsp://10.0.0.5:554/Streaming/Channels/101",
        ),
        (
            "rtsp://cam/cam/realmonitor?channel=1&subtype=0",
            "rtsp://cam/cam/realmonitor?channel=1&subtype=0",
        ),
        ("https://cam/live/index.m3u8", "https://cam/live/index.m3u8"),
    ],
)
def test_redact_url(url: str, redacted: str) -> None:
    assert redact_url(url) == redacted


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rtsp://admin:hunter2@10.0.0.5/live", "rtsp://***:***@10.0.0.5/live"),
        ("open rtsps://u:p@cam:322/x failed", "open rtsps://***:***@cam:322/x failed"),
        ("'rtsp://u@cam/x': refused", "'rtsp://***@cam/x': refused"),
        (
            "http://cam/stream?user=a&password=s3cr3t&x=1",
            "http://cam/stream?user=a&password=***&x=1",
        ),
        ("https://h/hook?access_token=abc", "https://h/hook?access_token=***"),
        ("GET /x?sig=abc&n=1 failed", "GET /x?sig=***&n=1 failed"),
        ("rtsp://cam.local/live", "rtsp://cam.local/live"),
        (
            "POST https://h.example/hooks/abcDEF123ghiJKL456?code=Zx81kLmQ0pRt7VbN3cYw: 503",
            "POST https://h.example/hooks/***?code=***: 503",
        ),
        ("see /api/events/abc (a path, no URL)", "see /api/events/abc (a path, no URL)"),
    ],
)
def test_redact_text(text: str, expected: str) -> None:
    assert redact_text(text) == expected


def test_a_password_quoted_outside_its_url_is_masked_too() -> None:
    url = "rtsp://admin:p%40ss%2Fw0rd@cam/live"
    secrets = secrets_of(url)
    assert secrets == ["p%40ss%2Fw0rd", "p@ss/w0rd"]
    assert redact_text("auth failed for password p@ss/w0rd", secrets) == (
        "auth failed for password ***"
    )
    assert secrets_of("rtsp://admin:ab@cam/live") == []  # too short to search for in text
    assert secrets_of("rtsp://cam/live") == [] and secrets_of("/data/clip.ts") == []
