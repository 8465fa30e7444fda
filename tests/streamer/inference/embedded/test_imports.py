"""The embedded Triton is imported only where it is started: a service with a Triton URL, and
every command line that needs none, never load ``streamer.inference.embedded``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from converters.paths import PROJECT_ROOT

#: Modules that name the embedded Triton (its logger, its types) without starting it.
NAMING_IT = (
    "streamer.inference.client",
    "streamer.ops.startup",
    "streamer.ops.health",
    "streamer.foundation.logs",
)


def _embedded_modules_after(*modules: str) -> list[str]:
    """The ``streamer.inference.embedded`` modules a fresh interpreter holds after importing
    ``modules``."""
    code = (
        f"import sys, json; import {', '.join(modules)}; "
        "print(json.dumps(sorted(m for m in sys.modules "
        "if m == 'streamer.inference.embedded' or m.startswith('streamer.inference.embedded.'))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(found, list)
    return found


def test_the_service_and_the_command_line_do_not_import_the_embedded_triton() -> None:
    assert _embedded_modules_after("streamer.app", "streamer.cli.main") == []


@pytest.mark.parametrize(
    "module",
    NAMING_IT,
)
def test_modules_that_only_name_it_do_not_import_it(module: str) -> None:
    assert _embedded_modules_after(module) == []
