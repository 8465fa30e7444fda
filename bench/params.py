"""What the BLS model is configured with, read from the built repository (stdlib only).

Imported by ``bench/bare_loop.py``, which runs in the models' Python environment
(``.venv-triton``: numpy<2, no psutil, no ``streamer``), so nothing here may import more than
the standard library.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from streamer.foundation.paths import BLS_MODEL

CALLEES = ("detector", "stn", "lprnet")
_PARAMETER = re.compile(r'key:\s*"(\w+)",\s*value:\s*\{\s*string_value:\s*"([^"]*)"')
# Threads per instance: ``torch_threads`` (TorchScript) or ``INFERENCE_NUM_THREADS`` (OpenVINO).
_TORCH_THREADS = re.compile(
    r'key:\s*"(?:torch_threads|INFERENCE_NUM_THREADS)",?\s*value:\s*\{\s*string_value:\s*"(\d+)"',
    re.MULTILINE,
)
_INSTANCE_COUNT = re.compile(r"instance_group\s*\[\s*\{\s*count:\s*(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class PipelineParams:
    """The BLS's parameters, so that a client-side pipeline does the same work."""

    input_hw: tuple[int, int]
    head_layout: str
    conf_threshold: float
    iou_threshold: float
    max_plates: int
    crop_pad_ratio: float
    recogniser_max_batch: int
    torch_threads: dict[str, int]  # per instance
    instances: dict[str, int]

    @property
    def thread_budget(self) -> int:
        """Torch threads Triton may run at once for one model: the most over the callees.

        The bare loop gets this many (``torch.set_num_threads``): the same budget as the
        detector's instances x threads, run one model at a time.
        """
        return max(self.torch_threads[c] * self.instances[c] for c in self.torch_threads)

    def describe(self) -> str:
        """``detector 2 x 1 torch thread(s), stn 1 x 1, ...`` (instances x threads)."""
        return ", ".join(
            f"{c} {self.instances[c]} x {self.torch_threads[c]}" for c in self.torch_threads
        )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_params(repository: Path) -> PipelineParams:
    """Input size from ``build_info.json``; the rest from the ``config.pbtxt`` files."""
    info = json.loads((repository / "build_info.json").read_text())
    text = (repository / BLS_MODEL / "config.pbtxt").read_text()
    found = dict(_PARAMETER.findall(text))
    threads, instances = {}, {}
    for callee in CALLEES:
        config = (repository / callee / "config.pbtxt").read_text()
        match = _TORCH_THREADS.search(config)
        threads[callee] = int(match.group(1)) if match else 1
        match = _INSTANCE_COUNT.search(config)
        instances[callee] = int(match.group(1)) if match else 1
    return PipelineParams(
        input_hw=(int(info["input_hw"][0]), int(info["input_hw"][1])),
        head_layout=found.get("detector_head_layout", info.get("detector_layout", "auto")),
        conf_threshold=float(found.get("conf_threshold", "0.25")),
        iou_threshold=float(found.get("iou_threshold", "0.45")),
        max_plates=int(found.get("max_plates", "16")),
        crop_pad_ratio=float(found.get("crop_pad_ratio", "0.2")),
        recogniser_max_batch=int(found.get("recogniser_max_batch_size", "32")),
        torch_threads=threads,
        instances=instances,
    )
