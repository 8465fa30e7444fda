"""Where the converters find the project's hand-written model repository files."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from streamer.foundation.paths import BLS_MODEL, PROJECT_ROOT

MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
BLS_CODE_DIR = MODEL_REPOSITORY / BLS_MODEL / "1"
TEMPLATES = Path(__file__).resolve().parent / "templates"


def import_plate_ops() -> ModuleType:
    """Import the pipeline's pre/post-processing module from the BLS model folder.

    It lives beside the BLS ``model.py`` because Triton puts that folder on the
    model's ``sys.path``; the converters and the tests import the same file.
    """
    if str(BLS_CODE_DIR) not in sys.path:
        sys.path.insert(0, str(BLS_CODE_DIR))
    return importlib.import_module("plate_ops")


def import_regions() -> ModuleType:
    """Import the BLS's region planner (``regions.py``, beside ``plate_ops``)."""
    import_plate_ops()
    return importlib.import_module("regions")
