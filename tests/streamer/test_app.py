"""The whole service on real parts: YAML config -> PyAV -> embedded Triton -> events."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from converters import assets
from converters.paths import PROJECT_ROOT
from streamer.app import Service
from streamer.config import load_config
from streamer.domain.plate_formats import PlateFormats
from streamer.inference.embedded.server import EmbeddedTriton
from tests.docs import marked

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())
PLATES = {"O567AM76", "Y836XH76"}


def _run_cli(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "streamer", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "LPR_ASSETS_DIR": str(assets.default_assets_dir())},
    )


def test_demo_once_emits_exactly_the_two_plates() -> None:
    done = _run_cli("run", "--config", "configs/demo.yaml", "--once")
    assert done.returncode == 0, done.stderr[-3000:]
    events = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert sorted(e["text"] for e in events) == sorted(PLATES), events
    for event in events:
        assert event["type"] == "plate" and event["camera"] == "yard"
        uuid.UUID(event["event_id"])
        assert event["first_seen"]["stream_time_s"] <= event["last_seen"]["stream_time_s"]
        assert re.fullmatch(
            r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", event["first_seen"]["utc"]
        )
        assert event["reads"] >= 2
        assert event["candidates"][0]["text"] == event["text"] or event["confidence"] > 0
        x1, y1, x2, y2 = event["box"]
        assert 0 <= x1 < x2 <= 1920 and 0 <= y1 < y2 <= 1080
    assert "every camera has ended" in done.stderr
    _check_readme_shows(events)


def _keys(node: object) -> set[str]:
    if isinstance(node, dict):
        return set(node) | {k for v in node.values() for k in _keys(v)}
    if isinstance(node, list):
        return {k for v in node for k in _keys(v)}
    return set()


def _check_readme_shows(events: list[dict[str, object]]) -> None:
    """The README's demo output is what the demo prints: the same passes in the same order,
    decided for the same reasons, with no key the events do not have."""
    shown = [
        line
        for line in marked(PROJECT_ROOT / "README.md", "demo-output").text.splitlines()
        if line.startswith("{")
    ]

    def field(line: str, key: str) -> str:
        found = re.search(rf'"{key}": "([^"]+)"', line)
        assert found, f"README demo output: no {key} in {line[:80]}"
        return found.group(1)

    assert [(field(line, "text"), field(line, "reason")) for line in shown] == [
        (e["text"], e["reason"]) for e in events
    ], "README.md's demo output no longer matches what `make demo` prints"
    unknown = set(re.findall(r'"(\w+)":', "\n".join(shown))) - _keys(events)
    assert not unknown, f"README.md's demo output shows keys the events lack: {unknown}"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("cameras: [\n  - name: a\n    url: x.ts\n   bad-indent: 1\n", "line"),
        ("cameras:\n  - name: a\n    url: x.ts\n    sampel_fps: 5\n", "sampel_fps"),
        ("cameras:\n  - name: a\n", "url"),
        ("cameras:\n  - {name: a, url: x.ts}\n  - {name: a, url: y.ts}\n", "named 'a'"),
        ("cameras:\n  - {name: a, url: x.ts, sample_fps: 0}\n", "sample_fps"),
    ],
)
def test_malformed_config_exits_2_naming_the_key(tmp_path: Path, text: str, key: str) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    done = _run_cli("run", "--config", str(config), timeout=60)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert lines[0].startswith("error: ") and "bad.yaml" in lines[0]
    assert key in done.stderr
    assert "Traceback" not in done.stderr


def _overload_config(tmp_path: Path, triton_url: str, events_file: Path) -> Path:
    cameras = "\n".join(
        f"  - {{name: cam{i}, url: '{CLIP}', sample_fps: 5, realtime: true}}" for i in range(8)
    )
    config = tmp_path / "eight.yaml"
    config.write_text(
        f"cameras:\n{cameras}\n"
        f"triton: {{url: '{triton_url}', request_timeout_s: 3}}\n"
        f"events: {{stdout: false, file: '{events_file}', max_delay_s: 4}}\n"
        "metrics: {port: 0}\nweb: {enabled: false}\n"
    )
    return config


def _triton_pending(metrics_url: str) -> tuple[float, float]:
    """Requests queued in Triton (all models) and requests the BLS model has executed."""
    with urllib.request.urlopen(metrics_url, timeout=5) as response:
        text = response.read().decode()
    pending = executed = 0.0
    for line in text.splitlines():
        if line.startswith("nv_inference_pending_request_count{"):
            pending += float(line.rsplit(" ", 1)[1])
        elif line.startswith('nv_inference_exec_count{model="plate_recognition"'):
            executed = float(line.rsplit(" ", 1)[1])
    return pending, executed


async def test_eight_cameras_overload_degrades_gracefully(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    """Eight real-time cameras at 5 fps on a 2-core CPU Triton, with a 3 s deadline.

    Before the shared window, every frame missed its deadline and stayed queued at Triton
    (0 answered in 54 s, memory growing). Now: frames are answered throughout, every
    camera gets about its share, Triton never holds more than the window and no queue
    exceeds its bound, and Triton's queue is empty once the cameras stop. (Memory over
    time is a benchmark figure: ``python -m bench.overload_memory``, docs/production.md.)
    """
    events_file = tmp_path / "events.jsonl"
    settings = load_config(_overload_config(tmp_path, triton_server.grpc_url, events_file))
    service = Service(settings)
    runner = asyncio.create_task(service.run())
    peak_window = 0

    async def watch_window() -> None:
        nonlocal peak_window
        while True:
            if service.recognizer is not None:
                peak_window = max(peak_window, service.recognizer.window_limit)
            await asyncio.sleep(0.01)

    watcher = asyncio.create_task(watch_window())
    answered_at: list[int] = []
    try:
        while service.recognizer is None or not service.recognizer.ready:
            assert not runner.done(), runner.exception() if runner.done() else None
            await asyncio.sleep(0.2)
        pool = service.recognizer
        for tick in range(60):  # 30 s: about four loops of the 8 s clip per camera
            await asyncio.sleep(0.5)
            assert not runner.done(), runner.exception() if runner.done() else None
            pending, _ = await asyncio.to_thread(_triton_pending, triton_server.metrics_url)
            # Whatever Triton queues belongs to a frame holding a permit of the window.
            assert pending <= peak_window <= settings.triton.max_in_flight, (pending, peak_window)
            for name, camera in service.cameras.items():
                assert camera.queue.qsize() <= camera.queue.maxsize
                assert pool.held(name) <= settings.triton.max_in_flight_per_camera
            if tick % 20 == 19:
                answered_at.append(sum(c.pipeline.stats.answered for c in service.cameras.values()))
    finally:
        service.request_stop()
        await asyncio.wait_for(runner, 120)
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)

    # Answered throughout: every 10 s more frames came back.
    steps = [b - a for a, b in itertools.pairwise([0, *answered_at])]
    assert all(step > 0 for step in steps), answered_at
    answered = {name: c.pipeline.stats.answered for name, c in service.cameras.items()}
    assert min(answered.values()) >= 0.7 * max(answered.values()), answered  # fair shares
    for name, camera in service.cameras.items():
        dropped = camera.queue.dropped + camera.pipeline.stats.superseded
        assert dropped > 0, f"{name} dropped nothing: not overloaded?"
    assert service.recognizer is not None and service.recognizer.stats.resets == 0
    # Stopped: Triton's queues drain and it stops working for us.
    for _ in range(40):
        pending, executed = await asyncio.to_thread(_triton_pending, triton_server.metrics_url)
        if pending == 0:
            break
        await asyncio.sleep(0.25)
    assert pending == 0
    await asyncio.sleep(1.0)
    assert _triton_pending(triton_server.metrics_url) == (0, executed)

    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert events and {e["camera"] for e in events} <= set(service.cameras), events
    formats = PlateFormats()
    assert all(formats.is_valid(e["text"]) for e in events), events
    assert "O567AM76" in {e["text"] for e in events}
    for event in events:  # the JPEG crop of the plate travels with the event
        assert base64.b64decode(event["crop_jpeg_base64"])[:2] == b"\xff\xd8"


def _run_service_for(
    config: Path, phases: list[tuple[float, Callable[[], None] | None]]
) -> tuple[str, str]:
    """Run the CLI service; after each phase's seconds call its action; then SIGTERM.

    Fails if the service exits by itself at any point.
    """
    process = subprocess.Popen(
        [sys.executable, "-m", "streamer", "run", "--config", str(config)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for seconds, action in phases:
            try:
                process.wait(seconds)
            except subprocess.TimeoutExpired:
                if action is not None:
                    action()
                continue
            raise AssertionError(f"the service exited: {process.stderr.read()[-3000:]}")
    finally:
        process.terminate()
        stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr[-3000:]
    return stdout, stderr


def _rtsp_config(tmp_path: Path, url: str, triton_url: str | None = None) -> Path:
    """The camera at ``url``; Triton at ``triton_url``, or the embedded one."""
    config = tmp_path / "rtsp.yaml"
    at = f", url: '{triton_url}'" if triton_url else ""
    config.write_text(
        "cameras:\n"
        f"  - {{name: gate, url: '{url}', sample_fps: 5, read_timeout_s: 1,\n"
        "      stall_timeout_s: 3, reconnect_max_delay_s: 1}\n"
        f"triton: {{max_in_flight_per_camera: 2{at}}}\n"
        "events: {stdout: true}\n"
        "metrics: {port: 0}\nweb: {port: 0}\n"
    )
    return config


def test_rtsp_camera_gives_the_same_two_plates(tmp_path: Path) -> None:
    """The clip served in a loop by a real RTSP server (GStreamer), read in real time.

    The silver car shows for 1.5 s per loop; how many loops it takes to read it
    twice depends on how fast this machine infers, so the service runs until both
    plates are reported (at most 4 minutes), then stops.
    """
    from tests.rtsp_server import RtspServer

    with RtspServer(CLIP) as server:
        config = _rtsp_config(tmp_path, server.url("/cam"))
        process = subprocess.Popen(
            [sys.executable, "-m", "streamer", "run", "--config", str(config)],
            cwd=PROJECT_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        texts: list[str] = []
        reader = threading.Thread(
            target=lambda: texts.extend(
                json.loads(line)["text"] for line in process.stdout or [] if line.strip()
            ),
            daemon=True,
        )
        reader.start()
        try:
            deadline = time.monotonic() + 240
            while not set(texts) >= PLATES and time.monotonic() < deadline:
                assert process.poll() is None, "the service exited"
                time.sleep(0.5)
        finally:
            process.terminate()
            _, stderr = process.communicate(timeout=120)
            reader.join(10)
    assert process.returncode == 0, stderr[-3000:]
    assert sorted(set(texts)) == sorted(PLATES), (texts, stderr[-3000:])
    assert len(texts) == len(set(texts)), f"a plate was reported twice: {texts}"


def test_rtsp_camera_survives_kill_and_freeze_and_never_leaks_its_password(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    """Credentials in the URL; the server is killed and restarted, then frozen (SIGSTOP)
    and thawed: the service keeps running, reconnects each time, keeps reporting, and
    never prints the password. (The session's Triton: the embedded one is the other RTSP
    test's.)"""
    from tests.rtsp_server import RtspServer

    with RtspServer(CLIP) as server:
        url = server.url("/cam", userinfo="operator:s3cr3t-pw@")
        config = _rtsp_config(tmp_path, url, triton_server.grpc_url)
        stdout, stderr = _run_service_for(
            config,
            [
                (14, server.kill),  # killed mid-stream, after a loop of the clip or so
                (4, server.start),  # back on the same port
                (7, server.freeze),  # frozen: read timeout 1 s, detected within ~2 s
                (5, server.thaw),
                (8, None),
            ],
        )
    events = [json.loads(line) for line in stdout.splitlines() if line.strip()]
    assert "O567AM76" in [e["text"] for e in events], stderr[-3000:]
    assert all(e["camera"] == "gate" for e in events)
    # Connected at start, after the restart and after the freeze.
    assert stderr.count("camera gate: connected") >= 3, stderr[-3000:]
    assert "s3cr3t-pw" not in stdout + stderr
    assert "operator:" not in stdout + stderr


def _damaged_variants(folder: Path, count: int, seed: int = 7) -> list[Path]:
    """Copies of the clip with bytes flipped, cut mid-packet or garbage appended."""
    import random

    rng = random.Random(seed)
    data = CLIP.read_bytes()
    paths = []
    for i in range(count):
        kind = ("flip", "cut", "garbage", "flip+cut")[i % 4]
        damaged = bytearray(data)
        if "flip" in kind:
            for _ in range(rng.randint(5, 400)):
                position = rng.randrange(4096, len(damaged))
                damaged[position] ^= rng.randrange(1, 256)
        if "cut" in kind:
            cut = rng.randrange(len(damaged) // 10, len(damaged))
            cut += 1 if cut % 188 == 0 else 0  # never on a TS packet boundary
            del damaged[cut:]
        if kind == "garbage":
            damaged += rng.randbytes(rng.randint(100, 200_000))
        path = folder / f"damaged_{i:02d}_{kind.replace('+', '_')}.ts"
        path.write_bytes(bytes(damaged))
        paths.append(path)
    return paths


async def test_damaged_clips_are_survived_and_their_valid_parts_used(
    tmp_path: Path, triton_server: EmbeddedTriton
) -> None:
    variants = _damaged_variants(tmp_path, 24)  # six of each kind of damage
    events_file = tmp_path / "events.jsonl"
    cameras = "\n".join(
        f"  - {{name: d{i:02d}, url: '{path}', sample_fps: 0.5, realtime: false}}"
        for i, path in enumerate(variants)
    )
    config = tmp_path / "damaged.yaml"
    config.write_text(
        f"cameras:\n{cameras}\n"
        f"triton: {{url: '{triton_server.grpc_url}', max_in_flight_per_camera: 1,"
        " request_timeout_s: 300}\n"
        f"events: {{stdout: false, file: '{events_file}'}}\n"
        "metrics: {port: 0}\nweb: {port: 0}\n"
    )
    service = Service(load_config(config), once=True)
    assert await asyncio.wait_for(service.run(), 900) == 0
    sources = {name: camera.source.stats for name, camera in service.cameras.items()}
    assert all(stats.state == "ended" for stats in sources.values())
    kinds = {name: variants[int(name[1:])].name.split("_", 2)[2] for name in service.cameras}
    flipped = [sources[n] for n, k in kinds.items() if "flip" in k]
    assert sum(1 for stats in flipped if stats.decode_errors > 0) > len(flipped) // 2
    answered = {n: c.pipeline.stats.answered for n, c in service.cameras.items()}
    plates = {n: c.pipeline.stats.plates for n, c in service.cameras.items()}
    # Frames kept flowing from (nearly) every damaged file...
    assert sum(1 for n in answered.values() if n > 0) >= 22, answered
    # ...and where the picture survived, the plate was read: garbage after the end
    # leaves every frame intact; a cut keeps the frames before it. (Flipped bytes
    # in the clip's only keyframe smear every later frame, so those may read nothing.)
    assert all(plates[n] > 0 for n, k in kinds.items() if k == "garbage.ts"), plates
    cut = [n for n, k in kinds.items() if k == "cut.ts"]
    assert sum(1 for n in cut if plates[n] > 0) > len(cut) // 2, plates
    events = [json.loads(line) for line in events_file.read_text().splitlines()]
    assert {e["camera"] for e in events} <= set(service.cameras)
