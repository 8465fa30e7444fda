"""bench/merge_results.py: a phase measured again replaces that phase in the suite's results,
and the document says so."""

from __future__ import annotations

from typing import Any

from bench import merge_results, report
from bench.common import Figure
from tests.bench.test_capacity import _meta


def _figure(key: str, value: float) -> dict[str, Any]:
    return Figure(key, key, "a", "b", "x", [value], [1.0], 1.0, True).as_dict()


def test_a_rerun_replaces_its_phase_and_is_named_in_the_document() -> None:
    base = {
        "meta": _meta() | {"phase_s": {"O overload ladder": 900.0, "C cameras per core": 200.0}},
        "figures": [
            _figure("P1", 0.8),
            _figure("O1-rss", 1.0),
            _figure("O-wrong-text", 0.0),
            _figure("C-busy", 1.7),
        ],
        "raw": {"overload_ladder": {"old": True}, "camera_mix": {"kept": True}},
    }
    rerun = {
        "meta": _meta()
        | {
            "phases": ["O"],
            "git_commit": "2c518ca",
            "started_at": "later",
            "command": "python -m bench --only O",
            "phase_s": {"triton start": 12.0, "O overload ladder": 916.0},
        },
        "figures": [_figure("O1-rss", 0.9), _figure("O16-rss-per-camera", 0.94)],
        "raw": {"overload_ladder": {"new": True}},
    }
    merged = merge_results.merge(base, rerun)
    assert [f["key"] for f in merged["figures"]] == [
        "P1", "O1-rss", "O-wrong-text", "O16-rss-per-camera", "C-busy",
    ]  # fmt: skip
    assert merged["figures"][1]["ratio"] == 0.9  # the rerun's value, in place
    assert merged["raw"] == {"overload_ladder": {"new": True}, "camera_mix": {"kept": True}}
    assert merged["meta"]["phase_s"] == {"O overload ladder": 916.0, "C cameras per core": 200.0}
    assert base["figures"][1]["ratio"] == 1.0  # the base is left as it was
    figures = [Figure.from_dict(f) for f in merged["figures"]]
    doc = report.document(merged["meta"], figures, report.table(figures))
    assert "| measured again | O at 2c518ca, later (`python -m bench --only O`)" in doc
