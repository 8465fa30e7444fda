"""The shared base of every config section, and the helpers their validators use.

:class:`Section` makes a model strict: unknown keys are errors, values are immutable, strings
hold no control characters, numbers are not booleans and booleans are ``true``/``false``.
The helpers read ``key: ""`` as "not set", resolve relative paths against the config file's
folder, check names and regular expressions, and quote a value in a message without its
credentials. No validator does I/O.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    ValidationInfo,
    field_validator,
)

from streamer.foundation.redact import redact_text

#: Names of cameras, webhook targets and known-plate lists: 1-63 of a-z 0-9 _ -, starting with
#: a letter or digit.
CAMERA_NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
CAMERA_NAME = re.compile(CAMERA_NAME_PATTERN)

#: Characters no config string may hold (a newline in a camera URL would forge log lines).
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class Section(BaseModel):
    """Base of every config model: unknown keys are errors, values are immutable, strings
    hold no control characters, numbers are not booleans (``sample_fps: true`` is not 1.0)
    and booleans are ``true`` or ``false`` (not ``'no'``, ``on`` or 1)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    @field_validator("*", mode="before")
    @classmethod
    def _plain_values(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if isinstance(value, bool) and field is not None and _wants_number(field.annotation):
            raise ValueError(f"must be a number, got {str(value).lower()}")
        if field is not None and not isinstance(value, bool) and _wants_bool(field.annotation):
            value = _strict_bool(value)
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and _CONTROL.search(text):
                raise ValueError("must not contain control characters (newline, tab, ...)")
        return value


def _wants_bool(annotation: Any) -> bool:
    """Whether a field takes a bool (or None) and nothing else."""
    kinds = {a for a in typing.get_args(annotation) if a is not type(None)} or {annotation}
    return kinds == {bool}


def _strict_bool(value: Any) -> Any:
    """``true``/``false`` only: the words a ``${VAR}`` gives too, not ``no``, ``on`` or 1."""
    if value is None:
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    shown = repr(value) if isinstance(value, str) else str(value)
    raise ValueError(f"must be true or false, got {shown}")


def _wants_number(annotation: Any) -> bool:
    """Whether a field takes an int or a float and not a bool."""
    kinds = {a for a in typing.get_args(annotation) if isinstance(a, type)} or {annotation}
    for arg in typing.get_args(annotation):  # Annotated[float, ...] and the like
        kinds |= {a for a in typing.get_args(arg) if isinstance(a, type)}
    return bool(kinds & {int, float}) and bool not in kinds


def empty_to_none(value: Any) -> Any:
    """``key: ""`` (say, from ``${VAR:-}``) means "not set" for optional fields."""
    return None if isinstance(value, str) and not value.strip() else value


def resolve_path(value: str | Path, info: ValidationInfo) -> str:
    """A relative path joined to the config file's folder (``context["base_dir"]``)."""
    base = info.context.get("base_dir") if isinstance(info.context, Mapping) else None
    path = os.fspath(value)
    if base is None or os.path.isabs(path):
        return path
    return os.path.normpath(os.path.join(os.fspath(base), path))


def config_path(default: Path) -> Any:
    """The type of a path key: empty (``${VAR:-}``) means ``default``, and a relative path is
    joined to the config file's folder (give the field ``validate_default=True``, so that
    the default is too)."""

    def default_if_empty(value: Any) -> Any:
        return default if empty_to_none(value) is None else value

    def resolve(value: Path, info: ValidationInfo) -> Path:
        return Path(resolve_path(value, info))

    return Annotated[Path, BeforeValidator(default_if_empty), AfterValidator(resolve)]


def check_regex(pattern: str) -> str:
    """``pattern`` if it compiles as a regular expression, else a ValueError saying why."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern


def quote(value: Any) -> str:
    """``value`` as a message shows it: YAML's words for null and booleans, a string
    repr'd with URL credentials masked and cut at 80 characters."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = redact_text(value)
        return repr(text if len(text) <= 80 else text[:77] + "...")
    return repr(value)


def type_name(value: Any) -> str:
    """What kind of YAML value ``value`` is, in words ("a mapping", "nothing (null)")."""
    if value is None:
        return "nothing (null)"
    for kind, name in (
        (bool, "a boolean"),
        (dict, "a mapping"),
        (list, "a list"),
        (str, "a string"),
        (int, "an integer"),
        (float, "a number"),
    ):
        if isinstance(value, kind):
            return name
    return type(value).__name__
