"""streamer.inference.embedded.log: Triton's output at its own levels, and a failure explained."""

from __future__ import annotations

import io
import logging

import pytest

from streamer.inference.embedded.log import LOGGER_NAME, TAIL_LINES, ServerLog

OUTPUT = b"""\
W0101 12:00:00.000000 1 pinned_memory_manager.cc:273] Unable to allocate pinned system memory
I0101 12:00:00.100000 1 server.cc:674] loading: exploding_model:1
+------------------+---------+
E0101 12:00:01.000000 1 model_lifecycle.cc:641] failed to load 'exploding_model' version 1: boom
E0101 12:00:01.100000 1 server.cc:259] Failed to load all models
error: creating server: Internal - failed to load all models
E0101 12:00:02.000000 1 grpc_server.cc:2463] Socket '127.0.0.1:41234' already in use

"""


def _pumped(caplog: pytest.LogCaptureFixture) -> ServerLog:
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    log = ServerLog()
    log.pump(io.BytesIO(OUTPUT))
    return log


def test_each_line_is_logged_at_the_level_triton_gave_it(caplog: pytest.LogCaptureFixture) -> None:
    _pumped(caplog)
    levels = {r.getMessage().removeprefix("tritonserver: ")[:5]: r.levelno for r in caplog.records}
    assert levels["I0101"] == logging.INFO and levels["E0101"] == logging.ERROR
    assert levels["W0101"] == logging.DEBUG  # what a CPU-only machine always prints
    assert levels["error"] == logging.INFO  # not a Triton line
    assert all(r.name == LOGGER_NAME for r in caplog.records)
    assert len(caplog.records) == 7  # the empty line is dropped


def test_a_failure_is_explained_by_its_error_lines_and_the_tail(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = _pumped(caplog)
    first = log.first_error()
    assert first is not None and "failed to load 'exploding_model'" in first
    summary = log.failure_summary()
    errors, tail = summary.split("last log lines:\n")
    assert errors.splitlines() == ["errors:", *log.errors()]
    assert "pinned system memory" not in errors
    assert "+---" not in tail and "loading: exploding_model" in tail
    assert log.ports_in_use() == {41234}


def test_the_tail_is_bounded_and_cleared(caplog: pytest.LogCaptureFixture) -> None:
    log = ServerLog(keep=5)
    log.pump(io.BytesIO(b"".join(b"I0101 line %d\n" % i for i in range(TAIL_LINES))))
    assert log.tail() == [f"I0101 line {i}" for i in range(TAIL_LINES - 5, TAIL_LINES)]
    assert log.tail(2) == log.tail()[-2:]
    assert log.first_error() is None and "errors:" not in log.failure_summary()
    log.clear()
    assert log.tail() == []


def test_a_repeated_line_is_forwarded_once_per_window_and_counted(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failing model logs one line per request: forwarded once per window, the next one
    forwarded says how many were held back; other lines and non-Triton lines go through."""
    caplog.set_level(logging.DEBUG, logger=LOGGER_NAME)
    now = [100.0]
    monkeypatch.setattr("streamer.inference.embedded.log.time.monotonic", lambda: now[0])
    failed = "model.py:124] \"plate_recognition: request failed: Stub process 'lprnet_0_0'\""
    log = ServerLog(repeat_window_s=30.0)

    def pump(*lines: str) -> list[str]:
        caplog.clear()
        log.pump(io.BytesIO("".join(f"{line}\n" for line in lines).encode()))
        return [r.getMessage().removeprefix("tritonserver: ") for r in caplog.records]

    burst = [f"E1202 11:06:{i:02d}.000001 {5949 + i % 2} {failed}" for i in range(50)]
    other = "W1202 11:06:30.000000 5949 server.cc:1] something else"
    assert pump(*burst, other, "+----+", "+----+") == [burst[0], other, "+----+", "+----+"]
    now[0] += 31.0
    late = f"E1202 11:07:01.000000 5949 {failed}"
    assert pump(late) == [f"{late} (and 49 more like it)"]
    assert pump(late) == []  # within the new window
    assert len(log.tail(100)) == 55  # every line is kept for a failure's explanation
