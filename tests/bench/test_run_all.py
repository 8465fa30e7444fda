"""bench.run_all: a real (small) run of the suite, the document it writes, and re-rendering.

P3 is the one phase that needs no Triton: it decodes the real clip with the service's ingest
and with Debian's ffmpeg, so this runs the suite's machinery end to end in a few seconds.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bench import run_all
from bench.common import PROJECT_ROOT, Figure


@pytest.fixture(scope="module")
def p3_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    folder = tmp_path_factory.mktemp("bench")
    doc, raw = folder / "PERF.md", folder / "raw.json"
    command = [sys.executable, "-m", "bench", "--quick", "--only", "P3"]
    result = subprocess.run(
        [*command, "--doc", str(doc), "--json", str(raw)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return doc, raw, json.loads(raw.read_text())


def test_p3_measures_both_sides_every_round(p3_run: tuple[Path, Path, dict[str, Any]]) -> None:
    _, _, data = p3_run
    figures = {f["key"]: f for f in data["figures"]}
    assert set(figures) == {"P3", "P3-decode", "P3-decode_bgr"}
    p3 = figures["P3"]
    rounds = data["meta"]["plan"]["p3_rounds"]
    assert p3["numerator"]["n"] == p3["denominator"]["n"] == rounds
    # CPU ms per decoded 1080p frame: a few ms on any machine, never zero.
    for side in ("numerator", "denominator"):
        assert all(0.3 < s < 200 for s in p3[side]["samples"]), p3[side]
    assert p3["ratio"] == pytest.approx(p3["numerator"]["median"] / p3["denominator"]["median"])
    assert p3["verdict"] in {"PASS", "MISS"}
    assert p3["target"] == 1.2 and p3["target_op"] == "<="


def test_the_document_has_the_row_and_how_it_was_run(
    p3_run: tuple[Path, Path, dict[str, Any]],
) -> None:
    doc, _, data = p3_run
    text = doc.read_text()
    p3 = next(f for f in data["figures"] if f["key"] == "P3")
    row = next(line for line in text.splitlines() if line.startswith("| P3 |"))
    assert f"{p3['ratio']:.2f}" in row
    assert f"**{p3['verdict']}**" in row
    assert "--only P3" in text  # the command
    assert "nproc" in text  # the cores it ran on
    assert "Smoke run" in text  # --quick says it is not the measurement


def test_render_writes_the_same_document_again(
    p3_run: tuple[Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    doc, raw, _ = p3_run
    again = tmp_path / doc.name
    assert run_all.main(["--render", str(raw), "--doc", str(again)]) == 0
    assert again.read_text() == doc.read_text()
    assert (tmp_path / "PERF.json").read_bytes() == raw.read_bytes()


def test_the_raw_results_are_published_next_to_the_document(
    p3_run: tuple[Path, Path, dict[str, Any]],
) -> None:
    doc, _, data = p3_run
    published = doc.with_suffix(".json")
    assert json.loads(published.read_text()) == data
    assert "| raw JSON | [PERF.json](PERF.json) |" in doc.read_text().replace(
        " (every run, every sample)", ""
    )


def test_a_missed_target_comes_with_a_profile_command_and_a_plan(
    p3_run: tuple[Path, Path, dict[str, Any]], tmp_path: Path
) -> None:
    data = copy.deepcopy(p3_run[2])
    for figure in data["figures"]:
        if figure["key"] == "P3":  # the same measurements against a target they cannot meet
            figure["target"] = 0.01
    missed = tmp_path / "missed.json"
    missed.write_text(json.dumps(data))
    doc = tmp_path / "missed.md"
    assert run_all.main(["--render", str(missed), "--doc", str(doc)]) == 0
    section = doc.read_text().split("## Targets missed: profile and plan", 1)[1]
    assert section.lstrip().startswith("### P3:")
    assert "python -m bench.profile ingest" in section
    assert "Plan:" in section
    assert "None in this run." not in section


def test_latency_by_reason_groups_events() -> None:
    notes = run_all._latency_by_reason([1.0, 2.0, 3.0, 10.0], ["max_delay", "a", "max_delay", "a"])
    assert len(notes) == 1
    assert "max_delay 2 (p50 2.0 s)" in notes[0]
    assert "a 2 (p50 6.0 s)" in notes[0]
    assert run_all._latency_by_reason([1.0], []) == []


def test_the_soak_plot_goes_next_to_the_document(tmp_path: Path) -> None:
    args = run_all.parse_args(["--doc", str(tmp_path / "P.md")])
    args.stamp = "S"
    assert run_all.default_plot(args) == tmp_path / "P-soak-rss.png"
    args = run_all.parse_args(["--no-doc"])
    args.stamp = "S"
    assert run_all.default_plot(args).parent == run_all.RESULTS_DIR


def test_clip_length_fits_the_budget() -> None:
    short = run_all.clip_seconds(60, 3, 0.2)
    long = run_all.clip_seconds(600, 3, 0.2)
    assert short < long
    # whatever the budget, the clip stays within the suite's bounds
    assert run_all.clip_seconds(0, 3, 0.2) == run_all.CLIP_MIN_S
    assert run_all.clip_seconds(1e9, 3, 0.2) == run_all.CLIP_MAX_S


def test_a_figure_from_a_results_file_keeps_its_verdict(
    p3_run: tuple[Path, Path, dict[str, Any]],
) -> None:
    _, _, data = p3_run
    for stored in data["figures"]:
        assert Figure.from_dict(stored).verdict == stored["verdict"]
