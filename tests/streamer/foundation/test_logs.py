import json
import logging

from streamer.foundation.logs import JsonFormatter, RedactingFilter


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
