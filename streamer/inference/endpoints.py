"""A configured Triton address as the endpoints it stands for.

``host:port`` with an IP literal is one endpoint. A host name that resolves to several
addresses (a Kubernetes headless Service: one per Triton pod) is one endpoint per address;
one that resolves to a single address stays as it is. Of a dual-stack name's addresses the
IPv4 ones are taken (the same server would otherwise count twice).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket

LOG = logging.getLogger(__name__)

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
