"""streamer.inference.model_errors: when a run of model errors makes the service not ready."""

from __future__ import annotations

import logging
import time

import pytest

from streamer.inference.model_errors import MODEL_ERRORS_NOT_READY, ModelErrors


def _warnings(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    return [m for m in messages if text in m]


def test_a_run_of_errors_fails_the_model_is_logged_once_and_ends_with_an_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="streamer.inference.model_errors")
    errors = ModelErrors("plate_recognition", "127.0.0.1:8001")
    errors.error("RuntimeError: boom\nTraceback (most recent call last): ...")
    assert (errors.consecutive, errors.failing, errors.last) == (1, False, "RuntimeError: boom")
    for _ in range(MODEL_ERRORS_NOT_READY + 2):
        errors.error("RuntimeError: boom")
    assert errors.failing
    assert len(_warnings(caplog, "answers errors")) == 1

    errors.answered(time.monotonic())
    assert (errors.consecutive, errors.failing) == (0, False)
    (again,) = _warnings(caplog, "answers again")
    assert f"after {MODEL_ERRORS_NOT_READY + 3} frames" in again


def test_an_answer_to_a_frame_sent_before_the_errors_began_ends_nothing() -> None:
    errors = ModelErrors("plate_recognition", "127.0.0.1:8001")
    sent_earlier = time.monotonic()
    time.sleep(0.001)
    for _ in range(MODEL_ERRORS_NOT_READY):
        errors.error("boom")
    errors.answered(sent_earlier)
    assert errors.failing
    errors.answered(time.monotonic())
    assert not errors.failing


def test_an_empty_error_still_counts() -> None:
    errors = ModelErrors("plate_recognition", "127.0.0.1:8001")
    errors.error("")
    assert (errors.consecutive, errors.last) == (1, "error")


def test_failing_since_is_the_first_error_of_the_run_and_ends_with_it() -> None:
    errors = ModelErrors("plate_recognition", "triton:8001")
    begun = time.monotonic()
    errors.error("Stub process 'lprnet_0_0' is not healthy.")
    assert errors.failing_since is None  # one error: not failing yet
    time.sleep(0.05)
    for _ in range(MODEL_ERRORS_NOT_READY - 1):
        errors.error("Stub process 'lprnet_0_0' is not healthy.")
    since = errors.failing_since
    assert since is not None and begun <= since <= errors.last_at - 0.05
    errors.answered(time.monotonic())
    assert errors.failing_since is None
