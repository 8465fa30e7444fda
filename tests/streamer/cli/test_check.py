"""``streamer check``: on a good site every line is ok and it exits 0; each broken part of a
site is named in one line and it exits 1. Real parts throughout: a CPU Triton, an RTSP
server, Mosquitto with a password, a webhook receiver, files made by ffmpeg."""

from __future__ import annotations

import base64
import contextlib
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.footage import YARD_CLIP
from tests.mqtt_broker import Broker
from tests.rtsp_server import RtspServer

needs_tools = pytest.mark.skipif(
    shutil.which("ffmpeg") is None or shutil.which("mosquitto") is None,
    reason="needs Debian's ffmpeg and mosquitto",
)
PASSWORD = "check-pw-123"
SECRET = "whsec_" + base64.b64encode(b"check-webhook-secret-0123456789").decode()


def _check(config: Path, *extra: str) -> tuple[int, list[str]]:
    """``streamer check`` as a user runs it: a process of its own."""
    command = [sys.executable, "-m", "streamer", "check", "--config", str(config), *extra]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    lines = [line for line in done.stdout.splitlines() if line.strip()]
    return done.returncode, lines


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def _silent_server() -> Iterator[int]:
    """A TCP server that takes connections and never says a word (a hung camera)."""
    server = socket.create_server(("127.0.0.1", 0))
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        for connection in held:
            connection.close()
        server.close()


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The real parts of a site: an RTSP camera, a broker with a password, and media files."""
    folder = tmp_path_factory.mktemp("site")
    audio = folder / "audio-only.m4a"
    subprocess.run(
        ["ffmpeg", "-loglevel", "error", "-f", "lavfi", "-i", "sine=d=2", str(audio)], check=True
    )
    garbage = folder / "garbage.ts"
    garbage.write_bytes(b"this is not a video\n" * 500)
    with (
        RtspServer(YARD_CLIP) as rtsp,
        Broker(folder / "broker", users={"lpr": PASSWORD}) as broker,
        _silent_server() as silent,
    ):
        yield {
            "folder": folder,
            "rtsp": rtsp,
            "broker": broker,
            "silent": silent,
            "audio": audio,
            "garbage": garbage,
        }


def _config(
    tmp_path: Path,
    site: dict[str, Any],
    triton_url: str,
    *,
    camera: str | None = None,
    triton: str | None = None,
    password: str = PASSWORD,
    mqtt_port: int | None = None,
    webhook: str | None = None,
    history: str | None = None,
) -> Path:
    rtsp = site["rtsp"]
    url = camera or rtsp.url("/cam")
    hook_url = webhook or f"http://127.0.0.1:{site['hook_port']}/hook"
    text = (
        "cameras:\n"
        f"  - {{name: gate, url: '{url}', open_timeout_s: 3, read_timeout_s: 3}}\n"
        f"  - {{name: yard, url: '{YARD_CLIP}'}}\n"
        f"triton: {triton or f'{{url: {triton_url!r}, connect_timeout_s: 5}}'}\n"
        f"mqtt: {{host: 127.0.0.1, port: {mqtt_port or site['broker'].port}, "
        f"username: lpr, password: '{password}'}}\n"
        "webhooks:\n"
        f"  - {{name: rx, url: '{hook_url}', secret: '{SECRET}'}}\n"
        f"storage: {{path: '{history or tmp_path / 'history.db'}'}}\n"
        f"outbox: {{path: '{tmp_path / 'outbox.sqlite3'}'}}\n"
        "events: {stdout: false}\n"
    )
    path = tmp_path / "site.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def hook(site: dict[str, Any]) -> Iterator[int]:
    """A webhook host that takes connections."""
    server = socket.create_server(("127.0.0.1", 0))
    site["hook_port"] = server.getsockname()[1]
    try:
        yield site["hook_port"]
    finally:
        server.close()


@needs_tools
def test_a_good_site_checks_ok_item_by_item(
    tmp_path: Path, site: dict[str, Any], hook: int, triton_server: Any
) -> None:
    # The history's folder does not exist yet: the service makes it at start.
    history = str(tmp_path / "data" / "events.sqlite3")
    config = _config(tmp_path, site, triton_server.grpc_url, history=history)
    code, lines = _check(config, "--probe-s", "1")
    print("\n".join(lines))
    assert code == 0, lines
    assert "made at start" in next(line for line in lines if line.startswith("ok   history"))
    assert all(line.startswith("ok ") for line in lines), lines
    items = [line.split(": ", 1)[0].split(None, 1)[1] for line in lines]
    expected = {"config", f"triton {triton_server.grpc_url}", "camera gate", "camera yard"}
    expected |= {f"mqtt 127.0.0.1:{site['broker'].port}", "webhook rx", "history", "outbox"}
    assert set(items) == expected, lines
    gate = next(line for line in lines if "camera gate" in line)
    assert "h264 1920x1080" in gate and "fps measured" in gate and "first frame after" in gate
    assert "plate_recognition takes image, image_i420" in next(
        line for line in lines if line.startswith("ok   triton")
    )
    assert PASSWORD not in "\n".join(lines) and SECRET not in "\n".join(lines)


@needs_tools
@pytest.mark.parametrize(
    ("broken", "item", "words"),
    [
        ("silent camera", "camera gate", "no answer within 3 s"),
        ("no video", "camera gate", "no video stream"),
        ("not a video", "camera gate", "cannot open"),
        ("wrong rtsp path", "camera gate", "cannot open"),
        ("triton down", "triton", "not reachable"),
        ("model missing", "triton", "model nope is not ready"),
        ("wrong password", "mqtt", "refused"),
        ("broker down", "mqtt", "cannot connect"),
        ("webhook down", "webhook rx", "cannot connect"),
        ("history under a file", "history", "is a file"),
        ("embedded repository empty", "triton (embedded)", "is missing"),
    ],
)
def test_each_broken_part_is_named_in_one_line(
    tmp_path: Path,
    site: dict[str, Any],
    hook: int,
    triton_server: Any,
    broken: str,
    item: str,
    words: str,
) -> None:
    options: dict[str, Any] = {}
    url = triton_server.grpc_url
    rtsp = site["rtsp"]
    if broken == "silent camera":
        options["camera"] = f"rtsp://127.0.0.1:{site['silent']}/cam"
    elif broken == "no video":
        options["camera"] = str(site["audio"])
    elif broken == "not a video":
        options["camera"] = str(site["garbage"])
    elif broken == "wrong rtsp path":
        options["camera"] = rtsp.url("/nothing-here")
    elif broken == "triton down":
        url = f"127.0.0.1:{_free_port()}"
    elif broken == "model missing":
        options["triton"] = f"{{url: {url!r}, model: nope, connect_timeout_s: 5}}"
    elif broken == "wrong password":
        options["password"] = "not-the-password"
    elif broken == "broker down":
        options["mqtt_port"] = _free_port()
    elif broken == "webhook down":
        options["webhook"] = f"http://127.0.0.1:{_free_port()}/hook"
    elif broken == "history under a file":
        (tmp_path / "a-file").write_text("not a folder")
        options["history"] = str(tmp_path / "a-file" / "data" / "history.db")
    elif broken == "embedded repository empty":
        (tmp_path / "empty").mkdir()
        options["triton"] = f"{{model_repository: '{tmp_path / 'empty'}'}}"
    code, lines = _check(_config(tmp_path, site, url, **options), "--probe-s", "1")
    print(broken, "->", [line for line in lines if line.startswith("FAIL")])
    assert code == 1, lines
    failed = [line for line in lines if line.startswith("FAIL")]
    assert len(failed) == 1, lines
    assert failed[0].startswith(f"FAIL {item}") and words in failed[0], failed
    assert PASSWORD not in "\n".join(lines) and SECRET not in "\n".join(lines)


def test_a_config_that_does_not_load_exits_2(tmp_path: Path) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("cameras:\n  - {name: gate, url: rtsp://cam/1, sample_fps: fast}\n")
    done = subprocess.run(
        [sys.executable, "-m", "streamer", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "sample_fps" in done.stderr and str(config) in done.stderr
