"""The pass rules the pass detector's tests start from (for tests/streamer/tracking/)."""

import dataclasses
from typing import Any

from streamer.tracking.pass_params import PassParams

CAMERA = "yard"
# Reads given without their pixels (or with the same ones): every read counts as evidence, as
# on a moving or noisy picture; evidence itself is tested on images (test_passes_on_pictures).
# Without character probabilities too, each character counts as certain and reads that
# disagree give a far lower confidence than the model's probabilities do: min_confidence is
# off for them, and tested on its own (test_passes).
EVERY_READ = {"evidence_min_change": 0.0, "evidence_min_shift": 0.0, "min_confidence": 0.0}


def params_with(**changes: Any) -> PassParams:
    """The config's default pass parameters, with ``changes``."""
    return dataclasses.replace(PassParams.defaults(), **changes)
