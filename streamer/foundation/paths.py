"""Where the service finds the project's files: one place for each path it assumes."""

from __future__ import annotations

from pathlib import Path

#: The checkout (or installed source tree) this package runs from.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: The embedded Triton's model repository when the config names none.
DEFAULT_MODEL_REPOSITORY = PROJECT_ROOT / "model_repository"
#: The repository's entry model, which the streamer sends frames to (``triton.model``'s
#: default): the folder ``model_repository/plate_recognition/``.
BLS_MODEL = "plate_recognition"
#: The virtualenv ``make setup`` builds for the embedded Triton's Python-backend models.
PROJECT_MODEL_ENV = PROJECT_ROOT / ".venv-triton"
