"""Scale-out without Kubernetes (deploy/compose/, deploy/systemd/, docs/scale-out.md): the
compose file's replicas and Tritons fit the config they share, which loads through the
service's own schema; each unit's command parses with the service's CLI; and every flag
given to Triton here (units, the image's command, the Kubernetes Deployment) is one the
real ``tritonserver`` 2.51 of this machine lists in its ``--help``."""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

import yaml

from streamer.cli.main import build_parser
from streamer.config import load_config
from streamer.foundation.shards import Shard
from streamer.inference.embedded.tree import default_work_dir, prepare_server_tree, wheel_libs_dir

PROJECT = Path(__file__).resolve().parents[2]
LIVENESS = PROJECT / "docker" / "triton_liveness.py"
COMPOSE = PROJECT / "deploy" / "compose"
SYSTEMD = PROJECT / "deploy" / "systemd"
#: Where docker/Dockerfile.triton copies docker/triton_liveness.py.
LIVENESS_IN_IMAGE = "/opt/lpr/triton_liveness.py"
SECRETS = {
    "CAM_PASSWORD": "cam-pw",
    "WEB_TOKEN": "t" * 24,
    "LINK_SECRET": "l" * 32,
    "LPR_HISTORY_DSN": "postgresql://lpr:pw@postgres:5432/lpr",
}


