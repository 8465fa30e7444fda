"""Replay clips as fast as possible and compare the events with the truth: an accuracy report.

``python -m streamer replay --config FILE --truth TRUTH.yaml [--json OUT] [--markdown OUT]``

The config's cameras are played once each, as fast as the inference allows
(``realtime: false``), through the real service: the same sampling, motion gate,
Triton model, tracker and decision rules as in production; its sinks, webhooks, history,
web view and metrics are switched off (nothing is delivered anywhere). The truth
file names, per camera, the plates that pass in its clip::

    yard: [O567AM76, Y836XH76]
    night-blur: []                # unreadable: no event is the right answer

Each pass counts with its last version (a correction replaces what it corrects).
Per camera and in total: ``correct`` (passes whose text is a plate of the truth,
each plate counted as often as it is listed), ``wrong`` (a text not in the truth),
``duplicates`` (a plate of the truth reported more often than listed), ``missed``
(listed but not reported), ``withheld`` (passes the service decided but did not
report: a confidence under ``events.min_confidence``, or fewer exact reads than
``events.min_reads``; docs/events.md, Withheld passes), precision =
correct / passes, recall = correct / listed, the corrections, the first reports
that were wrong, and the median time from a pass's first read to its decision.
A listed plate is *readable* when the recogniser read it exactly in at least
``READABLE_READS`` (2) of the frames the service sent; recall on readable plates =
correct reports of readable plates / readable listed plates (a plate listed n times
counts n times), the share of what the decision rules could have reported.
Beside them, what the recogniser read frame by frame (the most frequent raw reads
and how often), so that a low recall can be told apart: the recogniser never
read the plate, or the decision rules did not take what it read. After the table,
every track of each clip with its fate (reported, withheld and why, a duplicate of
what, no valid text, weak, erased): :func:`fates_markdown`.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from streamer.config import ConfigError, Settings
from streamer.delivery.events import PlateEvent
from streamer.domain.frames import FrameResult
from streamer.domain.plate_formats import PlateFormats
from streamer.domain.plate_pass import TrackFate

#: Raw reads listed per camera in the report.
TOP_READS = 5
#: A listed plate read exactly in at least this many frames sent is *readable* (the
#: events.min_reads default: fewer reads, no decision rule may report it).
READABLE_READS = 2


def load_truth(path: Path) -> dict[str, list[str]]:
    """``camera -> [plate, ...]`` from a truth file; errors name the file and the key."""
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(path, [(None, f"cannot read the truth file: {exc.strerror}")]) from None
    except yaml.YAMLError as exc:
        raise ConfigError(path, [(None, f"not valid YAML: {exc}")]) from None
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(path, [(None, "the truth must map camera names to lists of plates")])
    truth: dict[str, list[str]] = {}
    problems: list[tuple[str | None, str]] = []
    for camera, plates in raw.items():
        if plates is None:
            plates = []
        if not isinstance(plates, list) or not all(isinstance(p, str) and p for p in plates):
            problems.append((str(camera), "must be a list of plate texts ([] for none)"))
            continue
        truth[str(camera)] = [p.strip().upper() for p in plates]
    if problems:
        raise ConfigError(path, problems)
    return truth


def replay_settings(settings: Settings, cameras: Iterable[str]) -> Settings:
    """``settings`` for a replay of ``cameras``: files as fast as possible, nothing delivered,
    no ports opened."""
    wanted = set(cameras)
    unknown = wanted - {c.name for c in settings.cameras}
    if unknown:
        raise ValueError(f"the truth names cameras the config lacks: {', '.join(sorted(unknown))}")
    chosen = [
        c.model_copy(update={"realtime": False, "enabled": True})
        for c in settings.cameras
        if c.name in wanted
    ]
    return settings.model_copy(
        update={
            "cameras": chosen,
            "events": settings.events.model_copy(update={"stdout": False, "file": None}),
            "webhooks": [],
            "web": settings.web.model_copy(update={"enabled": False}),
            "metrics": settings.metrics.model_copy(update={"enabled": False}),
            "storage": settings.storage.model_copy(update={"enabled": False}),
        }
    )


@dataclass
class Collector:
    """An event sink and frame observer that keeps what a replay needs to score it."""

    name: str = "replay"
    events: list[PlateEvent] = field(default_factory=list)
    reads: dict[str, Counter[str]] = field(default_factory=lambda: defaultdict(Counter))
    frames: Counter[str] = field(default_factory=Counter)
    #: Every track of each camera, as it ended (in the order they ended).
    fates: dict[str, list[TrackFate]] = field(default_factory=lambda: defaultdict(list))

    async def publish(self, event: PlateEvent) -> None:
        self.events.append(event)

    async def close(self) -> None:
        return None

    def observe(self, result: FrameResult) -> None:
        camera = result.frame.camera
        self.frames[camera] += 1
        for plate in result.plates:
            self.reads[camera][plate.text] += 1

    def fate(self, fate: TrackFate) -> None:
        self.fates[fate.camera].append(fate)


def fates_markdown(fates: dict[str, list[TrackFate]], cameras: Iterable[str]) -> str:
    """Every track of each camera and what became of it: reported, withheld (why), a
    duplicate (of what), no valid text, weak (low-score detections only), erased."""
    rows = [
        "| clip | track | fate | text | confidence | reads (exact) | seen (stream s) | detail |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for camera in cameras:
        for f in sorted(fates.get(camera, ()), key=lambda f: (f.first_t, f.track_id)):
            confidence = "-" if f.confidence is None else f"{f.confidence:.2f}"
            rows.append(
                f"| {camera} | {f.track_id} | {f.fate} | {f.text or '-'} | {confidence} | "
                f"{f.reads} ({f.exact}) | {f.first_t:.1f}-{f.last_t:.1f} | {f.detail or '-'} |"
            )
    return "\n".join(rows) + "\n"


@dataclass(frozen=True)
class ClipScore:
    """One camera's clip against its truth (see the module docstring)."""

    camera: str
    expected: list[str]
    reported: list[str]
    correct: int
    wrong: int
    duplicates: int
    missed: int
    corrections: int
    wrong_first: int
    decided_after_s: float | None
    frames: int
    top_reads: list[tuple[str, int]]
    #: Each missed plate with the frames the recogniser read it in, exactly: 0 means it was
    #: never read; under events.min_reads, too few to report; more, the vote chose otherwise.
    missed_reads: list[tuple[str, int]] = field(default_factory=list)
    #: Each reported pass (last version) as (text, confidence, correct), by text.
    passes: list[tuple[str, float, bool]] = field(default_factory=list)
    #: Passes decided but not reported (events.min_confidence, events.min_reads).
    withheld: int = 0
    #: The listed plates (as often as listed) the recogniser read exactly in at least
    #: READABLE_READS frames sent, and how many of them were reported.
    readable_plates: list[str] = field(default_factory=list)
    readable_correct: int = 0

    @property
    def precision(self) -> float | None:
        return self.correct / len(self.reported) if self.reported else None

    @property
    def recall(self) -> float | None:
        return self.correct / len(self.expected) if self.expected else None

    @property
    def readable(self) -> int:
        return len(self.readable_plates)

    @property
    def readable_recall(self) -> float | None:
        return self.readable_correct / self.readable if self.readable else None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["precision"], data["recall"] = self.precision, self.recall
        data["readable"], data["readable_recall"] = self.readable, self.readable_recall
        data["top_reads"] = [{"text": t, "frames": n} for t, n in self.top_reads]
        data["missed_reads"] = [{"text": t, "frames": n} for t, n in self.missed_reads]
        data["passes"] = [
            {"text": t, "confidence": round(c, 4), "correct": ok} for t, c, ok in self.passes
        ]
        return data


