"""streamer.domain.known_plates: matching rules, then a misread plate on footage (Triton)."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import pytest
from rapidfuzz.distance import Levenshtein

from bench import accuracy
from converters import assets
from streamer.app import Service
from streamer.config import load_config
from streamer.domain.known_plates import KnownList, KnownPlates, Match
from streamer.inference.embedded.server import EmbeddedTriton


def test_a_plate_within_the_distance_matches() -> None:
    known = KnownPlates([KnownList("staff", ("O567AM76", "A123BC77"), max_distance=2)])
    assert known.match("C567AC76") == Match("staff", "O567AM76", 2, False, False)
    assert known.match("A123BC77") == Match("staff", "A123BC77", 0, False, False)
    assert known.match("Y836XH76") is None  # 6 edits away


def test_the_closest_match_wins_then_the_first_list() -> None:
    known = KnownPlates(
        [
            KnownList("visitors", ("O567AM77",), max_distance=1),
            KnownList("staff", ("O567AM76",), max_distance=1, snap=True),
            KnownList("fleet", ("O567AM76",), max_distance=1),
        ]
    )
    assert known.match("O567AM76") == Match("staff", "O567AM76", 0, False, True)
    assert known.match("O567AM7") == Match("visitors", "O567AM77", 1, False, False)


def test_a_pattern_matches_whole_at_distance_zero_and_never_snaps() -> None:
    known = KnownPlates(
        [KnownList("stolen", (r"X\d{3}..77",), max_distance=2, snap=True, alert=True)]
    )
    assert known.match("X123AB77") == Match("stolen", r"X\d{3}..77", 0, True, False)
    assert known.match("X123AB777") is None


def test_no_lists_match_nothing() -> None:
    assert not KnownPlates() and KnownPlates().match("O567AM76") is None


def test_a_negative_distance_is_refused() -> None:
    with pytest.raises(ValueError, match="max_distance"):
        KnownList("x", ("A",), max_distance=-1)


def test_match_to_dict_is_what_events_carry() -> None:
    match = Match("staff", "O567AM76", 1, True, True)
    assert match.to_dict() == {"label": "staff", "plate": "O567AM76", "distance": 1}


# --------------------------------------------------------------------------- on footage

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


@pytest.fixture(scope="module")
def clip_marked(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The yard clip with two marks on the black car's plate (bench/accuracy.py's marked-2):
    the recogniser then misreads O567AM76 by two characters in nearly every frame (P569AM76
    or P560AM76, docs/ACCURACY.md)."""
    (variant,) = [v for v in accuracy.VARIANTS if v.name == "marked-2"]
    return accuracy.build(variant, CLIP, tmp_path_factory.mktemp("known"))


async def _black_car(tmp_path: Path, clip: Path, triton: EmbeddedTriton, known: str) -> dict:
    events_file = tmp_path / "events.jsonl"
    events_file.unlink(missing_ok=True)
    config = tmp_path / "known.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{clip}', sample_fps: 5, realtime: false}}\n"
        f"triton: {{url: '{triton.grpc_url}', max_in_flight_per_camera: 1}}\n"
        f"events: {{stdout: false, file: '{events_file}'}}\n"
        f"known_plates: {known}\n"
        "metrics: {enabled: false}\nweb: {enabled: false}\n"
    )
    assert await asyncio.wait_for(Service(load_config(config), once=True).run(), 600) == 0
    latest: dict[str, dict] = {}  # each pass at its last version
    for line in events_file.read_text().splitlines():
        event = json.loads(line)
        if event["version"] > latest.get(event["event_id"], {"version": 0})["version"]:
            latest[event["event_id"]] = event
    black = [e for e in latest.values() if e["box"][0] > 1000]  # on the right
    assert len(black) == 1, latest
    return black[0]


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")
async def test_a_consistent_two_character_misread_matches_and_snaps_to_the_known_plate(
    tmp_path: Path, clip_marked: Path, triton_server: EmbeddedTriton
) -> None:
    plain = await _black_car(tmp_path, clip_marked, triton_server, "{}")
    assert plain["text"] != "O567AM76" and "match" not in plain  # the misread, as reported
    assert Levenshtein.distance(plain["text"], "O567AM76") == 2

    listed = await _black_car(
        tmp_path, clip_marked, triton_server, "{staff: {plates: [O567AM76], max_distance: 2}}"
    )
    assert listed["text"] == plain["text"]
    assert listed["match"] == {"label": "staff", "plate": "O567AM76", "distance": 2}

    snapped = await _black_car(
        tmp_path,
        clip_marked,
        triton_server,
        "{staff: {plates: [O567AM76], max_distance: 2, snap: true, alert: true}}",
    )
    # What the evidence voted for when the pass was decided.
    assert snapped["text"] == "O567AM76" != snapped["voted_text"]
    assert 1 <= Levenshtein.distance(snapped["voted_text"], "O567AM76") <= 2
    assert snapped["match"]["plate"] == "O567AM76" and snapped["alert"] is True
