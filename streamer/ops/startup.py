"""Why the service cannot start, said in one line with what to do about it.

``Service.run`` raises :class:`StartupError` for what a user can fix (a port in use,
a model repository not built, an outbox that cannot be opened, a Triton that never
answers under ``--once``); the command line prints ``error: <message>`` and exits 1,
without a traceback (configuration and usage errors exit 2, see streamer/cli/main.py).
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import TYPE_CHECKING

from streamer.foundation.paths import BLS_MODEL

if TYPE_CHECKING:  # imported only where it is started (see streamer/inference/embedded/)
    from streamer.inference.embedded.errors import TritonStartError

#: The model every streamer request goes to; its config marks a built repository.
BLS_CONFIG = Path(BLS_MODEL) / "config.pbtxt"


class StartupError(Exception):
    """The service cannot start: one line, saying what to do."""


def listen_error(exc: OSError, host: str, port: int, key: str) -> StartupError:
    """A server that could not listen on ``host:port`` (the config key ``key``)."""
    if exc.errno == errno.EADDRINUSE:
        why = "the address is already in use (another process, or another copy of the service)"
    else:
        why = exc.strerror or str(exc)
    return StartupError(f"cannot listen on {host}:{port} ({key}): {why}")


def check_model_repository(
    repository: Path, otherwise: str = "set triton.url to a running Triton"
) -> None:
    """Raise :class:`StartupError` unless ``repository`` holds a built plate_recognition;
    ``otherwise``: what the caller can do instead of building it."""
    if not (repository / BLS_CONFIG).is_file():
        raise StartupError(
            f"the model repository {repository} is not built (no {BLS_CONFIG}): build it "
            f"with `make models` (or `python -m converters build --target cpu`), or {otherwise}"
        )


def triton_start_error(exc: TritonStartError) -> StartupError:
    """What went wrong and the first error line of Triton's log (the whole log was logged
    at DEBUG)."""
    detail = f": {exc.first_error[:300]}" if exc.first_error else ""
    return StartupError(
        f"the embedded Triton did not start: {exc.summary}{detail} "
        "(--log-level DEBUG shows its log)"
    )


def outbox_error(path: Path, exc: Exception) -> StartupError:
    return StartupError(
        f"cannot open the outbox {path}: {exc}. Fix it (permissions, disk space), or move it "
        "away to start with an empty one (the events it holds would then not be delivered)"
    )


def link_key_error(path: Path, exc: Exception) -> StartupError:
    return StartupError(
        f"cannot read or make the picture link key {path} (web.link_key_path): {exc}; or set "
        "web.link_secret"
    )


def installation_error(where: str, exc: Exception) -> StartupError:
    return StartupError(
        f"cannot read or make the installation id ({where}): {exc}; set mqtt.topic_prefix "
        "and mqtt.discovery.node_id without {installation}, or fix the file"
    )


def store_error(where: str, backend: str, exc: Exception) -> StartupError:
    if backend == "postgresql":
        return StartupError(
            f"cannot open the event history {where}: {exc}. Check that the server runs and "
            "takes storage.dsn (host, port, user, password, database), or set "
            "storage.enabled: false"
        )
    return StartupError(
        f"cannot open the event history {where}: {exc}. Fix it (permissions, disk space), move "
        "it away to start an empty history, or set storage.enabled: false"
    )
