"""A real reverse proxy for tests: Debian's nginx in front of a local server.

:func:`nginx_proxy` writes a config into a folder of its own (``daemon off``, its pid, logs
and every temp path inside the folder, ``listen 127.0.0.1:<free port>``), runs ``nginx -c
<conf> -p <folder>`` as a child that gets SIGKILL if the test process dies, waits until the
port answers, and stops it on exit. The proxy is set up as docs/production.md says: the
client's ``Host``, ``X-Forwarded-For``, ``X-Forwarded-Proto`` and ``X-Real-IP``, buffering
off (MJPEG and the live events).
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

from streamer.foundation.parent_death import dying_with_parent

NGINX = "/usr/sbin/nginx"

_CONF = """
daemon off;
worker_processes 1;
pid {dir}/nginx.pid;
error_log {dir}/error.log info;
events {{ worker_connections 64; }}
http {{
    access_log {dir}/access.log;
    client_body_temp_path {dir}/client_body;
    proxy_temp_path {dir}/proxy;
    fastcgi_temp_path {dir}/fastcgi;
    uwsgi_temp_path {dir}/uwsgi;
    scgi_temp_path {dir}/scgi;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://127.0.0.1:{upstream};
            proxy_http_version 1.1;
            proxy_set_header Host $http_host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_set_header X-Real-IP $remote_addr;
            proxy_buffering off;
            proxy_read_timeout 60s;
        }}
    }}
}}
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def nginx_proxy(upstream: int, folder: Path, timeout_s: float = 10.0) -> Iterator[int]:
    """nginx on a free loopback port proxying to ``127.0.0.1:upstream``; yields its port."""
    if shutil.which(NGINX) is None:
        raise FileNotFoundError(f"{NGINX} is not installed: run `make test` (apt: nginx-light)")
    folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    conf = folder / "nginx.conf"
    conf.write_text(_CONF.format(dir=folder, port=port, upstream=upstream))
    command = dying_with_parent([NGINX, "-c", str(conf), "-p", str(folder)], signal.SIGKILL)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            assert process.poll() is None, process.stderr.read().decode() if process.stderr else ""
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 1):
                break
            assert time.monotonic() < deadline, f"nginx did not listen on {port}"
            time.sleep(0.05)
        yield port
    finally:
        process.terminate()  # nginx: SIGTERM is a fast shutdown
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        if process.stderr:
            process.stderr.close()
