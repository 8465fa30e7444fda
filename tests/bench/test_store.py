"""bench/store.py on a small history: every kind of search is timed through the real store,
the disk use is split into rows and pictures, and the report says whether p99 met."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.store import main


def test_a_small_history_is_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "store.json"
    main(["--events", "3000", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["events"] == 3000 and result["insert_per_s"] > 0
    kinds = set(result["search_s"])
    assert {"exact plate", "fuzzy plate", "camera, one day", "a camera's second page"} <= kinds
    for figures in result["search_s"].values():
        assert 0 < figures["p50"] <= figures["p99"] and figures["n"] >= 20
    # Rows: the payload (~70 B) and four indexes; pictures: the crops and vehicle pictures.
    assert 100 < result["row_bytes_per_event"] < 5_000
    assert result["picture_bytes_per_event"] > 1_000
    table = capsys.readouterr().out
    assert "| exact plate |" in table and "<= 100 ms" in table
