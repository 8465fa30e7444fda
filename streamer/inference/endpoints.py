"""Triton endpoints: what a configured address stands for, and each endpoint's state.

``host:port`` with an IP literal is one endpoint. A host name that resolves to several
addresses (a Kubernetes headless Service: one per Triton pod) is one endpoint per address;
one that resolves to a single address stays as it is. Of a dual-stack name's addresses the
IPv4 ones are taken (the same server would otherwise count twice).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket

import tritonclient.grpc.aio as aioclient
from tritonclient.grpc import KeepAliveOptions
from tritonclient.utils import InferenceServerException

from streamer.foundation.build_info import ModelBuild, model_build_from_config
from streamer.inference.balancing import EndpointShare
from streamer.inference.client import InferenceError, PlateRecognizer, short_error

LOG = logging.getLogger(__name__)


#: Triton's answer (status UNAVAILABLE) to a health call once it has begun to shut down
#: (after its SIGTERM). Only this answer says so: a Triton whose model failed to load says
#: "not ready" to the same call and goes on serving.
EXITING = "Server exiting"


async def check_ready(
    client: aioclient.InferenceServerClient, model: str, timeout_s: float
) -> None:
    """Ask the Triton of ``client`` whether it and ``model`` are ready, within ``timeout_s``.

    Raises :class:`InferenceError` naming what is not ready, :class:`TimeoutError` when it
    does not answer in time, and the client's own errors when it cannot be reached (or is
    shutting down: :data:`EXITING`).
    """
    async with asyncio.timeout(timeout_s):
        if not await client.is_server_ready():
            raise InferenceError("server not ready")
        if not await client.is_model_ready(model):
            raise InferenceError(f"model {model} is not ready")


_warned: set[str] = set()


def split(url: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``) as host and port."""
    host, _, port = url.rpartition(":")
    return host.strip("[]"), int(port)


def join(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def is_address(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


async def expand(url: str, *, timeout_s: float) -> list[str]:
    """The endpoints ``url`` stands for now; ``[url]`` when its name does not resolve
    (gRPC resolves it again as it connects; the failure is logged once per name)."""
    host, port = split(url)
    if is_address(host):
        return [url]
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout_s):
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, TimeoutError) as exc:
        if url not in _warned:
            _warned.add(url)
            LOG.warning("Triton endpoint %s does not resolve (%s); using the name", url, exc)
        return [url]
    _warned.discard(url)
    v4 = sorted({str(i[4][0]) for i in infos if i[0] == socket.AF_INET})
    v6 = sorted({str(i[4][0]) for i in infos if i[0] == socket.AF_INET6})
    addresses = v4 or v6
    if len(addresses) <= 1:
        return [url]
    return [join(address, port) for address in addresses]


class Endpoint:
    """One Triton server: its stream, its readiness checks and its share of the cameras."""

    def __init__(self, url: str, client: PlateRecognizer, share: EndpointShare) -> None:
        self.url = url
        self.client = client
        self.share = share
        self.check_ok = False
        self.check_error: str | None = "not checked yet"
        #: Its capacity relative to the others' (1.0: as the median), as applied.
        self.capacity = 1.0
        self.moved_off = 0  # cameras moved away because it failed
        #: What it serves (``lpr_build_info``), as it said when its check last passed after
        #: a failure: its Triton's version (server metadata) and its model's build (the model
        #: config's parameters); None until it said.
        self.triton_version: str | None = None
        self.model_build: ModelBuild | None = None
        self._build_read = False
        self._checker: aioclient.InferenceServerClient | None = None
        #: Its last check was answered "Server exiting": a Triton draining after its SIGTERM.
        self.exiting = False

    @property
    def ok(self) -> bool:
        return self.client.ready and self.check_ok and not self.client.model_failing

    @property
    def problem(self) -> str | None:
        """Why it is not healthy (None when it is)."""
        if not self.client.ready:
            return self.client.problem or "stream not open"
        if self.client.model_failing:
            return f"model {self.client.model} failing: {self.client.last_model_error}"
        if not self.check_ok:
            return self.check_error or "readiness check failed"
        return None

    async def check(self, model: str, timeout_s: float, keepalive: KeepAliveOptions) -> None:
        """The server's and the model's readiness (``/v2/health/ready`` over gRPC), on a
        channel of its own; the verdict in ``check_ok`` and ``check_error``."""
        if self._checker is None:
            self._checker = aioclient.InferenceServerClient(self.url, keepalive_options=keepalive)
        self.exiting = False
        try:
            await check_ready(self._checker, model, timeout_s)
        except TimeoutError:
            self.check_ok = False
            self.check_error = f"readiness check unanswered within {timeout_s:g} s"
        except Exception as exc:  # any failure of the check is the verdict
            self.check_ok = False
            self.check_error = f"readiness check failed: {short_error(exc)}"
            if isinstance(exc, InferenceServerException):
                self.exiting = EXITING in str(exc.message())
        else:
            self.check_ok, self.check_error = True, None
            if not self._build_read:
                await self._read_build(model, timeout_s)
        if not self.check_ok:  # it may come back as another server: read it again then
            self._build_read = False

    async def _read_build(self, model: str, timeout_s: float) -> None:
        """Its Triton's version and the build of ``model`` as the server gives them; a
        failure leaves them as they were, to be read at the next check."""
        assert self._checker is not None
        try:
            async with asyncio.timeout(timeout_s):
                server = await self._checker.get_server_metadata(as_json=True)
                config = await self._checker.get_model_config(model, as_json=True)
        except Exception as exc:  # (TimeoutError included) informational only
            LOG.debug("Triton endpoint %s: metadata not read: %s", self.url, short_error(exc))
            return
        self.triton_version = str(server.get("version") or "") or None
        self.model_build = model_build_from_config(config)
        self._build_read = True

    async def close_checker(self) -> None:
        if self._checker is not None:
            with contextlib.suppress(Exception):  # closing a channel to a dead server
                await self._checker.close()
            self._checker = None

    def measured_capacity(self) -> float | None:
        """Frames it runs at once, as its adaptive window measured them (the window grows
        only while a larger one buys throughput: a GPU that batches gets a larger one), once
        it has answered. Not answers per second: those fall with its load, and cameras
        would swing back and forth between the endpoints."""
        window = self.client.scheduler.window
        return float(window.limit) if window.smoothed_latency_s else None
