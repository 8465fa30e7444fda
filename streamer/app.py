"""The composition root: the service's parts, wired, started, reloaded and stopped.

Start order: the ops and web servers -> Triton (embedded unless a URL is configured) ->
the inference stream -> the history, the event log and its consumers, the events publisher
-> cameras. Stop order is the reverse: cameras stop decoding, their pipelines finish the
frames in flight (within ``FRAMES_GRACE_S``) and flush their trackers, events reach the log
(and the consumers in this process catch up, ``LOCAL_CATCH_UP_S``; with ``--once`` every
consumer), then the stream, then Triton. One frame's way: ingest/source.py (decode,
sample, motion gate) -> ingest/frame_queue.py -> pipeline/camera.py -> inference/client.py
(Triton) -> tracking/passes.py (tracker, evidence, vote) -> delivery/publisher.py,
delivery/events.py (committed to the event log: delivery/outbox.py) ->
delivery/consumers.py, each consumer reading the log at its own pace:
store/history_delivery.py, delivery/jsonl_delivery.py, delivery/webhook_delivery.py,
delivery/mqtt_delivery.py.

Every long-lived part runs supervised (streamer/foundation/supervisor.py): a part that
crashes is logged with its traceback and restarted with backoff; an embedded Triton that
dies is restarted on the same ports (streamer/inference/embedded/watchdog.py). ``/readyz``
(streamer/ops/health.py) and the ``lpr_part_*`` metrics say which part is down. SIGHUP,
``POST /api/reload`` and, with ``reload.watch``, a change of the config file reload it
without a restart (streamer/ops/reload.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from prometheus_client.core import Metric

from streamer.config import Settings
from streamer.delivery.consumer_config import deliverers_of, log_targets
from streamer.delivery.consumers import CATCH_UP_TIMEOUT_S, Consumers, Progress
from streamer.delivery.deliverer import Deliverer
from streamer.delivery.events import EventSink, PlateEvent
from streamer.delivery.outbox import Outbox, OutboxError, OutboxInUseError
from streamer.delivery.publisher import EventPublisher
from streamer.domain.cameras import CameraStatus, Snapshot
from streamer.domain.picture_links import PictureLinks, open_links
from streamer.domain.plate_pass import PlatePass
from streamer.foundation.build_info import ModelBuild, read_model_build
from streamer.foundation.metrics import Metrics
from streamer.foundation.shards import Shard
from streamer.foundation.supervisor import Supervisor
from streamer.inference.model_errors import ModelErrors
from streamer.inference.pool import TritonPool
from streamer.ops import health, service_metrics
from streamer.ops.reload import Plan, Reloader
from streamer.ops.server import OpsServer
from streamer.ops.startup import (
    StartupError,
    check_model_repository,
    installation_error,
    link_key_error,
    listen_error,
    outbox_error,
    store_error,
    triton_start_error,
)
from streamer.pipeline.camera import OnFate, OnResult
from streamer.pipeline.cameras import Cameras
from streamer.pipeline.lease_gate import LeaseGate
from streamer.pipeline.leases import CameraLeases, holder_id
from streamer.store import erasure
from streamer.store.base import EventStore, StoreError, describe_store, open_event_store
from streamer.store.history_delivery import HistoryDeliverer
from streamer.store.installation import installation_id
from streamer.store.pooling import PoolingProxyError
from streamer.store.retention import keep_within_retention
from streamer.web import WebServer

if TYPE_CHECKING:  # imported when it starts: a service with a Triton URL never loads it
    from streamer.inference.embedded.server import EmbeddedTriton
    from streamer.inference.embedded.watchdog import TritonWatchdog

LOG = logging.getLogger(__name__)

#: At shutdown (SIGTERM: target 5 s in all), how long the frames in flight may take...
FRAMES_GRACE_S = 1.5
#: ...the queued events to be committed to the event log (normally milliseconds)...
DRAIN_TIMEOUT_S = 15.0
#: ...and the embedded Triton to exit before its process group is killed.
TRITON_STOP_S = 2.0
#: At a stop (not ``--once``), how long the consumers in this process (history, stdout, the
#: file) may take to catch up with what the drain committed (the remote ones go on at the
#: next start).
LOCAL_CATCH_UP_S = 2.0
#: The longest a stop can take, every step to its bound: what a supervisor's stop timeout
#: (compose stop_grace_period, systemd TimeoutStopSec, Kubernetes
#: terminationGracePeriodSeconds) must exceed, or it kills the service mid-drain.
WORST_CASE_STOP_S = FRAMES_GRACE_S + DRAIN_TIMEOUT_S + TRITON_STOP_S + LOCAL_CATCH_UP_S
#: ``--once``'s exit code when a consumer has events left (pending or dead letters).
EXIT_EVENTS_LEFT = 3
#: Signals that stop the service, and the one that reloads its config.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
RELOAD_SIGNAL = signal.SIGHUP


class Service:
    def __init__(
        self,
        settings: Settings,
        *,
        once: bool = False,
        config_path: Path | None = None,
        extra_sinks: Sequence[EventSink] = (),
        on_result: OnResult | None = None,
        on_fate: OnFate | None = None,
        shard: Shard | None = None,
        drain_timeout_s: float = CATCH_UP_TIMEOUT_S,
    ) -> None:
        """``config_path``: the file ``settings`` came from, read again on reload (without
        it, reload is refused). ``extra_sinks``: in-process observers given every event once
        it is committed; ``on_result`` sees every frame's reads, in order per camera;
        ``on_fate`` how every track ended (``python -m streamer replay`` uses all three).
        ``shard``: this replica of several runs only the cameras it holds
        (streamer/foundation/shards.py; default: every camera); given (``--shard``, ``0/1``
        too), the replica takes camera leases on a PostgreSQL history.
        ``drain_timeout_s``: with ``once``, how long the consumers may take to catch up."""
        self.settings = settings
        self.shard = shard or Shard()
        #: One of several replicas (``--shard`` given): camera leases on a PostgreSQL history.
        self.replica = shard is not None
        self.once = once
        self.drain_timeout_s = drain_timeout_s
        #: With ``once``: what each consumer did and has left, once the cameras ended.
        self.progress: dict[str, Progress] | None = None
        self.config_path = config_path
        self.triton: EmbeddedTriton | None = None
        self.watchdog: TritonWatchdog | None = None
        #: The build of the repository the embedded Triton serves (its ``build_info.json``).
        self.model_build: ModelBuild | None = None
        self.supervisor = Supervisor()
        self.recognizer: TritonPool | None = None
        self.log: Outbox | None = None  # the durable event log (None: no consumer)
        self.consumers: Consumers | None = None  # who reads it: history, files, targets
        self.store: EventStore | None = None  # the event history (storage:)
        self._history: Deliverer | None = None  # the history's consumer
        #: This installation's id, made or read at start (streamer/store/installation.py).
        self.installation: str | None = None
        self.extra_sinks = tuple(extra_sinks)
        self.metrics = Metrics()
        self.metrics.add_collector(self._collect_state)
        self.publisher = EventPublisher(
            self.metrics,
            jpeg_quality=settings.events.crop_jpeg_quality,
            queue_max_bytes=settings.outbox.queue_max_mb * 2**20,
        )
        self.recent = self.publisher.recent
        self.cameras = Cameras(
            self.supervisor,
            self.metrics,
            self._publish,
            self.publisher.submit,
            once=once,
            on_result=on_result,
            on_fate=on_fate,
        )
        self.ops: OpsServer | None = None
        self.web: WebServer | None = None
        #: Signs and checks the picture links of webhook and MQTT payloads (made at start).
        self.links: PictureLinks | None = None
        self._stop = asyncio.Event()
        self._ended = False  # --once: every camera played to its end
        self.reloader = Reloader(self, config_path, self.metrics)
        #: Starts a sharded replica's cameras once it holds their leases (made at start).
        self.lease_gate = LeaseGate(self.cameras, None, FRAMES_GRACE_S)

    def request_stop(self) -> None:
        self._stop.set()

    def request_reload(self) -> None:
        """Reload the config file soon (SIGHUP); the ``config`` part does it."""
        self.reloader.request()

    async def run(self) -> int:
        """Run until stopped (or, with ``once``, until every camera has ended).

        Returns 0; with ``once``, after a line per camera and one per consumer on stderr,
        1 when a camera never delivered a frame or Triton never answered one, else
        :data:`EXIT_EVENTS_LEFT` when a consumer still had events pending after
        ``drain_timeout_s`` or dead-lettered some. Raises :class:`StartupError` when a part
        cannot start."""
        loop = asyncio.get_running_loop()
        handlers = [(s, self.request_stop) for s in STOP_SIGNALS]
        handlers.append((RELOAD_SIGNAL, self.request_reload))
        for signum, handler in handlers:
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(signum, handler)
        try:
            # SIGTERM during start-up (Triton loading its models, say) stops it there.
            start = asyncio.create_task(self._start(), name="start")
            stopped = asyncio.create_task(self._stop.wait(), name="stop-during-start")
            await asyncio.wait({start, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
            if not start.done():
                LOG.info("stopping during start-up")
                start.cancel()
            await asyncio.gather(stopped, return_exceptions=True)
            try:
                await start
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise  # the service itself is cancelled, not only its start
            else:
                await self._wait()
        finally:
            await self._shutdown()
            for signum, _ in handlers:
                with contextlib.suppress(NotImplementedError, RuntimeError):
                    loop.remove_signal_handler(signum)
        if not self.once:
            return 0
        code = self.cameras.summary(self.publisher.by_camera, sys.stderr)
        left = self._consumer_summary(sys.stderr)
        return code or (EXIT_EVENTS_LEFT if left else 0)

    def _consumer_summary(self, out: TextIO) -> bool:
        """``--once``: a line per consumer (delivered, left) to ``out``; whether any has
        events left (pending, or dead letters of this run)."""
        left = False
        for name, progress in (self.progress or {}).items():
            line = f"consumer {name}: {progress.delivered} delivered"
            if progress.dead:
                line += f", {progress.dead} dead letter(s) (`deadletters list`)"
            if progress.pending:
                line += (
                    f", {progress.pending} left after {self.drain_timeout_s:g} s (kept in "
                    f"{self.settings.outbox.path}: delivered at the next start)"
                )
            left = left or bool(progress.dead or progress.pending)
            print(line, file=out, flush=True)
        if self.progress is None and self.consumers is not None:
            print("consumers: not waited for (the run was stopped)", file=out, flush=True)
        return left

    async def _start(self) -> None:
        """Start every part; raises :class:`StartupError` (one line) for what a user can fix."""
        metrics, web = self.settings.metrics, self.settings.web
        if metrics.enabled:
            self.ops = OpsServer(self.metrics.registry, self.readiness, self.liveness)
            try:
                await self.ops.start(metrics.host, metrics.port)
            except OSError as exc:
                raise listen_error(exc, metrics.host, metrics.port, "metrics.port") from None
        secret = web.link_secret.get_secret_value() if web.link_secret is not None else None
        try:
            self.links = await open_links(secret, web.link_key_path, web.link_ttl_s)
        except (OSError, ValueError) as exc:
            raise link_key_error(web.link_key_path, exc) from None
        if web.enabled:
            self.web = WebServer(self, web, links=self.links)
            try:
                await self.web.start()
            except OSError as exc:
                raise listen_error(exc, web.host, web.port, "web.port") from None
        triton = self.settings.triton
        urls = triton.endpoints or (await self._start_embedded_triton(),)
        self.recognizer = TritonPool(triton, urls)
        await self.recognizer.start(self.supervisor)
        try:
            await self.recognizer.wait_ready(triton.connect_timeout_s + 5)
        except TimeoutError:
            # Keep running: the stream reconnects in the background, /readyz says
            # not ready, and frames fail (counted) until Triton answers.
            LOG.warning("Triton at %s is not ready yet; starting anyway, retrying", ", ".join(urls))

        storage = self.settings.storage
        if storage.enabled:
            try:
                self.store = await open_event_store(storage)
            except PoolingProxyError as exc:  # its own advice: not "check the server runs"
                raise StartupError(f"cannot use the event history: {exc}") from None
            except StoreError as exc:
                raise store_error(describe_store(storage), storage.backend, exc) from None
            self._history = HistoryDeliverer(self.store, self.metrics)
            self.publisher.frame_max_width = storage.frame_max_width
            store = self.store
            self.supervisor.start("history", lambda: keep_within_retention(store, storage))
        await self._find_installation()
        await self._open_log(self._deliverers(self.settings))
        self.publisher.observers = list(self.extra_sinks)
        self.supervisor.start("events", self.publisher.run)

        self.cameras.recognizer = self.recognizer
        leases = None
        if storage.enabled and storage.backend == "postgresql":
            assert storage.dsn is not None  # (the schema requires it for postgresql)
            leases = CameraLeases(
                storage.dsn.get_secret_value(),
                describe_store(storage),
                storage.lease_ttl_s,
                holder=holder_id(self.settings.outbox.path),
            )
        self.lease_gate = LeaseGate(self.cameras, leases, FRAMES_GRACE_S, leased=self.replica)
        self.publisher.fence = self.lease_gate
        for config in self.settings.enabled_cameras:
            if self.shard.holds(config.name):
                self.lease_gate.start(config, self.settings)
        if leases is not None:
            self.supervisor.start("leases", self.lease_gate.run)
        held = f" (shard {self.shard} of the config's cameras)" if self.shard.sharded else ""
        LOG.info(
            "running %d camera(s)%s: %s%s",
            len(self.cameras),
            held,
            ", ".join(self.cameras.running),
            f"; {len(self.lease_gate.waiting)} more once their leases are taken"
            if self.lease_gate.leased
            else "",
        )
        for name, server in (("ops", self.ops), ("web", self.web)):
            if server is not None and server.listener is not None:
                self.supervisor.start(name, server.listener.keep_serving)
        if not self.once:
            self.supervisor.start("config", self.reloader.run)

    async def _start_embedded_triton(self) -> str:
        """Start the embedded CPU Triton and its watchdog; its gRPC URL."""
        from streamer.inference.embedded.errors import TritonStartError
        from streamer.inference.embedded.server import EmbeddedTriton
        from streamer.inference.embedded.watchdog import TritonWatchdog

        triton = self.settings.triton
        repository = triton.model_repository
        check_model_repository(repository)
        self.model_build = await asyncio.to_thread(read_model_build, repository)
        LOG.info("no Triton URL configured: starting an embedded CPU Triton on %s", repository)
        self.triton = EmbeddedTriton(
            repository, startup_timeout_s=triton.embedded_startup_timeout_s
        )
        try:
            await self.triton.astart()
        except TritonStartError as exc:
            LOG.debug("the embedded Triton did not start: %s", exc)
            raise triton_start_error(exc) from None
        url = self.triton.grpc_url
        self.watchdog = TritonWatchdog(self.triton, model_errors=lambda: self._model_errors_at(url))
        self.supervisor.start("triton", self.watchdog.watch)
        return self.triton.grpc_url

    def _model_errors_at(self, url: str) -> ModelErrors | None:
        """The model's errors at the Triton endpoint ``url`` (None before the pool exists)."""
        endpoint = self.recognizer.endpoints.get(url) if self.recognizer is not None else None
        return endpoint.client.model_errors if endpoint is not None else None

    async def _find_installation(self) -> None:
        """The installation's id (streamer/store/installation.py), that fills in the MQTT
        topics' ``{installation}``."""
        folder = self.settings.outbox.path.parent
        try:
            self.installation = await installation_id(self.store, folder)
        except (OSError, ValueError, StoreError) as exc:
            where = describe_store(self.settings.storage) if self.store else str(folder)
            raise installation_error(where, exc) from None
        LOG.info("installation %s", self.installation)

    def _deliverers(self, settings: Settings) -> list[Deliverer]:
        """The consumers of ``settings`` (the history's is the service's)."""
        return deliverers_of(
            settings, self.metrics, history=self._history, **self._delivery_options()
        )

    async def _open_log(self, deliverers: list[Deliverer]) -> None:
        """Open the event log (as its one owner) and start its consumers; none: no log."""
        if not deliverers:
            return
        path = self.settings.outbox.path
        try:
            log = await Outbox.open(
                path, [d.name for d in deliverers], metrics=self.metrics, owner=True
            )
        except OutboxInUseError as exc:
            raise StartupError(str(exc)) from None
        except OutboxError as exc:
            raise outbox_error(path, exc) from None
        consumers = Consumers(
            log, deliverers, self.metrics, self.settings.outbox, supervisor=self.supervisor
        )
        self.log, self.consumers = log, consumers
        log_targets(deliverers)
        await consumers.start()
        self.publisher.log = consumers

    async def _publish(self, passes: list[PlatePass]) -> None:
        # Waits only while the event queue is full (the log cannot commit): backpressure.
        await self.publisher.publish(passes)

    # -- reload (streamer/ops/reload.py) ---------------------------------------------------

    async def reload(self, trigger: str) -> dict[str, Any]:
        """Read the config file again and apply what changed (streamer/ops/reload.py)."""
        return await self.reloader.reload(trigger)

    async def apply_reload(self, change: Plan) -> None:
        """Make the running service what ``change`` says (its settings are then taken)."""
        removed = change.removed + [c.name for c in change.changed]
        await self.cameras.stop(removed, grace_s=FRAMES_GRACE_S)
        await self.lease_gate.stopped(removed)
        self.publisher.jpeg_quality = change.settings.events.crop_jpeg_quality
        if change.rules_changed:
            self.cameras.reconfigure(change.settings)
        configured = [c.name for c in change.settings.enabled_cameras]
        held = [name for name in configured if self.shard.holds(name)]
        if self.consumers is not None:  # before a replacement: the running ones know the old
            await self.consumers.cameras_changed(held, configured, change.settings.camera_areas)
        if change.delivery_changed:
            deliverers = self._deliverers(change.settings)
            if self.consumers is None:
                await self._open_log(deliverers)
            elif deliverers:
                await self.consumers.replace(deliverers)
        for config in change.changed + change.added:
            self.lease_gate.start(config, change.settings)

    def _delivery_options(self) -> dict[str, Any]:
        """What the outbox sink needs of the service: picture links to sign, whether the
        history keeps the vehicles' pictures, the cameras it runs and the installation's id
        (its MQTT topics)."""
        return {
            "links": self.links,
            "frames": self.settings.storage.enabled,
            "shard": self.shard,
            "installation": self.installation,
            "camera_status": self.camera_status,
        }

    @property
    def events_emitted(self) -> int:
        """Passes reported (version 1)."""
        return self.publisher.emitted

    @property
    def updates_emitted(self) -> int:
        """Corrections reported (plate.updated)."""
        return self.publisher.updates

    # -- ViewSource (streamer/web/view_source.py): what the web view reads ---------------------

    def camera_status(self) -> list[CameraStatus]:
        return self.cameras.status()

    def snapshot(self, camera: str) -> Snapshot | None:
        return self.cameras.snapshot(camera)

    def recent_events(self) -> list[PlateEvent]:
        return self.recent.latest()

    def event(self, event_id: str) -> PlateEvent | None:
        return self.recent.find(event_id)

    def watch_events(self, watcher: Callable[[PlateEvent], None]) -> Callable[[], None]:
        return self.recent.watch(watcher)

    def labels(self) -> list[str]:
        return self.settings.known_plate_labels()

    def history(self) -> EventStore | None:
        return self.store

    def keeps_history(self) -> bool:
        return self.settings.storage.enabled

    def shards(self) -> dict[str, Any]:
        names = [c.name for c in self.settings.enabled_cameras]
        return {"shard": str(self.shard), "cameras": self.shard.map(names)}

    async def erase(
        self, *, plate: str | None = None, event_id: str | None = None, trigger: str
    ) -> dict[str, int]:
        """Every trace of ``plate`` (or the pass ``event_id``) out (streamer/store/erasure.py)."""
        erased = await erasure.erase(
            plate=plate,
            event_id=event_id,
            store=self.store,
            outbox=self.log,
            recent=self.recent,
            trigger=trigger,
            retained=self.consumers,
            publisher=self.publisher,
            open_passes=self.cameras.erase,
        )
        return erased.to_dict()

    # -- health and metrics (streamer/ops/health.py, streamer/ops/service_metrics.py) -------

    def liveness(self) -> health.Report:
        return health.liveness(self.supervisor)

    def readiness(self) -> health.Report:
        return health.readiness(
            recognizer=self.recognizer,
            watchdog=self.watchdog,
            supervisor=self.supervisor,
            publisher=self.publisher,
            consumers=self.consumers,
            cameras=self.cameras.values(),
            config=self.reloader.state(),
            leases=self.lease_gate.state(),
        )

    def _collect_state(self) -> list[Metric]:
        return [
            *service_metrics.camera_metrics(self.cameras.values(), self.recognizer),
            *service_metrics.part_metrics(self.supervisor, self.watchdog),
            *service_metrics.inference_metrics(self.recognizer),
            service_metrics.shard_metric(self.shard, list(self.cameras.running)),
            *service_metrics.lease_metrics(self.lease_gate),
            service_metrics.build_info(
                self.recognizer.endpoints.values() if self.recognizer else (), self.model_build
            ),
        ]

    # -- stop --------------------------------------------------------------------------------

    async def _wait(self) -> None:
        stop = asyncio.create_task(self._stop.wait(), name="stop-signal")
        pending: set[asyncio.Future[None]] = {c.task for c in self.cameras.values() if c.task}
        try:
            if not self.once:
                pending = set()
            while not self._stop.is_set():
                done, _ = await asyncio.wait({stop, *pending}, return_when=asyncio.FIRST_COMPLETED)
                pending -= done
                if self.once and not pending:
                    LOG.info("every camera has ended (--once)")
                    self._ended = True
                    return
        finally:
            stop.cancel()
            await asyncio.gather(stop, return_exceptions=True)

    async def _shutdown(self) -> None:
        """Idempotent; every task cancelled or finished and awaited."""
        await self.supervisor.stop("config")  # no reload while the parts stop
        await self.supervisor.stop("web")  # a server stopped on purpose is not listened again
        if self.web is not None:  # viewers let go before the cameras stop
            await self.web.stop()
        # Each pipeline sees the end of its queue, finishes its frames in flight and flushes
        # its tracker; frames Triton has not answered within the grace are given up, and the
        # open passes are flushed all the same. The cameras stay listed: their counts are
        # the --once summary.
        await self.supervisor.stop("leases")  # no camera starts now
        await self.cameras.stop(grace_s=FRAMES_GRACE_S, forget=False)
        await self.lease_gate.close()  # stopped: another replica may run them
        if self.supervisor.task("events") is not None:  # the flushed passes reach the log
            await self.publisher.drain(DRAIN_TIMEOUT_S)
        await self.supervisor.stop("events")  # (what is left was logged by the drain)
        with contextlib.suppress(OutboxError):  # (logged by the outbox; nothing to wait for)
            if self.consumers is not None and self._ended:
                LOG.info("waiting up to %g s for every consumer to catch up", self.drain_timeout_s)
                self.progress = await self.consumers.wait_caught_up(self.drain_timeout_s)
            elif self.consumers is not None:  # the flushed passes on stdout, in the history
                await self.consumers.wait_caught_up(LOCAL_CATCH_UP_S, local_only=True)
        await self.supervisor.stop("history")  # no pruning of a history that closes
        if self.consumers is not None:  # what they had not delivered stays in the log
            await self.consumers.close()
        if self.log is not None:
            await self.log.close()
        if self.store is not None:
            await self.store.close()
        if self.recognizer is not None:
            await self.recognizer.close()
        await self.supervisor.stop()  # the watchdog first: it must not restart Triton now
        if self.triton is not None:
            # It holds no state: SIGTERM, then SIGKILL of its group if it takes longer (its
            # stubs and shared memory are cleaned up either way).
            await self.triton.astop(TRITON_STOP_S)
        if self.ops is not None:  # (its part was stopped with the others)
            await self.ops.stop()
