"""Where an event's pictures are served, and links to them that carry their own permission.

The web server serves a pass's plate crop at ``/api/events/<id>/crop.jpg`` and the picture of
its vehicle at ``/api/events/<id>/frame.jpg`` (:func:`picture_path`). A webhook receiver gets
them as signed links: ``?expires=<Unix seconds>&sig=<HMAC-SHA256>`` over the path and the
expiry, with a key only this service holds (:class:`PictureLinks`). Such a link answers
without the master token until it expires, and only for that one picture; a changed path,
expiry or signature, or an expired link, is refused (403).

The key is ``web.link_secret`` when set (replicas behind one address must share it), else a
random key created once in ``web.link_key_path`` (mode 0600) and read at every start, so
that links given out before a restart still answer after it.

Written by hand: the standard library's ``hmac`` is the whole of it, and the web servers'
signed-URL helpers (nginx secure_link, CDNs) are not in this process.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import math
import os
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal
from urllib.parse import quote

Picture = Literal["crop", "frame"]
PICTURES: tuple[Picture, ...] = ("crop", "frame")
#: Bytes of a key this service creates.
KEY_BYTES = 32
#: A link's ``expires``: Unix seconds, ASCII digits.
_EXPIRES = re.compile(r"[0-9]{1,12}")


def picture_path(event_id: str, picture: Picture) -> str:
    """The path the web server serves a pass's picture at."""
    return f"/api/events/{quote(event_id, safe='')}/{picture}.jpg"


def picture_urls(
    base_url: str, event_id: str, links: PictureLinks | None, *, frame: bool
) -> dict[str, str]:
    """``crop_url`` (and ``frame_url`` when the vehicle's picture is kept) of an event under
    ``base_url`` ("": this server's paths), signed when ``links`` is given."""
    pictures: tuple[Picture, ...] = ("crop", "frame") if frame else ("crop",)
    return {
        f"{picture}_url": (
            links.signed(base_url, event_id, picture)
            if links is not None
            else base_url.rstrip("/") + picture_path(event_id, picture)
        )
        for picture in pictures
    }


class LinkRefusedError(Exception):
    """A signed link that does not open its picture (the reason is safe to show)."""


@dataclass(frozen=True)
class PictureLinks:
    """Signs picture links and checks them (see the module docstring)."""

    key: bytes
    ttl_s: float

    def signed(
        self, base_url: str, event_id: str, picture: Picture, now: float | None = None
    ) -> str:
        """The absolute link to ``picture`` of ``event_id`` under ``base_url``, valid for
        ``ttl_s`` from ``now``."""
        path = picture_path(event_id, picture)
        expires = math.ceil((time.time() if now is None else now) + self.ttl_s)
        return f"{base_url.rstrip('/')}{path}?expires={expires}&sig={self._sign(path, expires)}"

    def check(self, path: str, expires: str, sig: str, now: float | None = None) -> None:
        """Return when the link opens ``path``; raise :class:`LinkRefusedError` otherwise."""
        # ASCII digits only: str.isdigit() also takes "²", which int() refuses.
        if _EXPIRES.fullmatch(expires) is None:
            raise LinkRefusedError("this picture link is not valid")
        expected = self._sign(path, int(expires))
        if not hmac.compare_digest(expected.encode(), sig.encode("utf-8", "replace")):
            raise LinkRefusedError("this picture link is not valid")
        if int(expires) <= (time.time() if now is None else now):
            raise LinkRefusedError("this picture link has expired")

    def _sign(self, path: str, expires: int) -> str:
        digest = hmac.new(self.key, f"GET\n{path}\n{expires}".encode(), hashlib.sha256).digest()
        return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def load_or_create_key(path: Path) -> bytes:
    """The key kept in ``path``; a new random one written there (0600) when there is none.
    Blocking file I/O: call it in a thread."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:
            key = bytes.fromhex(path.read_text().strip())
        except ValueError:
            key = b""
        if len(key) < 16:
            raise ValueError(
                f"{path} does not hold a link key (64 hex digits): delete it to have a new "
                "one made (links given out with the old key stop answering)"
            ) from None
        return key
    key = secrets.token_bytes(KEY_BYTES)
    with os.fdopen(fd, "w") as file:
        file.write(key.hex() + "\n")
    return key


async def open_links(secret: str | None, key_path: Path, ttl_s: float) -> PictureLinks:
    """The service's links: keyed by ``secret`` when given, else by the key in ``key_path``
    (made when missing). Raises OSError or ValueError (the key file)."""
    key = secret.encode() if secret else await asyncio.to_thread(load_or_create_key, key_path)
    return PictureLinks(key, ttl_s)
