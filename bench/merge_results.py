"""Put the phases of a later run into an earlier suite's results, for the document.

    .venv/bin/python -m bench --render docs/PERFORMANCE.json --merge bench/results/STAMP.json

A phase measured again on its own (``python -m bench --only O``) replaces that phase's
figures and raw runs in the suite's results: a figure of the same key in place, a new one
after the last figure of its phase. The document then names each phase measured again, with
its commit, date and command, beside the suite's own (``meta["reruns"]``).
"""

from __future__ import annotations

import copy
import re
from typing import Any

_PHASE = re.compile(r"^([A-Z]+)")


def phase_of(key: str) -> str:
    """The phase letter(s) a figure key starts with: ``O16-rss`` -> ``O``, ``P2-4`` -> ``P``."""
    match = _PHASE.match(key)
    return match.group(1) if match else key


def merge(base: dict[str, Any], rerun: dict[str, Any]) -> dict[str, Any]:
    """``base`` with the figures, raw runs and phase times of ``rerun`` (a new dict)."""
    merged = copy.deepcopy(base)
    figures: list[dict[str, Any]] = merged["figures"]
    index = {f["key"]: i for i, f in enumerate(figures)}
    for figure in rerun["figures"]:
        key = figure["key"]
        if key in index:
            figures[index[key]] = figure
            continue
        same_phase = [i for i, f in enumerate(figures) if phase_of(f["key"]) == phase_of(key)]
        at = same_phase[-1] + 1 if same_phase else len(figures)
        figures.insert(at, figure)
        index = {f["key"]: i for i, f in enumerate(figures)}
    merged["raw"].update(rerun.get("raw", {}))
    meta, again = merged["meta"], rerun["meta"]
    meta.setdefault("phase_s", {}).update(
        {k: v for k, v in again.get("phase_s", {}).items() if k != "triton start"}
    )
    meta.setdefault("reruns", []).append(
        {
            "phases": again.get("phases", []),
            "git_commit": again.get("git_commit"),
            "started_at": again.get("started_at"),
            "command": again.get("command"),
        }
    )
    return merged
