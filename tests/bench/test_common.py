"""bench.common: the ratio, its verdict and the statistics every figure is built from."""

from __future__ import annotations

import json

import pytest

from bench.common import Figure, percentile, summarize


def _figure(a: list[float], b: list[float], target: float | None, higher: bool) -> Figure:
    return Figure(
        key="X",
        title="x",
        numerator="service",
        denominator="baseline",
        unit="frames/s",
        a=a,
        b=b,
        target=target,
        higher_is_better=higher,
        notes=["a note"],
        extra={"plot": "docs/x.png"},
    )


def test_ratio_is_median_over_median_not_mean_of_round_ratios() -> None:
    figure = _figure([10.0, 2.0, 4.0], [5.0, 4.0, 1.0], 1.0, higher=True)
    assert figure.ratio == pytest.approx(4.0 / 4.0)
    assert figure.round_ratios == pytest.approx([2.0, 0.5, 4.0])


@pytest.mark.parametrize(
    ("a", "target", "higher", "verdict"),
    [
        ([0.95], 0.9, True, "PASS"),
        ([0.85], 0.9, True, "MISS"),
        ([1.10], 1.2, False, "PASS"),
        ([1.30], 1.2, False, "MISS"),
        ([1.30], None, False, "info"),
    ],
)
def test_verdict_follows_the_targets_direction(
    a: list[float], target: float | None, higher: bool, verdict: str
) -> None:
    assert _figure(a, [1.0], target, higher).verdict == verdict


def test_a_figure_without_measurements_is_not_applicable() -> None:
    assert _figure([], [], 1.0, higher=True).verdict == "n/a"
    assert _figure([1.0], [0.0], 1.0, higher=True).ratio is None


def test_from_dict_inverts_as_dict_through_json() -> None:
    figure = _figure([3.0, 1.0, 2.0], [2.0, 2.5, 1.5], 0.9, higher=False)
    again = Figure.from_dict(json.loads(json.dumps(figure.as_dict())))
    assert again == figure
    assert again.verdict == figure.verdict


def test_summarize_keeps_the_raw_samples_in_their_order() -> None:
    summary = summarize([3.0, 1.0, 2.0, 10.0])
    assert summary["median"] == 2.5
    assert (summary["min"], summary["max"]) == (1.0, 10.0)
    assert summary["samples"] == [3.0, 1.0, 2.0, 10.0]
    assert summarize([]) == {"n": 0, "samples": []}


def test_percentile_interpolates_linearly() -> None:
    values = [4.0, 1.0, 3.0, 2.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile(values, 99) == pytest.approx(3.97)
    assert percentile([], 50) is None


def test_a_failed_check_makes_a_met_target_a_miss_and_survives_json() -> None:
    figure = _figure([2.0], [1.0], 1.0, higher=True)
    assert figure.verdict == "PASS"
    figure.failed_checks = ["texts differ"]
    assert figure.verdict == "MISS"
    again = Figure.from_dict(json.loads(json.dumps(figure.as_dict())))
    assert again == figure and again.verdict == "MISS"
    # without a target a figure is information, checks or not
    assert _figure([2.0], [1.0], None, higher=True).verdict == "info"