def latest_versions(events: Iterable[PlateEvent]) -> dict[str, PlateEvent]:
    """Each pass (by ``event_id``) at its highest version: a correction replaces what it
    corrects. The rule every count of passes and wrong texts uses (this report, the bench)."""
    latest: dict[str, PlateEvent] = {}
    for event in events:
        if event.event_id not in latest or event.version > latest[event.event_id].version:
            latest[event.event_id] = event
    return latest


def score(
    camera: str,
    expected: list[str],
    events: Iterable[PlateEvent],
    reads: Counter[str],
    frames: int,
    withheld: int = 0,
) -> ClipScore:
    """Score one camera's events (every version) against ``expected``."""
    messages = [e for e in events if e.camera == camera]
    latest = latest_versions(messages)
    first = {e.event_id: e for e in messages if e.version == 1}
    reported = [e.text for e in latest.values()]
    want, got = Counter(expected), Counter(reported)
    correct = sum(min(n, want[t]) for t, n in got.items())
    wrong = sum(n for t, n in got.items() if t not in want)
    duplicates = sum(max(0, n - want[t]) for t, n in got.items() if t in want)
    right_times = [e.decided_after_s for e in latest.values() if e.text in want]
    missed = sorted(t for t, n in want.items() if got[t] < n)
    readable = sorted(t for t in expected if reads[t] >= READABLE_READS)
    # A pass is correct while its plate has not been reported more often than listed.
    left = Counter(want)
    passes = []
    for e in sorted(latest.values(), key=lambda e: (e.text, -e.confidence)):
        passes.append((e.text, e.confidence, left[e.text] > 0))
        left[e.text] -= 1
    return ClipScore(
        camera=camera,
        expected=sorted(expected),
        reported=sorted(reported),
        correct=correct,
        wrong=wrong,
        duplicates=duplicates,
        missed=sum(max(0, n - got[t]) for t, n in want.items()),
        corrections=sum(1 for e in messages if e.version > 1),
        wrong_first=sum(1 for e in first.values() if e.text not in want),
        decided_after_s=statistics.median(right_times) if right_times else None,
        frames=frames,
        top_reads=reads.most_common(TOP_READS),
        missed_reads=[(t, reads[t]) for t in missed],
        passes=passes,
        withheld=withheld,
        readable_plates=readable,
        readable_correct=sum(min(got[t], n) for t, n in Counter(readable).items()),
    )


