"""streamer.cli.replay: scoring rules on built events, then a replay of clips on real Triton."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from converters import assets
from streamer.cli import main as cli
from streamer.cli.replay import (
    calibration,
    calibration_markdown,
    confidence_curve,
    confidence_curve_markdown,
    load_truth,
    markdown,
    score,
    totals,
)
from streamer.config import ConfigError
from streamer.delivery.events import PlateEvent, Sighting
from streamer.inference.embedded.server import EmbeddedTriton

CLIP = assets.verify(assets.asset("yard_cam.ts"), assets.default_assets_dir())


def _event(
    text: str, event_id: str, version: int = 1, camera: str = "yard", confidence: float = 0.9
) -> PlateEvent:
    seen = Sighting("2026-12-01T12:00:00.000+00:00", 0.0)
    return PlateEvent(
        event_id=event_id,
        camera=camera,
        text=text,
        confidence=confidence,
        candidates=[(text, confidence)],
        track_id=1,
        reads=10,
        evidence=5,
        first_seen=seen,
        last_seen=seen,
        box=(0.0, 0.0, 1.0, 1.0),
        crop_jpeg=b"",
        reason="max_delay",
        first_seen_monotonic=time.monotonic(),
        version=version,
        decided_after_s=float(version * 2),
    )


def test_a_pass_counts_with_its_last_version() -> None:
    events = [
        _event("C567AM76", "a"),
        _event("O567AM76", "a", version=2),  # corrected: counts as O567AM76
        _event("Y836XH76", "b"),
        _event("Y836XH76", "c"),  # the same plate again: a duplicate
        _event("B840CK197", "d"),  # not in the truth: wrong
        _event("O567AM76", "e", camera="gate"),  # another camera's
    ]
    reads = Counter({"O567AM76": 9, "A123BC77": 1})
    s = score("yard", ["O567AM76", "Y836XH76", "A123BC77"], events, reads, 40)
    assert s.reported == ["B840CK197", "O567AM76", "Y836XH76", "Y836XH76"]
    assert (s.correct, s.wrong, s.duplicates, s.missed) == (2, 1, 1, 1)
    assert s.missed_reads == [("A123BC77", 1)]  # read once: under min_reads
    assert (s.corrections, s.wrong_first) == (1, 2)  # C567AM76 (then corrected), B840CK197
    assert (s.precision, s.recall) == (0.5, pytest.approx(2 / 3))
    assert s.decided_after_s == 2.0  # the median over the right passes: 4.0 (a v2), 2.0, 2.0


def test_calibration_counts_right_passes_by_confidence() -> None:
    events = [
        _event("O567AM76", "a", confidence=0.95),
        _event("O567AM76", "b", confidence=0.92),  # a duplicate: counted wrong
        _event("C567AM76", "c", confidence=0.2),  # wrong
        _event("Y836XH76", "d", confidence=0.25),
        _event("A123BC77", "e", confidence=1.0),  # the top band includes 1.0
    ]
    s = score("yard", ["O567AM76", "Y836XH76", "A123BC77"], events, Counter(), 40)
    assert s.passes == [
        ("A123BC77", 1.0, True),
        ("C567AM76", 0.2, False),
        ("O567AM76", 0.95, True),  # the surer of the two is the one that counts right
        ("O567AM76", 0.92, False),
        ("Y836XH76", 0.25, True),
    ]
    bins = {(b["from"], b["to"]): (b["passes"], b["correct"]) for b in calibration([s])}
    assert bins == {
        (0.0, 0.3): (2, 1),
        (0.3, 0.5): (0, 0),
        (0.5, 0.7): (0, 0),
        (0.7, 0.9): (0, 0),
        (0.9, 1.0): (3, 2),
    }
    table = calibration_markdown(calibration([s]))
    assert "| 0.0-0.3 | 2 | 1 | 0.50 | 0.23 |" in table and "| 0.3-0.5 | 0 | 0 | - | - |" in table


def test_recall_on_readable_plates_counts_the_plates_read_in_two_frames() -> None:
    events = [
        _event("O567AM76", "a"),
        _event("Y836XH76", "b"),
        _event("A123BC77", "c"),  # reported though read once: correct, but not readable
    ]
    # O567AM76 passes twice (listed twice), read in 9 frames, reported once; Y836XH76 read
    # in 2 frames (readable) and reported; A123BC77 read once; B840CK197 never read.
    reads = Counter({"O567AM76": 9, "Y836XH76": 2, "A123BC77": 1, "C567AM76": 5})
    expected = ["O567AM76", "Y836XH76", "O567AM76", "A123BC77", "B840CK197"]
    s = score("yard", expected, events, reads, 40)
    assert s.readable_plates == ["O567AM76", "O567AM76", "Y836XH76"]
    assert (s.readable, s.readable_correct) == (3, 2)
    assert s.readable_recall == pytest.approx(2 / 3)
    assert s.recall == pytest.approx(3 / 5)
    data = s.to_dict()
    assert (data["readable"], data["readable_recall"]) == (3, pytest.approx(2 / 3))
    # A clip whose plates were never read has nothing readable: no recall on readable.
    blind = score("night", ["O567AM76"], [], Counter({"C567AM76": 4}), 20)
    assert (blind.readable, blind.readable_recall, blind.recall) == (0, None, 0.0)
    total = totals([s, blind])
    assert (total["readable"], total["readable_correct"]) == (3, 2)
    assert total["readable_recall"] == pytest.approx(2 / 3)
    assert total["recall"] == pytest.approx(3 / 6)
    table = markdown([s, blind], total)
    header, rule, *rows = table.splitlines()
    assert header.count("|") == rule.count("|") == rows[0].count("|") == rows[-1].count("|")
    assert "| recall | readable | recall on readable |" in header
    assert "| 0.60 | 3 | 0.67 |" in rows[0] and "| 0.00 | 0 | - |" in rows[1]
    assert "| 0.50 | 3 | 0.67 |" in rows[-1]


def test_the_confidence_curve_withholds_the_passes_under_each_threshold() -> None:
    yard = score(
        "yard",
        ["O567AM76", "Y836XH76", "A123BC77"],
        [
            _event("O567AM76", "a", confidence=0.95),
            _event("O567AM76", "b", confidence=0.6),  # a duplicate: wrong at any threshold
            _event("Y836XH76", "c", confidence=0.35),  # right, readable
            _event("A123BC77", "d", confidence=0.15),  # right, read once: not readable
            _event("C567AM76", "e", confidence=0.45),  # wrong
        ],
        Counter({"O567AM76": 20, "Y836XH76": 3, "A123BC77": 1}),
        40,
    )
    blur = score(
        "blur", [], [_event("B840CK197", "x", camera="blur", confidence=0.2)], Counter(), 9
    )
    curve = confidence_curve([yard, blur], (0.0, 0.2, 0.4, 0.5, 0.99))
    got = {
        c["min_confidence"]: (c["passes"], c["correct"], c["withheld"], c["withheld_correct"])
        for c in curve
    }
    assert got == {
        0.0: (6, 3, 0, 0),
        0.2: (5, 2, 1, 1),  # 0.15 (right) withheld; 0.2 kept: at least the threshold
        0.4: (3, 1, 3, 2),
        0.5: (2, 1, 4, 2),
        0.99: (0, 0, 6, 3),
    }
    by = {c["min_confidence"]: c for c in curve}
    assert by[0.0]["precision"] == 0.5 and by[0.0]["recall"] == 1.0
    assert by[0.0]["readable_recall"] == 1.0  # O567AM76 and Y836XH76: both reported
    assert by[0.2]["readable_recall"] == 1.0 and by[0.2]["recall"] == pytest.approx(2 / 3)
    assert by[0.4]["readable_recall"] == 0.5 and by[0.4]["precision"] == pytest.approx(1 / 3)
    assert by[0.99]["precision"] is None and by[0.99]["recall"] == 0.0
    # Nothing listed, nothing readable: no recall at all.
    assert confidence_curve([blur], (0.0,))[0]["recall"] is None
    table = confidence_curve_markdown(curve, default=0.5)
    assert "| **0.5** (default) | 2 | 1 | 0.50 | 0.33 | 0.50 | 4 | 2 |" in table
    assert "| 0 | 6 | 3 | 0.50 | 1.00 | 1.00 | 0 | 0 |" in table
    assert "| 0.99 | 0 | 0 | - | 0.00 | 0.00 | 6 | 3 |" in table
    assert table.count("(default)") == 1


def test_an_unreadable_clip_scores_by_its_events() -> None:
    quiet = score("blur", [], [], Counter({"EO6HYO6": 3}), 20)
    assert (quiet.precision, quiet.recall, quiet.top_reads) == (None, None, [("EO6HYO6", 3)])
    noisy = score("blur", [], [_event("A123BC77", "x", camera="blur")], Counter(), 20)
    total = totals([quiet, noisy])
    assert total["unreadable_clips_with_events"] == 1 and total["wrong"] == 1
    assert total["precision"] == 0.0 and total["recall"] is None


def test_a_bad_truth_file_names_the_file_and_the_camera(tmp_path: Path) -> None:
    truth = tmp_path / "truth.yaml"
    truth.write_text("yard: O567AM76\nblur: []\n")
    with pytest.raises(ConfigError) as info:
        load_truth(truth)
    assert "truth.yaml" in str(info.value) and "yard" in str(info.value)
    truth.write_text("yard: [o567am76]\nblur:\n")
    assert load_truth(truth) == {"yard": ["O567AM76"], "blur": []}


@pytest.mark.skipif(shutil.which("ffmpeg") is None, reason="needs Debian's ffmpeg")
def test_replay_scores_the_clips_through_the_service(
    tmp_path: Path, triton_server: EmbeddedTriton, capsys: pytest.CaptureFixture[str]
) -> None:
    # The yard clip, and 3 s of it blurred beyond reading (no plate can be read: no event).
    blurred = tmp_path / "blurred.ts"
    command = ["ffmpeg", "-v", "error", "-y", "-i", str(CLIP), "-t", "3", "-vf", "boxblur=24"]
    command += ["-c:v", "libx264", "-preset", "ultrafast", "-f", "mpegts", str(blurred)]
    subprocess.run(command, check=True, timeout=120)
    config = tmp_path / "clips.yaml"
    config.write_text(
        f"cameras:\n  - {{name: yard, url: '{CLIP}'}}\n  - {{name: blur, url: '{blurred}'}}\n"
        f"triton: {{url: '{triton_server.grpc_url}'}}\n"
        # What replay switches off must not matter: a webhook that nothing listens to.
        "webhooks: [{name: x, url: 'http://127.0.0.1:9/',"
        " secret: whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}]\n"
        f"outbox: {{path: '{tmp_path / 'outbox.sqlite3'}'}}\n"
    )
    truth = tmp_path / "truth.yaml"
    truth.write_text("yard: [O567AM76, Y836XH76]\nblur: []\n")
    out = tmp_path / "report.json"
    code = cli.main(["replay", "--config", str(config), "--truth", str(truth), "--json", str(out)])
    assert code == 0
    report = json.loads(out.read_text())
    yard, blur = report["clips"]
    assert (yard["camera"], yard["reported"], yard["precision"], yard["recall"]) == (
        "yard",
        ["O567AM76", "Y836XH76"],
        1.0,
        1.0,
    )
    assert yard["frames"] > 10 and yard["decided_after_s"] > 0  # frames the gate let through
    assert yard["top_reads"][0]["text"] == "O567AM76"
    assert blur["reported"] == [] and blur["frames"] >= 1
    assert (
        report["total"]["precision"] == 1.0 and report["total"]["unreadable_clips_with_events"] == 0
    )
    table = capsys.readouterr().out
    assert re.search(
        r"\| yard \| O567AM76 Y836XH76 \| O567AM76 \([01]\.\d\d\) "
        r"Y836XH76 \([01]\.\d\d\) \| 2 \| 0 \|",
        table,
    )
    # Each pass with its confidence, and whether it was right.
    assert [(p["text"], p["correct"]) for p in yard["passes"]] == [
        ("O567AM76", True),
        ("Y836XH76", True),
    ]
    assert all(0.0 < p["confidence"] <= 1.0 for p in yard["passes"])
    assert yard["withheld"] == 0
    assert not (tmp_path / "outbox.sqlite3").exists()  # nothing was delivered, or stored
