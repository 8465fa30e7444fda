"""Signed picture links: they open their one picture until they expire, and nothing else."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from streamer.domain.picture_links import (
    LinkRefusedError,
    PictureLinks,
    load_or_create_key,
    picture_path,
)

EVENT = "afe9dff3-5e5e-48e4-95be-a8a044fbe94f"


def _parts(url: str) -> tuple[str, str, str]:
    path, _, query = url.removeprefix("https://lpr.example").partition("?")
    fields = dict(part.split("=", 1) for part in query.split("&"))
    return path, fields["expires"], fields["sig"]


def test_a_link_opens_its_picture_until_it_expires() -> None:
    links = PictureLinks(b"0123456789abcdef0123456789abcdef", ttl_s=60)
    url = links.signed("https://lpr.example/", EVENT, "crop", now=1000.0)
    path, expires, sig = _parts(url)
    assert path == picture_path(EVENT, "crop") == f"/api/events/{EVENT}/crop.jpg"
    assert expires == "1060"
    links.check(path, expires, sig, now=1059.9)
    with pytest.raises(LinkRefusedError, match="expired"):
        links.check(path, expires, sig, now=1060.0)


def test_a_changed_path_expiry_signature_or_key_is_refused() -> None:
    links = PictureLinks(b"k" * 32, ttl_s=60)
    path, expires, sig = _parts(links.signed("https://lpr.example", EVENT, "crop", now=0.0))
    frame = picture_path(EVENT, "frame")
    for args in (
        (frame, expires, sig),  # the crop's link does not open the vehicle's picture
        (path, str(int(expires) + 86_400), sig),  # a later expiry
        (path, expires, sig[:-1] + ("A" if sig[-1] != "A" else "B")),
        (path, expires, ""),
        (path, "1e9", sig),
        (path, "-1", sig),
    ):
        with pytest.raises(LinkRefusedError, match="not valid"):
            links.check(*args, now=1.0)
    with pytest.raises(LinkRefusedError, match="not valid"):
        PictureLinks(b"x" * 32, ttl_s=60).check(path, expires, sig, now=1.0)


def test_the_key_file_is_made_once_private_and_read_after(tmp_path: Path) -> None:
    path = tmp_path / "data" / "link.key"
    key = load_or_create_key(path)
    assert len(key) == 32 and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert load_or_create_key(path) == key  # a restart signs and checks with the same key
    path.write_text("not hex\n")
    with pytest.raises(ValueError, match="does not hold a link key"):
        load_or_create_key(path)
