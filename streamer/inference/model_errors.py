"""Whether the model is failing: a run of frames it answered with errors, and its end.

A lone error only counts (metrics); :data:`MODEL_ERRORS_NOT_READY` in a row make the service
not ready (``/readyz`` names the model and its last error) and are logged once at WARNING,
then at most every :data:`MODEL_ERROR_LOG_EVERY_S` while the run lasts. An answer with
plates ends the run, unless its frame was sent before the run began (a long inference
answered late says nothing about the model now). Deadline errors are not the model's.
"""

from __future__ import annotations

import logging
import math
import time

LOG = logging.getLogger(__name__)

#: Consecutive frames the model answers with an error before the service is not ready.
MODEL_ERRORS_NOT_READY = 3
#: While the model keeps failing, its errors are logged at WARNING at most this often.
MODEL_ERROR_LOG_EVERY_S = 30.0
#: The length to which an error's first line is kept.
_ERROR_MAX = 300


class ModelErrors:
    """The current run of model errors of one model at one endpoint."""

    def __init__(self, model: str, url: str) -> None:
        self.model = model
        self.url = url
        #: Frames the model answered with an error since its last answer with plates.
        self.consecutive = 0
        #: The first line of its latest error.
        self.last: str | None = None
        self._logged_at = -math.inf
        self._since = -math.inf  # when the current run of errors began (monotonic)
        #: When (monotonic) the latest error came.
        self.last_at = -math.inf

    @property
    def failing(self) -> bool:
        """The model answered the last ``MODEL_ERRORS_NOT_READY`` frames with errors."""
        return self.consecutive >= MODEL_ERRORS_NOT_READY

    @property
    def failing_since(self) -> float | None:
        """When (monotonic) the current run of errors began, while the model is failing."""
        return self._since if self.failing else None

    def error(self, error: str) -> None:
        """Count a frame the model answered with ``error``."""
        if not self.consecutive:
            self._since = time.monotonic()
        self.consecutive += 1
        self.last = error.splitlines()[0][:_ERROR_MAX] if error else "error"
        self.last_at = time.monotonic()
        LOG.debug("model %s error: %s", self.model, self.last)
        now = time.monotonic()
        if self.failing and now - self._logged_at >= MODEL_ERROR_LOG_EVERY_S:
            self._logged_at = now
            LOG.warning(
                "model %s at %s answers errors (%d in a row): %s",
                self.model,
                self.url,
                self.consecutive,
                self.last,
            )

    def answered(self, sent_at: float) -> None:
        """A frame sent at ``sent_at`` (monotonic) was answered with plates."""
        if self.consecutive and sent_at < self._since:
            return  # sent before the errors began (a long inference answered late)
        if self.failing:
            LOG.warning(
                "model %s answers again, after %d frames with errors",
                self.model,
                self.consecutive,
            )
        self.consecutive = 0
        self._logged_at = -math.inf
