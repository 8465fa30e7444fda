"""The real weights and media the project uses: where they live, how to fetch and check them.

The files are never committed.  They are read from an assets folder (see
`default_assets_dir`) and, where missing, downloaded from their public origin and
checked against a pinned sha256.  Standard library only, so that the check runs
before any heavy dependency is imported.

    from converters.assets import resolve
    lprnet_path, stn_path = resolve(["lprnet", "stn"])                 # verify only
    (detector_path,) = resolve(["detector"], download=True)            # fetch if missing
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import IO, Literal

__all__ = [
    "ASSETS",
    "CAR",
    "CAT",
    "DETECTOR",
    "ENV_VAR",
    "FETCH_COMMAND",
    "LPRNET",
    "MEDIA",
    "NAMES",
    "STN",
    "WEIGHTS",
    "YARD_CAM",
    "Asset",
    "AssetError",
    "asset",
    "clear_hash_cache",
    "default_assets_dir",
    "fetch",
    "resolve",
    "sha256_of",
    "verify",
]

ENV_VAR = "LPR_ASSETS_DIR"
FETCH_COMMAND = "python -m converters fetch"
USER_AGENT = "lpr-streamer-assets/1 (python urllib)"
CHUNK = 1 << 16

UrlKind = Literal["direct", "pypi-json"]


@dataclass(frozen=True)
class Asset:
    """One pinned file.

    path: where it lives under the assets root, relative, POSIX separators.
    sha256: hex digest of the file itself (for a zip member: of the extracted member).
    url: where to download it.  With ``url_kind="direct"`` the URL serves the file, or
        the zip archive holding ``zip_member``.  With ``url_kind="pypi-json"`` it is a
        PyPI JSON API URL (``https://pypi.org/pypi/<name>/<version>/json``); the wheel's
        URL is looked up there at download time, since PyPI's file paths are hashed.
    zip_member: name of the file inside the downloaded archive (e.g. a wheel), if any.
    """

    path: str
    sha256: str
    url: str
    zip_member: str | None = None
    license: str = ""
    description: str = ""
    url_kind: UrlKind = "direct"

    @property
    def name(self) -> str:
        """File name, for messages."""
        return self.path.rsplit("/", 1)[-1]

    @property
    def origin(self) -> str:
        """Where the bytes come from, in words, for messages."""
        where = f"the wheel listed at {self.url}" if self.url_kind == "pypi-json" else self.url
        return f"{where}, member {self.zip_member}" if self.zip_member else where


class AssetError(Exception):
    """An asset is missing, corrupt or could not be downloaded; the message says what to do."""


_EGSHES = (
    "https://raw.githubusercontent.com/EgShes/one_task_multiple_infras/"
    "c981015b9de734173fd02f3de65ce6ea046fde36"
)
_ETOKONE = (
    "https://raw.githubusercontent.com/EtokonE/License_Plate_Recognition/"
    "96346d3d0b53efc006376b99c50f3adedb3ba6cd"
)

LPRNET = Asset(
    path="weights/lprnet.pth",
    sha256="369ff38f6afa894628e6675f448fa0ff87d532fe1f099e6fc3b9a0fd2a8570b4",
    url=f"{_EGSHES}/nn/nn/weights/lprnet.pth",
    license="MIT",
    description="LPRNet checkpoint (dict, key net_state_dict), 23 classes, input 3x24x94",
)
STN = Asset(
    path="weights/stn.pth",
    sha256="4b42329b16c1c2a1c90444cb64dce04f6f3c5e32fa97fa07c4eaa9dec52a0f01",
    url=f"{_EGSHES}/nn/nn/weights/stn.pth",
    license="MIT",
    description="Spatial transformer checkpoint (dict, key net_state_dict), 3x24x94 in and out",
)
DETECTOR = Asset(
    path="weights/plate_detector_yolov8n.pt",
    sha256="58f6ad86f35f09574e13484ead3346ae8cc052facae150041ed4a894ac2f3828",
    url="https://pypi.org/pypi/fastanpr/0.1.13/json",
    url_kind="pypi-json",
    zip_member="fastanpr/best.pt",
    license="AGPL-3.0",
    description="Ultralytics YOLOv8n plate detector, one class License_Plate (fastanpr 0.1.13)",
)
CAR = Asset(
    path="media/car.jpg",
    sha256="187d540dbca3bbc82832cecafe309b0233aa48f2c384a739ba4de32f27112ba4",
    url=f"{_EGSHES}/nn/tests/data/car.jpg",
    license="MIT",
    description="780x439 photo of a van with plate B840CK197",
)
CAT = Asset(
    path="media/cat.jpeg",
    sha256="24a6011ee4c9f4037010dfd98e56785d896f0b649a363781fd0dc25920a00ab7",
    url=f"{_EGSHES}/inference_triton/tests/data/cat.jpeg",
    license="MIT",
    description="photo of a cat: no plates",
)
YARD_CAM = Asset(
    path="media/yard_cam.ts",
    sha256="e4b05e70f9f525ae29248cf777325f88f5d710241aacda341f34112969a9bfb4",
    url=f"{_ETOKONE}/data/test/09_40_26_8000000.ts",
    license="none stated: test use only, never redistributed",
    description="1920x1080 H.264 CCTV clip, 15 fps, 120 frames, plates O567AM76 and Y836XH76",
)

WEIGHTS: tuple[Asset, ...] = (LPRNET, STN, DETECTOR)
MEDIA: tuple[Asset, ...] = (CAR, CAT, YARD_CAM)
ASSETS: tuple[Asset, ...] = WEIGHTS + MEDIA

NAMES: Mapping[str, Asset] = MappingProxyType(
    {
        "lprnet": LPRNET,
        "stn": STN,
        "detector": DETECTOR,
        "car": CAR,
        "cat": CAT,
        "yard_cam": YARD_CAM,
    }
)


def asset(name: str) -> Asset:
    """Look an asset up by short name ("lprnet", "detector", ...), relative path or file name."""
    if name in NAMES:
        return NAMES[name]
    for a in ASSETS:
        if name in (a.path, a.name):
            return a
    known = ", ".join(NAMES)
    raise KeyError(f"unknown asset {name!r}; known: {known} (or their paths under the root)")


# --------------------------------------------------------------------------- location


def _project_root() -> Path:
    return Path(__file__).resolve().parent.parent


def default_assets_dir() -> Path:
    """The assets folder: ``$LPR_ASSETS_DIR``; else ``<project>/../shared/assets`` if it
    exists; else ``$XDG_CACHE_HOME/lpr-streamer/assets`` (``~/.cache`` by default)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    shared = _project_root().parent / "shared" / "assets"
    if shared.is_dir():
        return shared
    xdg = os.environ.get("XDG_CACHE_HOME")
    cache = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return cache / "lpr-streamer" / "assets"


def _fetch_hint(root: Path) -> str:
    if os.environ.get(ENV_VAR) is None and Path(root) == default_assets_dir():
        return f"`{FETCH_COMMAND}`"
    return f"`{ENV_VAR}={root} {FETCH_COMMAND}`"


# --------------------------------------------------------------------------- hashing

_hash_cache: dict[tuple[str, int, int], str] = {}
_hash_lock = threading.Lock()


def _stat_key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def sha256_of(path: Path) -> str:
    """sha256 of a file, hashed in chunks, cached in-process by (path, size, mtime)."""
    key = _stat_key(path)
    with _hash_lock:
        cached = _hash_cache.get(key)
    if cached is not None:
        return cached
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    digest = h.hexdigest()
    with _hash_lock:
        _hash_cache[key] = digest
    return digest


def clear_hash_cache() -> None:
    """Forget every cached digest (for long-running processes whose files may change)."""
    with _hash_lock:
        _hash_cache.clear()


def _remember(path: Path, digest: str) -> None:
    key = _stat_key(path)
    with _hash_lock:
        _hash_cache[key] = digest


# --------------------------------------------------------------------------- verify


def verify(a: Asset, root: Path | str) -> Path:
    """Return ``root / a.path`` if it exists and its sha256 matches; else raise AssetError.

    Only reads, so a read-only root (like the shared folder) works.
    """
    target = Path(root) / a.path
    if not target.is_file():
        raise AssetError(
            f"asset {a.path} is missing: no file at {target}. Run {_fetch_hint(Path(root))} "
            f"to download it from {a.origin}, or set {ENV_VAR} to a folder that holds it."
        )
    try:
        actual = sha256_of(target)
    except OSError as e:
        raise AssetError(f"asset {a.path}: cannot read {target}: {e}") from e
    if actual != a.sha256:
        raise AssetError(_corrupt_message(a, Path(root), target, actual))
    return target


def _corrupt_message(a: Asset, root: Path, target: Path, actual: str) -> str:
    return (
        f"asset {a.path} at {target} has the wrong sha256:\n"
        f"  expected {a.sha256}\n"
        f"  actual   {actual}\n"
        f"It is corrupt, truncated or a different version. Delete it (rm '{target}') and run "
        f"{_fetch_hint(root)} to download it again from {a.origin}."
    )


# --------------------------------------------------------------------------- download


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"  # pragma: no cover


def _open(url: str, timeout_s: float, what: str) -> http.client.HTTPResponse:
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    try:
        resp: http.client.HTTPResponse = urllib.request.urlopen(req, timeout=timeout_s)
        return resp
    except urllib.error.HTTPError as e:
        raise AssetError(f"{what}: HTTP {e.code} {e.reason} from {url}") from e
    except urllib.error.URLError as e:
        if isinstance(e.reason, TimeoutError):
            raise AssetError(
                f"{what}: timed out after {timeout_s:g} s waiting for {url} "
                "(raise timeout_s or retry)"
            ) from e
        raise AssetError(f"{what}: cannot reach {url}: {e.reason}") from e
    except TimeoutError as e:
        raise AssetError(
            f"{what}: timed out after {timeout_s:g} s waiting for {url} (raise timeout_s or retry)"
        ) from e
    except (OSError, ValueError) as e:
        raise AssetError(f"{what}: cannot open {url}: {e}") from e


def _download(
    url: str,
    out: IO[bytes],
    *,
    label: str,
    progress: Callable[[str], None] | None,
    timeout_s: float,
) -> tuple[int, str]:
    """Stream ``url`` into ``out``; return (bytes written, sha256). Raises AssetError."""
    resp = _open(url, timeout_s, label)
    h = hashlib.sha256()
    done = 0
    with resp:
        length = resp.headers.get("Content-Length")
        total = int(length) if length and length.isdigit() else None
        if progress:
            size = _human(total) if total is not None else "unknown size"
            progress(f"{label}: downloading {url} ({size})")
        next_pct = 10
        next_bytes = 1 << 20
        try:
            while chunk := resp.read(CHUNK):
                out.write(chunk)
                h.update(chunk)
                done += len(chunk)
                if not progress:
                    continue
                if total:
                    pct = done * 100 // total
                    if pct >= next_pct:
                        progress(f"{label}: {done}/{total} bytes ({pct}%)")
                        next_pct = (pct // 10 + 1) * 10
                elif done >= next_bytes:
                    progress(f"{label}: {done} bytes")
                    next_bytes += 1 << 20
        except TimeoutError as e:
            raise AssetError(
                f"{label}: timed out after {timeout_s:g} s without data from {url} "
                f"after {done} bytes (raise timeout_s or retry)"
            ) from e
        except OSError as e:
            raise AssetError(f"{label}: download from {url} failed after {done} bytes: {e}") from e
    if total is not None and done != total:
        raise AssetError(f"{label}: download from {url} truncated: got {done} of {total} bytes")
    if progress and not total:
        progress(f"{label}: {done} bytes (100%)")
    return done, h.hexdigest()


def _wheel_url(a: Asset, *, timeout_s: float) -> tuple[str, str | None]:
    """Ask the PyPI JSON API for the wheel's URL and its published sha256."""
    label = f"{a.path} (index)"
    resp = _open(a.url, timeout_s, label)
    try:
        with resp:
            meta = json.loads(resp.read().decode("utf-8"))
    except TimeoutError as e:
        raise AssetError(f"{label}: timed out after {timeout_s:g} s reading {a.url}") from e
    except (OSError, ValueError) as e:
        raise AssetError(f"{label}: bad answer from {a.url}: {e}") from e
    files = meta.get("urls") if isinstance(meta, dict) else None
    wheels = [
        f
        for f in files or []
        if isinstance(f, dict) and f.get("packagetype") == "bdist_wheel" and f.get("url")
    ]
    if not wheels:
        raise AssetError(f"{label}: {a.url} lists no wheel to take {a.zip_member} from")
    wheels.sort(key=lambda f: not str(f.get("filename", "")).endswith("-none-any.whl"))
    chosen = wheels[0]
    digest = (chosen.get("digests") or {}).get("sha256")
    return urllib.parse.urljoin(a.url, str(chosen["url"])), digest


def _lfs_hint(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return ""
    if head.startswith(b"version https://git-lfs"):
        return " (the server sent a Git LFS pointer, not the file itself)"
    return ""


def _fetch_one(
    a: Asset,
    root: Path,
    *,
    progress: Callable[[str], None] | None,
    timeout_s: float,
) -> Path:
    target = root / a.path
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise AssetError(
            f"asset {a.path}: cannot create {target.parent}: {e}. "
            f"Set {ENV_VAR} to a writable folder and run {FETCH_COMMAND}."
        ) from e
    temps: list[Path] = []

    def temp(suffix: str) -> IO[bytes]:
        try:
            f = tempfile.NamedTemporaryFile(  # noqa: SIM115 - closed by the caller
                dir=target.parent, prefix=f".{a.name}.", suffix=suffix, delete=False
            )
        except OSError as e:
            raise AssetError(
                f"asset {a.path}: cannot write in {target.parent}: {e}. "
                f"Set {ENV_VAR} to a writable folder and run {FETCH_COMMAND}."
            ) from e
        temps.append(Path(f.name))
        return f

    try:
        if a.zip_member is None:
            with temp(".part") as out:
                _, digest = _download(
                    a.url, out, label=a.path, progress=progress, timeout_s=timeout_s
                )
            staged = temps[-1]
        else:
            url, archive_digest = a.url, None
            if a.url_kind == "pypi-json":
                url, archive_digest = _wheel_url(a, timeout_s=timeout_s)
            with temp(".zip.part") as out:
                _, got = _download(url, out, label=a.path, progress=progress, timeout_s=timeout_s)
            archive = temps[-1]
            if archive_digest and got != archive_digest:
                raise AssetError(
                    f"asset {a.path}: the archive from {url} has sha256 {got}, but the index "
                    f"{a.url} publishes {archive_digest}; the download is corrupt, retry."
                )
            staged, digest = _extract(a, archive, url, temp)
        if digest != a.sha256:
            raise AssetError(
                f"asset {a.path}: downloaded from {a.origin}, but its sha256 does not match"
                f"{_lfs_hint(staged)}:\n"
                f"  expected {a.sha256}\n"
                f"  actual   {digest}\n"
                "Nothing was written. The origin may have changed or the download was altered; "
                f"retry, or fetch the file by hand and place it at {target}."
            )
        os.chmod(staged, 0o644)
        os.replace(staged, target)
        temps.remove(staged)
        _remember(target, digest)
        if progress:
            progress(
                f"{a.path}: ok, sha256 {digest[:12]}..., saved to {target} "
                f"(licence: {a.license or 'not stated'})"
            )
        return target
    finally:
        for p in temps:
            p.unlink(missing_ok=True)


def _extract(
    a: Asset, archive: Path, url: str, temp: Callable[[str], IO[bytes]]
) -> tuple[Path, str]:
    assert a.zip_member is not None
    try:
        with zipfile.ZipFile(archive) as zf:
            try:
                src = zf.open(a.zip_member)
            except KeyError as e:
                raise AssetError(f"asset {a.path}: {url} has no member {a.zip_member!r}") from e
            h = hashlib.sha256()
            with src, temp(".part") as out:
                while chunk := src.read(1 << 20):
                    out.write(chunk)
                    h.update(chunk)
                staged = Path(out.name)
    except zipfile.BadZipFile as e:
        raise AssetError(f"asset {a.path}: {url} is not a valid zip archive: {e}") from e
    return staged, h.hexdigest()


def fetch(
    assets: Iterable[Asset] = ASSETS,
    root: Path | str | None = None,
    *,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 60.0,
    force: bool = False,
) -> list[Path]:
    """Make sure every asset is present and valid under ``root``; download what is missing.

    A present file with the right sha256 is kept (nothing is downloaded).  A present
    file with the wrong sha256 raises AssetError (it is never overwritten silently)
    unless ``force``, in which case it is downloaded again and replaced.  Downloads
    go to a temporary file in the target folder, are checked, then renamed into
    place: a partial or wrong file never appears under the final name.
    ``timeout_s`` bounds each network wait (connect, or a read without data).
    """
    base = Path(root) if root is not None else default_assets_dir()
    paths: list[Path] = []
    for a in assets:
        target = base / a.path
        if target.is_file():
            try:
                paths.append(verify(a, base))
                if progress:
                    progress(f"{a.path}: present, sha256 ok (licence: {a.license or 'not stated'})")
                continue
            except AssetError:
                if not force:
                    raise
                if progress:
                    progress(f"{a.path}: wrong sha256, downloading again (force)")
        paths.append(_fetch_one(a, base, progress=progress, timeout_s=timeout_s))
    return paths


def resolve(
    items: Iterable[str | Asset] | str | Asset,
    root: Path | str | None = None,
    download: bool = False,
    *,
    progress: Callable[[str], None] | None = None,
    timeout_s: float = 60.0,
) -> list[Path]:
    """Paths of the named assets (names as `asset` accepts, or Asset objects), verified.

    With ``download=True`` missing files are fetched first; a corrupt file still
    raises AssetError.
    """
    if isinstance(items, str | Asset):
        items = [items]
    wanted = [x if isinstance(x, Asset) else asset(x) for x in items]
    base = Path(root) if root is not None else default_assets_dir()
    if download:
        return fetch(wanted, base, progress=progress, timeout_s=timeout_s)
    return [verify(a, base) for a in wanted]
