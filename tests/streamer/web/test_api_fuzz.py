"""The running service fuzzed against its own OpenAPI document: every parameter of every
route given hand-made hostile values, then schemathesis; no answer is a server error, none is
outside the document. Its own service (for this module): the fuzzer erases events, so it
comes last."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import pytest
import requests

from converters.paths import PROJECT_ROOT
from streamer.inference.embedded.server import EmbeddedTriton
from tests.streamer.web.running_service import (
    TOKEN,
    RunningService,
    clip_service_config,
    running_service,
)
from tests.webhook_receiver import new_secret

ARTIFACTS = PROJECT_ROOT / "test-output" / "test_api"


@pytest.fixture(scope="module")
def fuzzed(
    triton_server: EmbeddedTriton, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningService]:
    secret = new_secret()
    config = clip_service_config(triton_server.grpc_url, secret)
    site = tmp_path_factory.mktemp("fuzzed") / "site.yaml"
    with running_service(site, config, secret) as service:
        deadline = time.monotonic() + 120
        while not service.receiver.delivered():  # the history has an event to fuzz with
            assert time.monotonic() < deadline, "no event"
            time.sleep(0.1)
        yield service


#: Values no parameter expects: other digits, overflows, encodings, injections, sizes.
HOSTILE = (
    "\u00b2",  # a superscript two: str.isdigit() says yes, int() says no
    "\u0661\u0662",  # Arabic-Indic digits
    "-1",
    "0",
    "99999999999999999999999999",
    "1e309",
    "NaN",
    "-inf",
    "",
    " ",
    "\x00",
    "%",
    "%ff%fe",
    "../../../etc/passwd",
    "' OR 1=1 --",
    "${jndi:ldap://x}",
    "[]",
    "{}",
    "true",
    "\u202eevil",
    "\U0001f697",
    "A" * 5000,
)
#: Streams that never end: only hostile names are asked for (they are refused at once).
STREAMS = ("/api/events/live",)


def _operations(document: dict) -> list[tuple[str, str, list[dict]]]:
    ops = []
    for path, item in document["paths"].items():
        for method, op in item.items():
            walked = method in ("get", "post", "put", "patch", "delete") and path not in STREAMS
            if walked and op.get("parameters"):
                ops.append((method.upper(), path, op["parameters"]))
    return ops


def test_hostile_values_in_every_parameter_are_refused_not_failed(
    fuzzed: RunningService,
) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}"}
    document = requests.get(f"{fuzzed.base}/api/openapi.json", headers=auth, timeout=10).json()
    events = requests.get(f"{fuzzed.base}/api/events", headers=auth, timeout=10).json()
    good = {"name": "yard", "event_id": events["events"][0]["event_id"]}
    answers: dict[int, int] = {}
    failures = []
    operations = _operations(document)
    assert len(operations) >= 10  # every route with parameters, from the document itself
    for method, path, parameters in operations:
        for parameter in parameters:
            for value in HOSTILE:
                url_path = path
                for other in parameters:
                    if other["in"] == "path":
                        chosen = value if other is parameter else good[other["name"]]
                        url_path = url_path.replace("{" + other["name"] + "}", quote(chosen, ""))
                query = {parameter["name"]: value} if parameter["in"] == "query" else {}
                if "sig" in query or "expires" in query:  # a link's other half, plausible
                    query = {"sig": "x", "expires": "99999999999", **query}
                response = requests.request(
                    method,
                    f"{fuzzed.base}{url_path}",
                    params=query,
                    headers=auth,
                    timeout=20,
                    stream=True,  # (a snapshot or a picture: the status is enough)
                )
                response.close()
                answers[response.status_code] = answers.get(response.status_code, 0) + 1
                if response.status_code >= 500:
                    failures.append((method, path, parameter["name"], value[:20]))
                elif response.status_code >= 400:
                    assert response.headers["Content-Type"].startswith(
                        "application/problem+json"
                    ), (method, path, parameter["name"], value[:20])
    assert failures == [], failures
    assert sum(answers.values()) > 500 and any(400 <= s < 500 for s in answers), answers
    # The two the issue names: a picture link's expires in other digits, a tampered cursor.
    crop = f"{fuzzed.base}/api/events/{good['event_id']}/crop.jpg"
    response = requests.get(crop, params={"sig": "x", "expires": "\u00b2"}, timeout=10)
    assert response.status_code == 403
    for cursor in ("czk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OQ", "c-1", "%%%", "czE"):
        response = requests.get(
            f"{fuzzed.base}/api/events", params={"cursor": cursor}, headers=auth, timeout=10
        )
        assert response.status_code in (200, 400), cursor
        assert response.status_code == 400 or cursor == "czE", cursor


def test_schemathesis_finds_no_server_error_and_no_answer_outside_the_schema(
    fuzzed: RunningService,
) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    report = ARTIFACTS / "schemathesis.txt"
    command = [
        str(Path(sys.executable).with_name("schemathesis")),
        "run",
        f"{fuzzed.base}/api/openapi.json",
        "--header",
        f"Authorization: Bearer {TOKEN}",
        "--checks",
        "not_a_server_error,status_code_conformance,content_type_conformance,"
        "response_schema_conformance",
        # Endless streams: tested on their own (test_server.py, test_live_events.py).
        "--exclude-path",
        "/api/cameras/{name}/mjpeg",
        "--exclude-path",
        "/api/events/live",
        "--max-examples",
        "10",
        "--seed",
        "1",
        "--request-timeout",
        "20",
        "--max-time",
        "20",  # the coverage phase (every operation, every bound) takes seconds; the rest
        # fuzzes on until then
        "--no-color",
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=420, cwd=ARTIFACTS)
    report.write_text(result.stdout + result.stderr)
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]
    assert "passed" in result.stdout.lower(), result.stdout[-2000:]
