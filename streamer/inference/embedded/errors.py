"""Why the embedded Triton did not start: :class:`TritonStartError`."""

from __future__ import annotations


class TritonStartError(RuntimeError):
    """The server could not be started or did not become ready in time.

    ``summary`` says what went wrong in one line. ``str(error)`` is that line, then, when the
    server ran, the error lines and the tail of its log. ``first_error`` is the first error
    line of that log (a model that failed to load is named there); None when the server
    printed none or never ran.
    """

    def __init__(self, summary: str, log: str = "", first_error: str | None = None) -> None:
        super().__init__(f"{summary}\n{log}" if log else summary)
        self.summary = summary
        self.first_error = first_error