async def run_replay(
    settings: Settings, truth: dict[str, list[str]], collector: Collector | None = None
) -> tuple[int, list[ClipScore], dict[str, Any]]:
    """Play the truth's cameras once through the service; its exit code, scores, totals.
    ``collector``: where the events, reads and track fates are kept (a new one if None)."""
    from streamer.app import Service  # the service pulls in Triton's client: only here

    collector = collector if collector is not None else Collector()
    service = Service(
        replay_settings(settings, truth),
        once=True,
        extra_sinks=[collector],
        on_result=collector.observe,
        on_fate=collector.fate,
    )
    code = await service.run()
    scores = [
        score(
            camera,
            plates,
            collector.events,
            collector.reads[camera],
            collector.frames[camera],
            sum(1 for f in collector.fates[camera] if f.fate == "withheld"),
        )
        for camera, plates in truth.items()
    ]
    return code, scores, totals(scores)


def totals(scores: list[ClipScore]) -> dict[str, Any]:
    """The scores summed over every clip, with overall precision and recall."""
    passes = sum(len(s.reported) for s in scores)
    listed = sum(len(s.expected) for s in scores)
    correct = sum(s.correct for s in scores)
    readable = sum(s.readable for s in scores)
    readable_correct = sum(s.readable_correct for s in scores)
    times = [s.decided_after_s for s in scores if s.decided_after_s is not None]
    return {
        "clips": len(scores),
        "passes": passes,
        "expected": listed,
        "correct": correct,
        "wrong": sum(s.wrong for s in scores),
        "duplicates": sum(s.duplicates for s in scores),
        "missed": sum(s.missed for s in scores),
        "corrections": sum(s.corrections for s in scores),
        "withheld": sum(s.withheld for s in scores),
        "wrong_first": sum(s.wrong_first for s in scores),
        "precision": correct / passes if passes else None,
        "recall": correct / listed if listed else None,
        "readable": readable,
        "readable_correct": readable_correct,
        "readable_recall": readable_correct / readable if readable else None,
        "unreadable_clips_with_events": sum(1 for s in scores if not s.expected and s.reported),
        "median_decided_after_s": statistics.median(times) if times else None,
    }


#: Upper bounds of the confidence bins of ``calibration``.
CALIBRATION_BINS = (0.3, 0.5, 0.7, 0.9, 1.0)


def calibration(scores: list[ClipScore]) -> list[dict[str, Any]]:
    """How often a reported pass is right, by its confidence: a calibrated confidence is
    right that often (a pass at 0.6 right about 6 times in 10)."""
    bins = []
    low = 0.0
    for high in CALIBRATION_BINS:
        inside = [
            (c, ok)
            for s in scores
            for _, c, ok in s.passes
            if low <= c < high or (high == CALIBRATION_BINS[-1] and c == high)
        ]
        bins.append(
            {
                "from": low,
                "to": high,
                "passes": len(inside),
                "correct": sum(1 for _, ok in inside if ok),
                "mean_confidence": sum(c for c, _ in inside) / len(inside) if inside else None,
            }
        )
        low = high
    return bins


def calibration_markdown(bins: list[dict[str, Any]]) -> str:
    rows = [
        "| confidence | passes | correct | right (share) | mean confidence |",
        "| --- | --- | --- | --- | --- |",
    ]
    for b in bins:
        share = b["correct"] / b["passes"] if b["passes"] else None
        rows.append(
            f"| {b['from']:.1f}-{b['to']:.1f} | {b['passes']} | {b['correct']} | "
            f"{_ratio(share)} | {_ratio(b['mean_confidence'])} |"
        )
    return "\n".join(rows) + "\n"


