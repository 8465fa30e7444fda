"""The one connection to the MQTT broker, kept up: connect, announce, reconnect with backoff.

:meth:`MqttConnection.run` is a supervised part (``mqtt:connection``). It connects with
aiomqtt (MQTT 5; ``protocol: auto`` falls back to 3.1.1 when the broker answers that it
does not speak 5), with the will ``<topic_prefix>/status`` = ``offline`` (retained), then
calls ``on_connected`` (the deliverer publishes ``online`` and the discovery configs) and
waits for the connection to end, handing each retained message it gets to ``on_message``.
A connection that fails or is lost is retried after a capped, jittered backoff
(``retry_initial_delay_s`` .. ``retry_max_delay_s``), for ever: a broker that is down, or
refuses the credentials, never crashes the service.

Each distinct failure is logged once, naming the broker (host:port, never the credentials),
and kept as :attr:`MqttConnection.problem` for ``/readyz`` until a connection succeeds
("connected again" is logged then). On stop (cancelled) it publishes ``offline`` and
disconnects cleanly.

:meth:`publish` waits for the broker's acknowledgement (QoS 1), bounded by ``timeout_s``, and
fails at once with :class:`MqttUnavailableError` when there is no connection or it is lost
meanwhile; the caller (the outbox's worker) tries again later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import ssl
from collections.abc import Awaitable, Callable

import aiomqtt
from aiomqtt.exceptions import MqttConnectError
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from streamer.config import MqttConfig
from streamer.delivery.home_assistant import OFFLINE, status_topic
from streamer.foundation.backoff import backoff_delay
from streamer.foundation.metrics import Metrics
from streamer.foundation.redact import redact_text

LOG = logging.getLogger(__name__)

#: Seconds the ``offline`` message may take at stop.
GOODBYE_TIMEOUT_S = 2.0
#: CONNACK codes that mean "this broker does not speak that protocol version" (3.1.1: 1;
#: MQTT 5: 0x84 Unsupported Protocol Version).
_UNSUPPORTED_PROTOCOL = {1, 0x84}

#: Why a connection failed or was lost (``lpr_mqtt_connection_failures_total``'s reasons).
FAILURE_REASONS = ("unreachable", "refused", "lost")

OnConnected = Callable[[aiomqtt.Client], Awaitable[None]]
OnMessage = Callable[[aiomqtt.Message], Awaitable[None]]


class MqttUnavailableError(Exception):
    """No connection to the broker, or it was lost before the broker acknowledged."""


def describe_failure(exc: BaseException) -> tuple[str, str]:
    """(reason label, words) for a failed or lost connection."""
    if isinstance(exc, MqttConnectError):
        rc = exc.rc
        words = str(rc) if rc is not None and not isinstance(rc, int) else str(exc)
        return "refused", f"the broker refused the connection: {words}"
    text = redact_text(str(exc)) or type(exc).__name__
    return "unreachable", f"cannot connect: {text}"


def _rc_value(exc: aiomqtt.MqttCodeError) -> int | None:
    rc = exc.rc
    if rc is None:
        return None
    return rc if isinstance(rc, int) else int(rc.value)


def plain_password(config: MqttConfig) -> bool:
    """A password sent to a broker not on this host without TLS."""
    local = config.host.lower() in ("127.0.0.1", "::1", "localhost")
    return config.password is not None and not config.tls.enabled and not local


def new_client(
    config: MqttConfig, *, v5: bool, identifier: str | None, will: aiomqtt.Will | None
) -> aiomqtt.Client:
    """An aiomqtt client for ``config`` (TLS, credentials, timeouts), not yet connected."""
    tls = config.tls
    tls_params = None
    if tls.enabled:
        tls_params = aiomqtt.TLSParameters(
            ca_certs=str(tls.ca_file) if tls.ca_file else None,
            certfile=str(tls.cert_file) if tls.cert_file else None,
            keyfile=str(tls.key_file) if tls.key_file else None,
            cert_reqs=ssl.CERT_REQUIRED,
        )
    password = config.password.get_secret_value() if config.password is not None else None
    return aiomqtt.Client(
        config.host,
        config.broker_port,
        username=config.username,
        password=password,
        identifier=identifier,
        protocol=aiomqtt.ProtocolVersion.V5 if v5 else aiomqtt.ProtocolVersion.V311,
        will=will,
        timeout=config.timeout_s,
        keepalive=config.keepalive_s,
        tls_params=tls_params,
        tls_insecure=(not tls.check_hostname) if tls.enabled else None,
        # Incoming messages are only our own retained discovery configs: a bounded queue.
        max_queued_incoming_messages=1000,
    )


class MqttConnection:
    """The broker connection of one :class:`~streamer.config.MqttConfig`."""

    def __init__(
        self,
        config: MqttConfig,
        metrics: Metrics,
        *,
        on_connected: OnConnected,
        on_message: OnMessage,
        wake: Callable[[], None],
        status: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        """``status``: the topic of the will (default :func:`status_topic`)."""
        self.config = config
        self.status = status or status_topic(config)
        self.metrics = metrics
        metrics.known(metrics.mqtt_connection_failures, *((r,) for r in FAILURE_REASONS))
        self._on_connected = on_connected
        self._on_message = on_message
        self._wake = wake
        self._rng = rng or random.Random()
        self._client: aiomqtt.Client | None = None
        self._lost = asyncio.Event()
        self._v5 = config.protocol != "3.1.1"
        self.problem: str | None = None
        self._logged: str | None = None
        self._ever_connected = False
        if plain_password(config):
            LOG.warning(
                "mqtt %s: a password over plain TCP (tls.enabled is false): anyone on the way "
                "to the broker can read it; enable tls",
                config.broker,
            )

    @property
    def connected(self) -> bool:
        return self._client is not None

    @property
    def protocol(self) -> str:
        return "5" if self._v5 else "3.1.1"

    def _new_client(self) -> aiomqtt.Client:
        return new_client(
            self.config,
            v5=self._v5,
            identifier=self.config.client_id,
            will=aiomqtt.Will(self.status, OFFLINE, qos=1, retain=True),
        )

    async def run(self) -> None:
        """Keep a connection up, until cancelled (see the module docstring)."""
        attempts = 0
        while True:
            client = self._new_client()
            try:
                async with client:
                    attempts = 0
                    await self._serve(client)
            except aiomqtt.MqttError as exc:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    # aiomqtt's clean disconnect on the way out can raise in place of the
                    # cancel: the stop still wins.
                    raise asyncio.CancelledError from exc
                if (
                    isinstance(exc, MqttConnectError)
                    and self.config.protocol == "auto"
                    and self._v5
                    and _rc_value(exc) in _UNSUPPORTED_PROTOCOL
                ):
                    LOG.info("mqtt %s: no MQTT 5 there; using 3.1.1", self.config.broker)
                    self._v5 = False
                    continue
                self._failed(exc)
            finally:
                self._down()
            attempts += 1
            config = self.config
            delay = backoff_delay(
                attempts, config.retry_initial_delay_s, config.retry_max_delay_s, self._rng
            )
            await asyncio.sleep(max(delay, config.retry_initial_delay_s / 2))

    async def _serve(self, client: aiomqtt.Client) -> None:
        try:
            self._client = client
            self._lost = asyncio.Event()
            self.metrics.mqtt_connected.set(1)
            if self._logged is not None or not self._ever_connected:
                again = "connected again" if self._ever_connected else "connected"
                LOG.info("mqtt %s: %s (MQTT %s)", self.config.broker, again, self.protocol)
            self.problem = self._logged = None
            self._ever_connected = True
            await self._on_connected(client)
            self._wake()
            async for message in client.messages:
                if message.retain:
                    await self._on_message(message)
        except asyncio.CancelledError:
            with contextlib.suppress(aiomqtt.MqttError, TimeoutError):
                async with asyncio.timeout(GOODBYE_TIMEOUT_S):
                    await client.publish(self.status, OFFLINE, qos=1, retain=True)
            raise

    def _down(self) -> None:
        if self._client is not None:
            self._client = None
            self._lost.set()
            self.metrics.mqtt_connected.set(0)

    def _failed(self, exc: BaseException) -> None:
        reason, words = describe_failure(exc)
        if self._client is not None:  # it was up: lost (aiomqtt's error wraps the cause)
            cause = redact_text(str(exc.__cause__ or exc)) or "closed"
            reason, words = "lost", f"connection lost: {cause}"
        self.metrics.mqtt_connection_failures.labels(reason).inc()
        self.problem = f"mqtt {self.config.broker}: {words}"
        if words != self._logged:
            self._logged = words
            LOG.warning("%s; retrying with backoff", self.problem)
        self._wake()

    async def publish(
        self,
        topic: str,
        payload: str | bytes,
        *,
        retain: bool = False,
        content_type: str = "application/json",
    ) -> None:
        """Publish at QoS 1 and wait for the acknowledgement (see the module docstring). A
        text payload is marked UTF-8 (MQTT 5), a bytes one (a picture) is not."""
        client = self._client
        if client is None:
            raise MqttUnavailableError(self.problem or f"mqtt {self.config.broker}: not connected")
        lost = self._lost
        properties = None
        if self._v5:
            properties = Properties(PacketTypes.PUBLISH)
            if isinstance(payload, str):
                properties.PayloadFormatIndicator = 1
            properties.ContentType = content_type
        publish = asyncio.ensure_future(
            client.publish(
                topic,
                payload,
                qos=1,
                retain=retain,
                properties=properties,
                timeout=self.config.timeout_s,
            )
        )
        gone = asyncio.ensure_future(lost.wait())
        try:
            await asyncio.wait({publish, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not publish.done():
                publish.cancel()
            await asyncio.gather(publish, gone, return_exceptions=True)
        if publish.cancelled():
            raise MqttUnavailableError(
                f"mqtt {self.config.broker}: connection lost while publishing"
            )
        exc = publish.exception()
        if exc is not None:
            raise MqttUnavailableError(
                f"mqtt {self.config.broker}: {redact_text(str(exc))}"
            ) from exc
