"""What ``/healthz`` and ``/readyz`` say: liveness and readiness, from the service's parts.

Liveness fails only when the process cannot make progress and will not recover by itself (a
supervised part in a crash loop): an orchestrator should restart it. Readiness fails while
no Triton endpoint is available (with several, one is enough: the others' cameras moved to
it), the embedded one restarts or the model answers errors; while the event log cannot
commit or its queue is full, a consumer of it lags past ``outbox.max_lag_s`` or reports a
problem, or an observer fails (``sinks``; ``consumers`` gives each one's backlog); while a
supervised part waits to restart; or when no camera delivers frames. Its body
gives the reason per part.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from streamer.delivery.consumers import Consumers
    from streamer.delivery.publisher import EventPublisher
    from streamer.foundation.supervisor import Supervisor
    from streamer.inference.embedded.watchdog import TritonWatchdog
    from streamer.inference.pool import TritonPool
    from streamer.pipeline.cameras import Camera

Report = tuple[bool, dict[str, object]]


def liveness(supervisor: Supervisor) -> Report:
    """Alive unless a supervised part is in a crash loop."""
    looping = supervisor.crash_looping()
    return not looping, ({"crash_loop": looping} if looping else {})


def triton_state(recognizer: TritonPool | None, watchdog: TritonWatchdog | None) -> str:
    """``ready``, ``restarting`` (the embedded server), ``model ... failing: ...`` or
    ``unavailable: <why>`` (the stream's last failure, e.g. the model is not ready)."""
    ready = recognizer is not None and recognizer.ready
    if watchdog is not None and watchdog.state == "restarting":
        return "restarting"
    if recognizer is not None and ready and recognizer.model_failing:
        return f"model {recognizer.model} failing: {recognizer.last_model_error}"
    if ready:
        return "ready"
    why = recognizer.problem if recognizer is not None else None
    return f"unavailable: {why}" if why else "unavailable"


def readiness(
    *,
    recognizer: TritonPool | None,
    watchdog: TritonWatchdog | None,
    supervisor: Supervisor,
    publisher: EventPublisher,
    consumers: Consumers | None,
    cameras: Iterable[Camera],
    config: dict[str, object] | None = None,
    leases: dict[str, object] | None = None,
) -> Report:
    """Ready when Triton answers, every sink is healthy, no part waits to restart and a
    camera delivers frames (see the module docstring). ``config`` (the reload state) is
    reported as it is and does not change readiness: a refused reload keeps the running
    config."""
    cameras = list(cameras)
    triton = triton_state(recognizer, watchdog)
    parts = {name: part.to_dict() for name, part in supervisor.parts.items()}
    parts_ok = all(part["state"] != "restarting" for part in parts.values())
    failing = dict(publisher.failing)
    if consumers is not None and not consumers.healthy:
        failing[consumers.name] = consumers.problem or "failing"
    by_camera = {
        c.config.name: {
            "state": c.source.stats.state,
            "url": c.config.redacted_url,
            "last_error": c.source.stats.last_error,
        }
        for c in cameras
    }
    # Files loop outside --once, so a running service always has a camera to deliver.
    delivering = sum(1 for c in cameras if c.source.stats.state == "connected")
    details: dict[str, object] = {
        "triton": triton,
        "triton_endpoints": recognizer.states() if recognizer is not None else {},
        "cameras_delivering": delivering,
        "sinks": failing if failing else "ok",
        "consumers": consumers.state() if consumers is not None else {},
        "cameras": by_camera,
        "parts": parts,
    }
    if config is not None:
        details["config"] = config
    if leases is not None:  # a camera another replica still runs waits here, for a while
        details["leases"] = leases
    leases_ok = leases is None or not leases.get("problems")
    ready = (
        triton == "ready"
        and not failing
        and parts_ok
        and leases_ok
        and (not cameras or delivering > 0)
    )
    return ready, details