#: The events.min_confidence values of ``confidence_curve``.
CURVE_THRESHOLDS = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)


def confidence_curve(
    scores: list[ClipScore], thresholds: Iterable[float] = CURVE_THRESHOLDS
) -> list[dict[str, Any]]:
    """Precision and recall had ``events.min_confidence`` been each of ``thresholds``, from
    scores of a replay that withheld nothing (min_confidence 0): a pass is kept when its
    confidence is at least the threshold (as the service decides, known plates aside).

    Each pass's ``correct`` holds under any threshold: the passes of one text are marked
    right surest first, so a threshold keeps the right ones of a text before the others."""
    expected = sum(len(s.expected) for s in scores)
    readable = sum(s.readable for s in scores)
    curve = []
    for threshold in thresholds:
        kept = withheld = correct = readable_correct = withheld_correct = 0
        for s in scores:
            plates = set(s.readable_plates)
            for text, confidence, ok in s.passes:
                if confidence < threshold:
                    withheld += 1
                    withheld_correct += ok
                    continue
                kept += 1
                correct += ok
                readable_correct += ok and text in plates
        curve.append(
            {
                "min_confidence": threshold,
                "passes": kept,
                "correct": correct,
                "precision": correct / kept if kept else None,
                "recall": correct / expected if expected else None,
                "readable_recall": readable_correct / readable if readable else None,
                "withheld": withheld,
                "withheld_correct": withheld_correct,
            }
        )
    return curve


def confidence_curve_markdown(curve: list[dict[str, Any]], default: float | None = None) -> str:
    """``confidence_curve`` as a Markdown table; the row of ``default`` (the configured
    threshold) marked."""
    rows = [
        "| events.min_confidence | reported | correct | precision | recall "
        "| recall on readable | withheld (confidence) | withheld but right |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for c in curve:
        name = f"{c['min_confidence']:g}"
        if default is not None and abs(c["min_confidence"] - default) < 1e-9:
            name = f"**{name}** (default)"
        rows.append(
            f"| {name} | {c['passes']} | {c['correct']} | {_ratio(c['precision'])} | "
            f"{_ratio(c['recall'])} | {_ratio(c['readable_recall'])} | {c['withheld']} | "
            f"{c['withheld_correct']} |"
        )
    return "\n".join(rows) + "\n"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def markdown(scores: list[ClipScore], total: dict[str, Any]) -> str:
    """The report as a Markdown table, a row per clip and one for the total."""
    formats = PlateFormats()
    rows = [
        "| clip | expected | reported (last version, confidence) | correct | wrong | dup | missed "
        "| withheld | corrections | precision | recall | readable | recall on readable "
        "| decided after (s) | frames | recogniser's reads (frames) "
        "| missed plates: frames read exactly |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- "
        "| --- | --- | --- |",
    ]
    for s in scores:
        raw = ", ".join(f"{t}{'' if formats.is_valid(t) else '*'} ({n})" for t, n in s.top_reads)
        after = "-" if s.decided_after_s is None else f"{s.decided_after_s:.1f}"
        reported = " ".join(f"{t} ({c:.2f})" for t, c, _ in s.passes)
        rows.append(
            f"| {s.camera} | {' '.join(s.expected) or '(none)'} | {reported or '(none)'} | "
            f"{s.correct} | {s.wrong} | {s.duplicates} | "
            f"{s.missed} | {s.withheld} | {s.corrections} | "
            f"{_ratio(s.precision)} | {_ratio(s.recall)} | "
            f"{s.readable} | {_ratio(s.readable_recall)} | "
            f"{after} | {s.frames} | {raw or '(none)'} | "
            f"{', '.join(f'{t} ({n})' for t, n in s.missed_reads) or '-'} |"
        )
    after = total["median_decided_after_s"]
    rows.append(
        f"| **total** ({total['clips']} clips) | {total['expected']} | {total['passes']} | "
        f"{total['correct']} | {total['wrong']} | {total['duplicates']} | {total['missed']} | "
        f"{total['withheld']} | {total['corrections']} | "
        f"{_ratio(total['precision'])} | {_ratio(total['recall'])} | "
        f"{total['readable']} | {_ratio(total['readable_recall'])} | "
        f"{'-' if after is None else f'{after:.1f}'} | | | |"
    )
    return "\n".join(rows) + "\n"


def report_json(scores: list[ClipScore], total: dict[str, Any]) -> str:
    return json.dumps({"clips": [s.to_dict() for s in scores], "total": total}, indent=2)