def _unit(name: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read(SYSTEMD / name)
    return parser


def _exec_start(unit: configparser.ConfigParser, **values: str) -> list[str]:
    """ExecStart's words, with the unit's specifiers and variables given ``values``."""
    line = unit["Service"]["ExecStart"].replace("\\\n", " ")
    line = line.replace("%i", values.pop("i", "0"))
    for key, value in values.items():
        line = line.replace(f"${{{key}}}", value)
    return shlex.split(line)


def test_the_compose_replicas_share_one_config_over_both_tritons(tmp_path: Path) -> None:
    compose = yaml.safe_load((COMPOSE / "docker-compose.yml").read_text())
    services = compose["services"]
    tritons = sorted(n for n in services if n.startswith("triton-"))
    replicas = sorted(n for n in services if n.startswith("streamer-"))
    assert len(tritons) == 2 and len(replicas) == 2
    # One GPU each.
    gpus = [services[t]["deploy"]["resources"]["reservations"]["devices"][0] for t in tritons]
    assert sorted(d["device_ids"][0] for d in gpus) == ["0", "1"]
    data_volumes = set()
    for index, name in enumerate(replicas):
        service = services[name]
        args = build_parser().parse_args(service["command"])
        assert args.command == "run" and args.shard == Shard(index, len(replicas))
        assert "./site.yaml:/config/site.yaml:ro" in service["volumes"]
        data_volumes |= {v.split(":")[0] for v in service["volumes"] if v.endswith(":/data")}
        assert any(e.startswith("LPR_HISTORY_DSN=") for e in service["environment"])
    assert len(data_volumes) == len(replicas)  # each its own outbox
    assert data_volumes <= set(compose["volumes"])
    settings = load_config(COMPOSE / "site.yaml", env=SECRETS)
    assert settings.triton.endpoints == tuple(f"{t}:8001" for t in tritons)
    assert settings.storage.backend == "postgresql"
    assert settings.web.link_secret is not None


def test_the_systemd_units_run_replica_i_of_n_on_its_own_outbox(tmp_path: Path) -> None:
    unit = _unit("lpr-streamer@.service")
    words = _exec_start(unit, i="1", LPR_REPLICAS="3")
    assert words[1:3] == ["-m", "streamer"]
    args = build_parser().parse_args(words[3:])
    assert args.command == "run" and args.shard == Shard(1, 3)
    assert Path(args.config) == Path("/etc/lpr/site.yaml")
    outbox = next(
        v.split("=", 1)[1]
        for v in unit["Service"]["Environment"].splitlines()
        if v.startswith("LPR_OUTBOX=")
    )
    assert "%i" in outbox  # per replica
    env = {**SECRETS, "LPR_OUTBOX": outbox.replace("%i", "1"), "LPR_WEB_PORT": "8081"}
    settings = load_config(SYSTEMD / "site.yaml", env=env)
    assert settings.outbox.path == Path("/var/lib/lpr/replica-1/outbox.sqlite3")
    assert settings.web.port == 8081 and len(settings.triton.endpoints) == 3


def _triton_flags(words: list[str]) -> set[str]:
    return {w.split("=", 1)[0] for w in words if w.startswith("--")}


def test_every_triton_flag_given_here_is_one_tritonserver_knows() -> None:
    tree = prepare_server_tree(default_work_dir())
    env = {**os.environ, "LD_LIBRARY_PATH": str(wheel_libs_dir())}
    result = subprocess.run(
        [str(tree / "bin" / "tritonserver"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    known = set(re.findall(r"^\s+(--[a-z0-9-]+)", result.stdout + result.stderr, re.MULTILINE))
    assert "--grpc-http2-min-recv-ping-interval-without-data" in known, result.stderr[-2000:]

    unit = _unit("lpr-triton@.service")
    given = {
        "systemd unit": _exec_start(unit, LPR_MODEL_REPOSITORY="/models"),
        "image": re.findall(r'"(--[^"]+)"', (PROJECT / "docker" / "Dockerfile.triton").read_text()),
        "kubernetes": re.findall(
            r"^\s+- (--\S+)$",
            (PROJECT / "deploy" / "kubernetes" / "base" / "triton.yaml").read_text(),
            re.MULTILINE,
        ),
    }
    for where, words in given.items():
        flags = _triton_flags(words)
        assert "--grpc-http2-min-recv-ping-interval-without-data" in flags, where
        assert flags <= known, (where, flags - known)


def _liveness_parser() -> Any:
    spec = importlib.util.spec_from_file_location("triton_liveness", LIVENESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.build_parser()


def test_every_triton_health_check_runs_the_liveness_probe_the_image_has() -> None:
    """The image copies docker/triton_liveness.py where its HEALTHCHECK, both compose files
    and the Kubernetes liveness probe run it, with arguments its parser takes (a dead
    Python-backend stub: tests/docker/test_triton_liveness.py)."""
    dockerfile = (PROJECT / "docker" / "Dockerfile.triton").read_text()
    assert f"COPY triton_liveness.py {LIVENESS_IN_IMAGE}" in dockerfile
    healthcheck = dockerfile[dockerfile.index("HEALTHCHECK") :].split("\n\n")[0]
    checks = {"image": shlex.split(healthcheck.replace("\\\n", " ").split(" CMD ", 1)[1])}
    for compose in (COMPOSE / "docker-compose.yml", PROJECT / "docker" / "docker-compose.yml"):
        for name, service in _triton_services(yaml.safe_load(compose.read_text())).items():
            kind, command = service["healthcheck"]["test"]
            assert kind == "CMD-SHELL"
            checks[f"{compose.parent.name}/{name}"] = shlex.split(command)
    manifest = yaml.safe_load_all((PROJECT / "deploy/kubernetes/base/triton.yaml").read_text())
    deployment = next(doc for doc in manifest if doc["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    checks["kubernetes"] = container["livenessProbe"]["exec"]["command"]
    parser = _liveness_parser()
    for where, words in checks.items():
        assert words[:2] == ["python3", LIVENESS_IN_IMAGE], where
        args = words[2 : words.index("&&")] if "&&" in words else words[2:]
        parser.parse_args(args)  # exits (SystemExit) on an argument it does not take
    assert len(checks) == 5, checks  # the image, compose: 2 + 1 Tritons, Kubernetes


def _triton_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: service
        for name, service in compose["services"].items()
        if "Dockerfile.triton" in str(service.get("build", ""))
    }


def test_every_supervisor_waits_longer_than_the_worst_case_stop() -> None:
    """A stop timeout under the service's worst case kills it mid-drain (events committed
    late, or a history write cut); compose's default is 10 s."""
    from streamer.app import WORST_CASE_STOP_S

    def seconds(text: str) -> float:
        assert text.endswith("s"), text
        return float(text[:-1])

    for compose_file in (COMPOSE / "docker-compose.yml", PROJECT / "docker" / "docker-compose.yml"):
        services = yaml.safe_load(compose_file.read_text())["services"]
        streamers = [s for name, s in services.items() if name.startswith("streamer")]
        assert streamers, compose_file
        for service in streamers:
            assert seconds(service["stop_grace_period"]) > WORST_CASE_STOP_S, compose_file
    unit = _unit("lpr-streamer@.service")
    assert float(unit["Service"]["TimeoutStopSec"]) > WORST_CASE_STOP_S
    manifest = yaml.safe_load_all((PROJECT / "deploy/kubernetes/base/streamer.yaml").read_text())
    (statefulset,) = [o for o in manifest if o and o.get("kind") == "StatefulSet"]
    grace = statefulset["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
    assert grace > WORST_CASE_STOP_S


def test_no_unit_or_manifest_opens_the_metrics_port_to_every_interface() -> None:
    """/metrics and /readyz have no authentication: loopback by default, or published on
    the loopback address only."""
    settings = load_config(SYSTEMD / "site.yaml", env={**SECRETS, "LPR_OUTBOX": "/tmp/o"})
    assert settings.metrics.host == "127.0.0.1"
    for compose_file in (COMPOSE / "docker-compose.yml", PROJECT / "docker" / "docker-compose.yml"):
        services = yaml.safe_load(compose_file.read_text())["services"]
        for name, service in services.items():
            for port in service.get("ports", []):
                if str(port).endswith(":9108"):
                    host = str(port).rsplit(":", 2)[0]
                    assert host in ("127.0.0.1", "${LPR_METRICS_BIND:-127.0.0.1}"), (name, port)


def _variables(*configs: Path) -> set[str]:
    """Every ``${NAME}`` the configs use, in comments too (a user uncomments them)."""
    names: set[str] = set()
    for config in configs:
        names |= set(re.findall(r"\$\{([A-Z_][A-Z0-9_]*)", config.read_text()))
    return names - {"VAR"}  # (the syntax's own placeholder in the comments)


def _passed(compose: Path, service: str) -> set[str]:
    """The variables a compose service passes through from the shell or .env."""
    document = yaml.safe_load(compose.read_text())
    entries: list[str] = []
    spec = document["services"][service]
    for part in (spec, *(document.get(k, {}) for k in document if k.startswith("x-"))):
        if isinstance(part, dict) and "environment" in part:
            entries += part["environment"]
    return {entry.split("=", 1)[0] for entry in entries}


def test_compose_passes_every_variable_the_shipped_configs_use() -> None:
    """A config that uses ${MQTT_PASSWORD} (or any other) starts in compose as written: the
    streamer container gets each variable the shipped configs name."""
    docker = PROJECT / "docker"
    wanted = _variables(docker / "config.example.yaml", PROJECT / "configs" / "reference.yaml")
    assert {"CAM_PASSWORD", "WEB_TOKEN", "MQTT_PASSWORD"} <= wanted
    assert wanted - _passed(docker / "docker-compose.yml", "streamer") == set()
    scale_out = COMPOSE / "docker-compose.yml"
    document = yaml.safe_load(scale_out.read_text())
    replicas = [name for name in document["services"] if name.startswith("streamer")]
    assert replicas
    for name in replicas:
        assert _variables(COMPOSE / "site.yaml") - _passed(scale_out, name) == set(), name


def test_the_remote_triton_compose_runs_the_streamer_alone() -> None:
    """docker-compose.remote.yml: the streamer of docker-compose.yml (extended: the same
    image, volumes, variables), no local Triton to start or wait for, TRITON_URL required."""
    remote_file = PROJECT / "docker" / "docker-compose.remote.yml"
    remote = yaml.safe_load(remote_file.read_text())
    assert list(remote["services"]) == ["streamer"]
    streamer = remote["services"]["streamer"]
    assert streamer["extends"] == {"file": "docker-compose.yml", "service": "streamer"}
    assert "depends_on" not in streamer  # (extends never copies depends_on)
    assert any(e.startswith("TRITON_URL=${TRITON_URL:?") for e in streamer["environment"])
    base = yaml.safe_load((PROJECT / "docker" / "docker-compose.yml").read_text())
    assert set(remote["volumes"]) <= set(base["volumes"])
    example = (PROJECT / "docker" / "config.example.yaml").read_text()
    assert "${TRITON_URL" in example  # the config it runs takes the URL from there
