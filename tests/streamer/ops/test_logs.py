import json
import logging

import pytest

from streamer.ops.logs import JsonFormatter, RedactingFilter, scrub


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("rtsp://admin:hunter2@10.0.0.5/live", "rtsp://***:***@10.0.0.5/live"),
        ("open rtsps://u:p@cam:322/x failed", "open rtsps://***:***@cam:322/x failed"),
        (
            "http://cam/stream?user=a&password=s3cr3t&x=1",
            "http://cam/stream?user=a&password=***&x=1",
        ),
        ("https://h/hook?access_token=abc", "https://h/hook?access_token=***"),
        ("rtsp://cam.local/live", "rtsp://cam.local/live"),
    ],
)
def test_scrub(text: str, expected: str) -> None:
    assert scrub(text) == expected


def test_filter_scrubs_arguments_and_exceptions() -> None:
    record = logging.LogRecord(
        "x",
        logging.WARNING,
        __file__,
        1,
        "camera %s lost: %s",
        ("rtsp://a:topsecret@h/1", "x"),
        None,
    )
    try:
        raise ConnectionError("cannot open rtsp://a:topsecret@h/1")
    except ConnectionError as exc:
        record.exc_info = (type(exc), exc, exc.__traceback__)
    assert RedactingFilter().filter(record)
    line = json.loads(JsonFormatter().format(record))
    assert "topsecret" not in json.dumps(line)
    assert line["message"] == "camera rtsp://***:***@h/1 lost: x"
    # The traceback is kept, its secrets are not.
    assert line["error"].startswith("Traceback (most recent call last):")
    assert "test_filter_scrubs_arguments_and_exceptions" in line["error"]  # the stack
    assert line["error"].endswith("ConnectionError: cannot open rtsp://***:***@h/1")
