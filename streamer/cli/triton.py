"""``python -m streamer triton``: the CPU Triton on its own, for services that give its URL.

::

    python -m streamer triton [--grpc-port 8001] [--model-repository DIR]

Starts the same ``tritonserver`` the service embeds when no ``triton.url`` is set (the
``nvidia-pytriton`` wheel's, Python backend, on ``model_repository/``), prints ``ready:
127.0.0.1:<port>`` once the models are loaded, and serves until SIGTERM or Ctrl-C, then
stops it (its stubs included). One CPU Triton for several services on a machine, or the
"remote" Triton of a site tried out on one machine; a GPU host runs Triton's own container
instead (docs/production.md, "A Triton on another host"). It listens on 127.0.0.1 only:
Triton has no authentication.

Exit codes: 0 stopped by a signal; 1 it did not start (why, in one line); 2 bad arguments.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from streamer.foundation.paths import DEFAULT_MODEL_REPOSITORY
from streamer.ops.startup import StartupError, check_model_repository, triton_start_error


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``triton`` to an ``add_subparsers()`` object (of ``python -m streamer``)."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "triton", help="serve the model repository with the CPU Triton, until stopped"
    )
    parser.add_argument(
        "--grpc-port",
        type=int,
        default=8001,
        help="gRPC port on 127.0.0.1 (default: 8001; 0: any free port)",
    )
    parser.add_argument(
        "--model-repository",
        type=Path,
        default=DEFAULT_MODEL_REPOSITORY,
        help="the repository to serve (default: this checkout's model_repository/)",
    )
    parser.set_defaults(func=run)
    return parser


def run(args: argparse.Namespace) -> int:
    if not 0 <= args.grpc_port <= 65535:
        print(f"error: --grpc-port must be 0..65535, got {args.grpc_port}", file=sys.stderr)
        return 2
    try:
        check_model_repository(args.model_repository, "give --model-repository")
    except StartupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    # Here only: the other commands never import the embedded Triton.
    from streamer.inference.embedded.errors import TritonStartError
    from streamer.inference.embedded.server import EmbeddedTriton

    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    try:
        with EmbeddedTriton(args.model_repository, grpc_port=args.grpc_port or None) as server:
            print(f"ready: {server.grpc_url}", flush=True)
            while not stop.wait(1.0):
                if not server.running:
                    print("error: tritonserver exited; see the lines above", file=sys.stderr)
                    return 1
    except TritonStartError as exc:
        print(f"error: {triton_start_error(exc)}", file=sys.stderr)
        return 1
    return 0
