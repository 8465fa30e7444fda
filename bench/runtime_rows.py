"""Phase R, CPU runtimes: the rows ``bench/runtimes.py`` measures, as figures of the suite.

The hook is one function of ``bench.runtimes``::

    suite_rows(quick: bool, workdir: pathlib.Path) -> list[dict]

which builds and serves each variant itself (its own Tritons, so the suite runs this phase
while its own Triton is not started) and returns one row per variant, each with at least
``variant`` (``"torchscript"`` is the baseline) and ``frames_per_s``: whole-chain frames/s per
round, in round order (a list of floats, or ``bench.common.summarize``'s dict with its
``samples``) and ``texts_identical`` (bool: every frame's texts equal TorchScript's). Optional
keys shown when present: ``frames_with_other_texts``, ``min_box_iou``, ``precision``,
``server_cpu_ms_per_frame`` (a number, or ``{"all": summarize(...)}``).
Until that function exists the phase reports one ``n/a`` row saying so.

A runtime PASSes only when it is at least as fast as TorchScript *and* reads the same texts:
a faster option that reads plates differently is not the same service, so a row whose texts
differ (or were not compared) is a MISS whatever its speed (``Figure.failed_checks``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from bench.common import Figure, log

if TYPE_CHECKING:
    from bench.run_all import Suite

MODULE = "bench.runtimes"
HOOK = "suite_rows"
BASELINE = "torchscript"
#: A runtime is worth switching to when its whole chain is at least as fast as TorchScript's.
RUNTIME_TARGET = 1.0


def hook() -> tuple[Any, str | None]:
    """``(suite_rows, None)``, or ``(None, why not)``."""
    try:
        module = importlib.import_module(MODULE)
    except ImportError as exc:
        return None, f"{MODULE} cannot be imported ({exc})"
    function = getattr(module, HOOK, None)
    if not callable(function):
        return None, f"{MODULE} has no {HOOK}(quick, workdir) yet"
    return function, None


def phase_runtimes(suite: Suite) -> None:
    function, missing = hook()
    if function is None:
        log(f"R: {missing}")
        suite.raw["runtimes"] = {"missing": missing}
        suite.figures.append(missing_figure(str(missing)))
        return
    folder = suite.workdir / "runtimes"
    folder.mkdir(parents=True, exist_ok=True)
    rows = list(function(quick=suite.plan.quick, workdir=folder))
    suite.raw["runtimes"] = {"rows": rows}
    suite.figures.extend(runtime_figures(rows))


def missing_figure(why: str) -> Figure:
    return Figure(
        key="R",
        title="runtimes: TorchScript vs OpenVINO fp32 / bf16 / int8, whole-chain frames/s",
        numerator="-",
        denominator="-",
        unit="frames/s",
        a=[],
        b=[],
        target=RUNTIME_TARGET,
        higher_is_better=True,
        notes=[f"not measured: {why}; `python -m bench.runtimes` measures it on its own"],
    )


def samples(value: Any) -> list[float]:
    """Per-round frames/s from a list or from ``summarize``'s dict."""
    if isinstance(value, dict):
        value = value.get("samples", [])
    return [float(v) for v in value or []]


def _cpu(value: Any) -> float | None:
    if isinstance(value, dict):
        value = value.get("all", value)
        if isinstance(value, dict):
            value = value.get("median")
    return float(value) if isinstance(value, int | float) else None


def runtime_figures(rows: list[dict[str, Any]]) -> list[Figure]:
    by_variant = {str(row["variant"]): row for row in rows}
    baseline = by_variant.get(BASELINE)
    if baseline is None:
        return [missing_figure(f"{HOOK} returned no {BASELINE!r} row")]
    reference = samples(baseline["frames_per_s"])
    figures = []
    for name, row in by_variant.items():
        if name == BASELINE:
            continue
        notes = [
            "whole chain through Triton (the plate_recognition BLS: letterbox, detector, NMS, "
            "crops, stn, lprnet, CTC), the same decoded frames of yard_cam.ts for each "
            "variant, rounds interleaved (bench/runtimes.py)"
        ]
        checks = text_checks(row)
        notes.append(
            "texts identical to TorchScript's on every frame"
            if not checks
            else f"{checks[0]}: a MISS whatever its speed"
        )
        if row.get("min_box_iou") is not None:
            notes.append(f"lowest box IoU against TorchScript {float(row['min_box_iou']):.3f}")
        cpu, base_cpu = (
            _cpu(row.get("server_cpu_ms_per_frame")),
            _cpu(baseline.get("server_cpu_ms_per_frame")),
        )
        if cpu is not None and base_cpu is not None:
            notes.append(f"server CPU per frame {cpu:.0f} ms vs TorchScript's {base_cpu:.0f} ms")
        figures.append(
            Figure(
                key=f"R-{name}",
                title=f"runtime {name} vs TorchScript, whole-chain frames/s",
                numerator=f"{name} frames/s",
                denominator="TorchScript frames/s",
                unit="frames/s",
                a=samples(row["frames_per_s"]),
                b=reference,
                target=RUNTIME_TARGET,
                higher_is_better=True,
                notes=notes,
                extra={"texts_identical": row.get("texts_identical")},
                failed_checks=checks,
            )
        )
    return figures


def text_checks(row: dict[str, Any]) -> list[str]:
    """Why a runtime row cannot pass on its texts: they differ, or were not compared."""
    identical = row.get("texts_identical")
    if identical is True:
        return []
    if identical is None:
        return ["texts not compared with TorchScript's"]
    differing = row.get("frames_with_other_texts")
    frames = row.get("frames")
    where = (
        f" on {len(differing)} of {frames} frames"
        if isinstance(differing, list) and frames
        else " on some frames"
    )
    return [f"texts DIFFER from TorchScript's{where}"]
