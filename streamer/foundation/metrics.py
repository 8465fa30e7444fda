"""Prometheus metrics of the service (prometheus-client), one registry per service.

Counters that the decode threads and pipelines already keep (frames decoded,
sampled, dropped, decode errors, reconnects, ...) are read at scrape time by a
collector, so the hot paths carry no extra locking. What only exists at one
moment (latencies, events, webhook deliveries) is observed where it happens.

Names follow Prometheus conventions: base units (seconds), ``_total`` for
counters, ``camera`` / ``target`` labels. The list is in docs/metrics.md.

A labelled counter is exported at 0 for each label value known in advance (its kinds and
outcomes, each configured camera, sink and target), so that ``rate()`` and alerts see its
first increment. No ``_created`` series: prometheus-client's are switched off for the whole
process when this module is imported (every registry of every service alike).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Sequence

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    disable_created_metrics,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

# Process-wide in prometheus-client, and read as each series is made: before any metric.
disable_created_metrics()

#: Latency buckets: a CPU Triton answers in 0.1-3 s, a GPU one in 5-50 ms.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
#: Frame-to-event: an event waits for the vote (seconds to max_delay_s).
EVENT_LATENCY_BUCKETS = (0.25, 0.5, 1, 2, 4, 6, 8, 10, 15, 20, 30, 60, 120)
#: The outcomes of ``lpr_webhook_deliveries_total`` (streamer/delivery/webhook_delivery.py
#: counts a dead letter as ``dead_letter``).
WEBHOOK_OUTCOMES = ("delivered", "retry", "dead_letter")


class Metrics:
    """Everything observed in place; state read at scrape time comes through ``add_collector``."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        # process_resident_memory_bytes, process_cpu_seconds_total, open fds: what a
        # long-running service is watched by (the default registry has it; ours is our own).
        ProcessCollector(registry=r)
        self.inference_latency = Histogram(
            "lpr_inference_latency_seconds",
            "Time from sending a frame to Triton to its answer.",
            ["camera"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.frame_to_event_latency = Histogram(
            "lpr_frame_to_event_latency_seconds",
            "Time from decoding the first frame of a vehicle pass to its event.",
            ["camera"],
            buckets=EVENT_LATENCY_BUCKETS,
            registry=r,
        )
        self.events = Counter(
            "lpr_events", "Plate events emitted (one per vehicle pass).", ["camera"], registry=r
        )
        self.event_updates = Counter(
            "lpr_event_updates",
            "Corrections of reported plate events (plate.updated).",
            ["camera"],
            registry=r,
        )
        self.events_dropped = Counter(
            "lpr_events_dropped",
            "Events never committed to the event log: still waiting for it when the service "
            "stopped (each logged at ERROR as JSON).",
            ["camera"],
            registry=r,
        )
        self.event_queue_waits = Counter(
            "lpr_event_queue_waits",
            "Times a camera's pipeline waited for room in the event queue (the event log "
            "cannot commit and the queue is full): its decisions wait, none is dropped.",
            ["camera"],
            registry=r,
        )
        self.event_queue_depth = Gauge(
            "lpr_event_queue_depth",
            "Events waiting in memory to be committed to the event log.",
            registry=r,
        )
        self.event_queue_bytes = Gauge(
            "lpr_event_queue_bytes",
            "Bytes of the events waiting to be committed (their pictures and payloads).",
            registry=r,
        )
        self.sink_errors = Counter(
            "lpr_sink_errors",
            "Events an in-process observer failed to take (raised, or no answer within its "
            "timeout); the durable consumers are counted per consumer.",
            ["sink"],
            registry=r,
        )
        self.consumer_deliveries = Counter(
            "lpr_consumer_deliveries",
            "Attempts of the consumers in this process (history, stdout, file) by outcome "
            "(delivered, retry, dead: refused for good, a stale lease holder's event).",
            ["consumer", "outcome"],
            registry=r,
        )
        self.triton_errors = Counter(
            "lpr_triton_errors",
            "Frames Triton did not answer, by kind (model, deadline, stream).",
            ["kind"],
            registry=r,
        )
        self.webhook_deliveries = Counter(
            "lpr_webhook_deliveries",
            "Webhook delivery attempts by target and outcome (delivered, retry, dead_letter).",
            ["target", "outcome"],
            registry=r,
        )
        self.webhook_retries = Counter(
            "lpr_webhook_retries", "Webhook deliveries scheduled again.", ["target"], registry=r
        )
        self.webhook_dead_letters = Counter(
            "lpr_webhook_dead_letters",
            "Events given up on for a target (non-retryable answer).",
            ["target"],
            registry=r,
        )
        self.mqtt_deliveries = Counter(
            "lpr_mqtt_deliveries",
            "MQTT delivery attempts of events by outcome (delivered: the broker acknowledged "
            "them; retry).",
            ["outcome"],
            registry=r,
        )
        self.mqtt_connected = Gauge(
            "lpr_mqtt_connected", "1 while connected to the MQTT broker, else 0.", registry=r
        )
        self.mqtt_connection_failures = Counter(
            "lpr_mqtt_connection_failures",
            "Connections to the MQTT broker that failed or were lost, by reason (unreachable, "
            "refused, lost).",
            ["reason"],
            registry=r,
        )
        self.outbox_depth = Gauge(
            "lpr_outbox_depth",
            "Events of the event log a consumer has not yet taken (its lag in events), per "
            "consumer (target: history, stdout, file, a webhook target, mqtt).",
            ["target"],
            registry=r,
        )
        self.outbox_oldest_age = Gauge(
            "lpr_outbox_oldest_undelivered_age_seconds",
            "Age of the oldest event a consumer has not yet taken (its lag in seconds).",
            ["target"],
            registry=r,
        )
        self.outbox_errors = Counter(
            "lpr_outbox_errors", "Outbox database errors (disk full, ...).", registry=r
        )
        self.config_reloads = Counter(
            "lpr_config_reloads",
            "Config reloads by outcome: applied, unchanged (nothing to apply) or refused (the "
            "new config is invalid: the running one stays).",
            ["outcome"],
            registry=r,
        )
        #: The series each camera has here (the collector's come and go with the cameras).
        self._per_camera: tuple[Counter | Histogram, ...] = (
            self.events,
            self.event_updates,
            self.events_dropped,
            self.inference_latency,
            self.frame_to_event_latency,
        )
        self._removed_cameras: set[str] = set()

    @staticmethod
    def known(family: Counter, *values: Sequence[str]) -> None:
        """Export ``family`` at 0 for each label value (a tuple of values per label)."""
        for value in values:
            family.labels(*value)

    def camera_started(self, camera: str) -> None:
        """``camera``'s series at 0 (it runs here: streamer/pipeline/cameras.py)."""
        self._removed_cameras.discard(camera)
        for family in self._per_camera:
            family.labels(camera)

    def camera_removed(self, camera: str) -> None:
        """``camera``'s series gone, as its frame counters read by the collector are; a pass
        it flushed as it stopped, published after this, is not counted (it would bring
        them back)."""
        self._removed_cameras.add(camera)
        for family in self._per_camera:
            with contextlib.suppress(KeyError):
                family.remove(camera)

    def counts(self, camera: str) -> bool:
        """False for a camera removed (:meth:`camera_removed`) and not started again."""
        return camera not in self._removed_cameras

    def webhook_target(self, target: str) -> None:
        """A webhook target's counters at 0 (each outcome)."""
        self.known(self.webhook_deliveries, *((target, o) for o in WEBHOOK_OUTCOMES))
        self.known(self.webhook_retries, (target,))
        self.known(self.webhook_dead_letters, (target,))

    def add_collector(self, collect: Callable[[], Iterable[Metric]]) -> None:
        """Register a function that yields metric families at every scrape."""
        self.registry.register(_FunctionCollector(collect))


class _FunctionCollector(Collector):
    def __init__(self, collect: Callable[[], Iterable[Metric]]) -> None:
        self._collect = collect

    def collect(self) -> Iterator[Metric]:
        yield from self._collect()

    def describe(self) -> Iterator[Metric]:
        return iter(())  # unchecked: names are stable and tested


def counter(name: str, documentation: str, labels: list[str]) -> CounterMetricFamily:
    """A counter family for a collector (``name`` without ``_total``)."""
    return CounterMetricFamily(name, documentation, labels=labels)


def gauge(name: str, documentation: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, documentation, labels=labels)
