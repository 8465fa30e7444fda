"""Several Triton endpoints behind one client: each camera's frames go to one endpoint.

A gRPC stream pins to one server, so balancing is done here, on the client (as behind a
Kubernetes Service): one stream per endpoint (:class:`PlateRecognizer`, with its own fair
scheduler and adaptive window: overload is handled per endpoint), and each camera assigned
to an endpoint by weighted rendezvous hashing (``streamer/inference/balancing.py``), the
weights being each endpoint's measured capacity and its health.

An endpoint is healthy while its stream is open, its server and model answer the readiness
check (``health_interval_s``, each within ``health_timeout_s``) and the model does not
answer errors. The moment it is not, its cameras move to the healthy ones: the frames it
holds fail at once (counted, never sent again: no frame is answered twice) and the cameras'
next frames go to their new endpoint. Back, it gets its cameras again gradually (see
:class:`EndpointShare`). With no healthy endpoint at all, each camera keeps its endpoint and
its frames wait there for the stream or their deadline, as with a single endpoint.

Endpoints are ``triton.urls`` (or ``url``); a host name with several addresses (a headless
Service) is one endpoint per address, and is resolved again every ``resolve_interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import fields
from typing import TYPE_CHECKING

from tritonclient.grpc import KeepAliveOptions

from streamer.config import TritonConfig
from streamer.domain.frames import Frame, PlateReading
from streamer.inference.balancing import EndpointShare, pick
from streamer.inference.client import InferenceError, InferenceStats, PlateRecognizer
from streamer.inference.endpoints import Endpoint, expand
from streamer.inference.scheduler import Permit, scheduler_for

if TYPE_CHECKING:
    from streamer.foundation.supervisor import Supervisor

LOG = logging.getLogger(__name__)

#: How often health verdicts and assignments are brought up to date (a broken stream is
#: noticed within this).
_TICK_S = 0.2
#: Capacities are measured again this often; a change under a third is not applied.
_CAPACITY_EVERY_S = 10.0
_CAPACITY_HYSTERESIS = 0.3


class TritonPool:
    """The inference client of the service: ``acquire`` and ``recognise`` as one endpoint's
    :class:`PlateRecognizer`, over every endpoint."""

    def __init__(self, config: TritonConfig, urls: Sequence[str]) -> None:
        if not urls:
            raise ValueError("TritonPool: at least one endpoint is needed")
        self.config = config
        self.model = config.model
        self.configured = tuple(urls)
        self.keepalive = KeepAliveOptions(
            keepalive_time_ms=int(config.keepalive_time_s * 1000),
            keepalive_timeout_ms=int(config.keepalive_timeout_s * 1000),
            keepalive_permit_without_calls=True,
            http2_max_pings_without_data=0,
        )
        self.endpoints: dict[str, Endpoint] = {}
        #: Called with each answer's time at Triton, any endpoint.
        self.latency_observers: list[Callable[[float], None]] = []
        self.moves = {"failover": 0, "rebalance": 0}
        self._weights: dict[str, float] = {}  # camera weights (cameras[].weight)
        self._assigned: dict[str, str] = {}  # camera -> endpoint url
        self._changed = asyncio.Event()  # set (and replaced) when an assignment changes
        self._supervisor: Supervisor | None = None
        self._task: asyncio.Task[None] | None = None
        self._capacity_at = 0.0

    # -- what the service and its pipelines use ---------------------------------------------

    @property
    def ready(self) -> bool:
        """True while the stream to at least one endpoint is open."""
        return any(e.client.ready for e in self.endpoints.values())

    @property
    def model_failing(self) -> bool:
        """Every endpoint with an open stream answers the model's errors."""
        open_ = [e for e in self.endpoints.values() if e.client.ready]
        return bool(open_) and all(e.client.model_failing for e in open_)

    @property
    def last_model_error(self) -> str | None:
        for endpoint in self.endpoints.values():
            if endpoint.client.model_failing:
                return endpoint.client.last_model_error
        return None

    @property
    def problem(self) -> str | None:
        """Why no stream is open: the endpoint's reason (each endpoint's, named, with several)."""
        if self.ready:
            return None
        if len(self.endpoints) == 1:
            return next(iter(self.endpoints.values())).client.problem
        return "; ".join(f"{e.url}: {e.client.problem}" for e in self.endpoints.values())

    @property
    def stats(self) -> InferenceStats:
        """The endpoints' stats, summed."""
        total = InferenceStats()
        for endpoint in self.endpoints.values():
            for field in fields(InferenceStats):
                name = field.name
                setattr(total, name, getattr(total, name) + getattr(endpoint.client.stats, name))
        return total

    @property
    def at_triton(self) -> int:
        return sum(e.client.at_triton for e in self.endpoints.values())

    @property
    def window_limit(self) -> int:
        """Frames allowed at the endpoints at once (their windows, summed)."""
        return sum(e.client.scheduler.window.limit for e in self.endpoints.values())

    @property
    def in_flight(self) -> int:
        return sum(e.client.scheduler.in_flight for e in self.endpoints.values())

    @property
    def waiting(self) -> int:
        return sum(e.client.scheduler.waiting for e in self.endpoints.values())

    def endpoint_of(self, camera: str) -> str | None:
        """The endpoint ``camera``'s next frame goes to."""
        return self._assigned.get(camera)

    def cameras_of(self, url: str) -> list[str]:
        return sorted(c for c, u in self._assigned.items() if u == url)

    def set_weight(self, camera: str, weight: float) -> None:
        self._weights[camera] = weight
        for endpoint in self.endpoints.values():
            endpoint.client.set_weight(camera, weight)
        self._assign(time.monotonic())

    def forget(self, camera: str) -> None:
        self._weights.pop(camera, None)
        self._assigned.pop(camera, None)
        for endpoint in self.endpoints.values():
            endpoint.client.forget(camera)

    def held(self, camera: str) -> int:
        return sum(e.client.held(camera) for e in self.endpoints.values())

    def endpoint_of_permit(self, permit: Permit) -> Endpoint | None:
        """The endpoint whose scheduler granted ``permit`` (None: removed since)."""
        return next(
            (e for e in self.endpoints.values() if e.client.scheduler is permit.scheduler), None
        )

    async def acquire(self, camera: str) -> Permit:
        """Wait for ``camera``'s turn at its endpoint; if the camera moves meanwhile, at the
        new one."""
        if camera not in self._assigned:
            self._weights.setdefault(camera, 1.0)
            self._assign(time.monotonic())
            if camera not in self._assigned:
                raise InferenceError("no Triton endpoint (not started?)", "stream")
        if len(self.endpoints) == 1:
            return await next(iter(self.endpoints.values())).client.acquire(camera)
        while True:
            url = self._assigned[camera]
            endpoint = self.endpoints[url]
            changed = self._changed
            waiter = asyncio.ensure_future(endpoint.client.acquire(camera))
            wake = asyncio.ensure_future(changed.wait())
            try:
                await asyncio.wait({waiter, wake}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                wake.cancel()
                if not waiter.done():
                    waiter.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await waiter  # the scheduler hands on a permit granted meanwhile
            if waiter.cancelled():
                continue
            permit = waiter.result()
            if self._assigned.get(camera) == url:
                return permit
            permit.release()  # granted as the camera moved: take the new endpoint's turn

    async def recognise(
        self, frame: Frame, permit: Permit | None = None
    ) -> tuple[PlateReading, ...]:
        """The plates of ``frame``, from the endpoint whose permit it holds."""
        if permit is None:
            permit = await self.acquire(frame.camera)
        endpoint = self.endpoint_of_permit(permit)
        if endpoint is None or (not endpoint.ok and self._healthy_other(endpoint)):
            permit.release()
            where = endpoint.url if endpoint is not None else "a removed endpoint"
            raise InferenceError(f"Triton at {where} failed before the frame was sent", "stream")
        return await endpoint.client.recognise(frame, permit)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self, supervisor: Supervisor | None = None) -> None:
        """Resolve the endpoints, open their streams (the parts ``inference:<endpoint>``)
        and start balancing (the part ``inference``)."""
        self._supervisor = supervisor
        if not self.endpoints:
            for url in await self._wanted():
                await self._start_endpoint(self._add(url, ramp=False))
            self._assign(time.monotonic())
        if self._task is None:
            if supervisor is not None:
                self._task = supervisor.start("inference", self._run)
            else:
                self._task = asyncio.create_task(self._run(), name="triton-balance")

    async def wait_ready(self, timeout_s: float) -> None:
        """Until one endpoint's stream is open; TimeoutError after ``timeout_s``."""
        waiters = [
            asyncio.ensure_future(e.client.wait_ready(timeout_s)) for e in self.endpoints.values()
        ]
        try:
            await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
            await asyncio.gather(*waiters, return_exceptions=True)
        if not self.ready:
            raise TimeoutError(f"no Triton endpoint ready within {timeout_s:g} s")

    async def close(self) -> None:
        """Stop balancing and every stream; frames still waiting fail. Idempotent."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        for url in list(self.endpoints):
            await self._remove(url)

    # -- balancing --------------------------------------------------------------------------

    @staticmethod
    def _part(url: str) -> str:
        return f"inference:{url}"

    def _add(self, url: str, *, ramp: bool) -> Endpoint:
        config = self.config
        client = PlateRecognizer(
            url,
            config.model,
            scheduler=scheduler_for(config),
            request_timeout_s=config.request_timeout_s,
            connect_timeout_s=config.connect_timeout_s,
            keepalive=self.keepalive,
        )
        client.latency_observers = self.latency_observers  # one list for every endpoint
        for camera, weight in self._weights.items():
            client.set_weight(camera, weight)
        share = EndpointShare(config.recover_after_s, config.rebalance_s, ramp=ramp)
        endpoint = self.endpoints[url] = Endpoint(url, client, share)
        return endpoint

    async def _start_endpoint(self, endpoint: Endpoint) -> None:
        await endpoint.client.start(self._supervisor, self._part(endpoint.url))

    async def _remove(self, url: str) -> None:
        endpoint = self.endpoints.pop(url)
        await endpoint.client.close()
        if self._supervisor is not None:
            await self._supervisor.remove(self._part(url))
        await endpoint.close_checker()

    async def _run(self) -> None:
        async with asyncio.TaskGroup() as group:
            group.create_task(self._check_loop())
            group.create_task(self._resolve_loop())
            while True:
                self._update(time.monotonic())
                await asyncio.sleep(_TICK_S)

    async def _check_loop(self) -> None:
        while True:
            await asyncio.gather(*(self._check(e) for e in list(self.endpoints.values())))
            await asyncio.sleep(self.config.health_interval_s)

    async def _check(self, endpoint: Endpoint) -> None:
        await endpoint.check(self.model, self.config.health_timeout_s, self.keepalive)
        if endpoint.exiting and endpoint.client.ready:
            # A Triton shutting down answers no new frame and cannot exit while our stream is
            # open: close it, whether or not another endpoint takes its cameras. The client's
            # reconnect asks whether the model is ready first, which a draining Triton refuses,
            # so no stream opens again until a new server is up on that address.
            LOG.warning("Triton endpoint %s is shutting down: closing its stream", endpoint.url)
            endpoint.client.abandon(f"Triton at {endpoint.url} is shutting down")

    async def _resolve_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.resolve_interval_s)
            await self._resolve()

    async def _resolve(self) -> None:
        """Add the endpoints DNS now gives, remove those it no longer gives."""
        wanted = await self._wanted()
        if set(wanted) == set(self.endpoints):
            return
        for url in wanted:
            if url not in self.endpoints:
                LOG.info("Triton endpoint %s added (DNS)", url)
                await self._start_endpoint(self._add(url, ramp=True))
        for url in [u for u in self.endpoints if u not in wanted]:
            LOG.info("Triton endpoint %s removed (DNS): its cameras move", url)
            await self._remove(url)
        self._assign(time.monotonic())

    async def _wanted(self) -> list[str]:
        wanted: list[str] = []
        for url in self.configured:
            for address in await expand(url, timeout_s=self.config.connect_timeout_s):
                if address not in wanted:
                    wanted.append(address)
        return wanted

    def _update(self, now: float) -> None:
        for endpoint in self.endpoints.values():
            if endpoint.share.observe(endpoint.ok, now):
                self._health_changed(endpoint)
        if now - self._capacity_at >= _CAPACITY_EVERY_S:
            self._capacity_at = now
            self._measure_capacity()
        self._assign(now)

    def _health_changed(self, endpoint: Endpoint) -> None:
        cameras = self.cameras_of(endpoint.url)
        if endpoint.share.healthy:
            if endpoint.share.failures:
                LOG.info(
                    "Triton endpoint %s healthy again: cameras return after %g s, over %g s",
                    endpoint.url,
                    endpoint.share.hold_s,
                    endpoint.share.rebalance_s,
                )
            return
        others = self._healthy_other(endpoint)
        # A lone endpoint's failure is logged by its stream or its model errors already.
        log = LOG.warning if len(self.endpoints) > 1 else LOG.debug
        log(
            "Triton endpoint %s failed (%s); %s",
            endpoint.url,
            endpoint.problem,
            f"its {len(cameras)} camera(s) move to the others"
            if others
            else "no other endpoint is healthy: its cameras wait for it",
        )
        if others:
            endpoint.client.abandon(f"Triton at {endpoint.url} failed; its cameras moved")

    def _healthy_other(self, endpoint: Endpoint) -> bool:
        return any(e is not endpoint and e.ok for e in self.endpoints.values())

    def _measure_capacity(self) -> None:
        measured = {url: e.measured_capacity() for url, e in self.endpoints.items()}
        known = [c for c in measured.values() if c]
        if not known:
            return
        median = statistics.median(known)
        for url, capacity in measured.items():
            if not capacity:
                continue
            relative = min(4.0, max(0.25, capacity / median))
            endpoint = self.endpoints[url]
            if abs(relative / endpoint.capacity - 1) > _CAPACITY_HYSTERESIS:
                LOG.debug("endpoint %s capacity %.2f -> %.2f", url, endpoint.capacity, relative)
                endpoint.capacity = relative

    def _endpoint_weights(self, now: float) -> dict[str, float]:
        weights = {u: e.share.share(now) * e.capacity for u, e in self.endpoints.items()}
        if any(w > 0 for w in weights.values()):
            return weights
        return {url: 1.0 for url in self.endpoints}  # none healthy: every camera keeps waiting

    def _assign(self, now: float) -> None:
        weights = self._endpoint_weights(now)
        moved = False
        for camera in self._weights:
            url = pick(camera, weights)
            before = self._assigned.get(camera)
            if url is None or url == before:
                continue
            self._assigned[camera] = url
            if before is None:
                continue
            moved = True
            old = self.endpoints.get(before)
            reason = "rebalance" if old is not None and old.share.healthy else "failover"
            self.moves[reason] += 1
            if old is not None and reason == "failover":
                old.moved_off += 1
            LOG.info("camera %s moves from Triton %s to %s (%s)", camera, before, url, reason)
        if moved:
            self._changed.set()
            self._changed = asyncio.Event()

    def states(self, now: float | None = None) -> dict[str, dict[str, object]]:
        """Each endpoint's state, cameras and problem (``/readyz``)."""
        now = time.monotonic() if now is None else now
        return {
            url: {
                "state": e.share.state(now),
                "cameras": len(self.cameras_of(url)),
                "problem": e.problem,
            }
            for url, e in self.endpoints.items()
        }
