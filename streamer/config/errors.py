"""Config errors: :class:`ConfigError`, and the messages of a failed validation.

A message names the file, the key (``cameras[gate].sample_fps``: a camera by its name when
that is valid and unique, else by its index) and the reason, with the fix where there is one
(the closest valid key, the section a key belongs under, the allowed bounds). Input values are
quoted only for scalar, non-secret fields, and any URL credentials in them are masked.
"""

from __future__ import annotations

import difflib
import re
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo

from streamer.config.base import CAMERA_NAME, quote, type_name
from streamer.config.cameras import CameraConfig, MotionConfig
from streamer.config.decisions import EventsConfig, TrackerConfig
from streamer.config.delivery import OutboxConfig, WebhookTargetConfig
from streamer.config.inference import TritonConfig
from streamer.config.service import LogConfig, MetricsConfig, WebConfig
from streamer.config.settings import Settings
from streamer.foundation.redact import SECRET_NAME, redact_text


class ConfigError(Exception):
    """The config file cannot be used: ``str()`` names the file, the key and the reason.

    ``problems`` holds ``(key path or None, reason)`` pairs, one per problem found.
    """

    def __init__(self, path: Path | str, problems: Sequence[tuple[str | None, str]]) -> None:
        self.path = Path(path)
        self.problems: tuple[tuple[str | None, str], ...] = tuple(problems)
        super().__init__(self._message())

    def _message(self) -> str:
        # _redact_text: a last net for URL credentials in a key or a reason.
        lines = [
            redact_text(f"{key}: {reason}" if key else reason) for key, reason in self.problems
        ]
        if len(lines) == 1:
            return f"{self.path}: {lines[0]}"
        return f"{self.path}: {len(lines)} problems:\n" + "\n".join(f"  - {line}" for line in lines)

    def __str__(self) -> str:
        return str(self.args[0])


#: Field names whose values are never quoted in an error message: the secrets' names, and
#: URLs (they may carry credentials).
_SENSITIVE_FIELD = re.compile(rf"url|{SECRET_NAME.pattern}", re.IGNORECASE)


def format_validation_error(path: Path | str, exc: ValidationError, data: Any) -> ConfigError:
    """A :class:`ConfigError` for a pydantic error of ``Settings`` validating ``data``.

    Keys are written ``cameras[gate].sample_fps`` (the camera's name when it is valid
    and unique, else its index); input values are quoted only for scalar, non-secret
    fields, and any URL credentials in them are masked.
    """
    problems: list[tuple[str | None, str]] = []
    for err in exc.errors(include_url=False):
        loc = tuple(err["loc"])
        if err["type"] == "invalid_key":  # loc ends with the key itself
            reason = (
                f"key {quote(err.get('input'))} is not a string: quote it "
                "(YAML reads yes/no/on/off/true/false and numbers as other types)"
            )
            problems.append((key_path(loc[:-1], data) or None, reason))
        else:
            problems.append((key_path(loc, data) or None, _reason(err)))
    return ConfigError(path, problems)


def _reason(err: Any) -> str:
    loc: tuple[Any, ...] = tuple(err["loc"])
    kind: str = err["type"]
    value = err.get("input")
    field = _field_at(loc)
    if kind == "missing":
        if loc == ("cameras",):
            return "required key is missing: list at least one camera under 'cameras:'"
        return "required key is missing"
    if kind == "extra_forbidden":
        return _unknown_key_reason(loc)
    if kind == "too_short" and loc == ("cameras",):
        return "no cameras configured: list at least one under 'cameras:'"
    if kind == "too_short" and loc == ("events", "plate_formats"):
        return "at least one plate format is needed (or leave the key out for the defaults)"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"should be a mapping (key: value), got {type_name(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"should be a list, got {type_name(value)}"
    if kind == "value_error":
        message = str(err.get("ctx", {}).get("error", err["msg"]))
        return redact_text(message)
    message = str(err["msg"])
    if _quotable(loc, value):
        message += f" (got {quote(value)})"
    bounds = _bounds_text(field) if field is not None else ""
    if bounds and kind in _NUMBER_ERRORS:
        message += f"; allowed: {bounds}"
    return message


_NUMBER_ERRORS = {
    "greater_than",
    "greater_than_equal",
    "less_than",
    "less_than_equal",
    "float_parsing",
    "float_type",
    "int_parsing",
    "int_type",
    "int_from_float",
    "finite_number",
}


def _unknown_key_reason(loc: tuple[Any, ...]) -> str:
    key = str(loc[-1])
    model = _model_at(loc[:-1])
    allowed = list(model.model_fields) if model is not None else []
    reason = "unknown key"
    # A key of another section, as it is, says where it goes before any near miss here.
    elsewhere = [name for name, other in _SECTIONS.items() if key in other.model_fields]
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close and not elsewhere:
        return f"{reason}; did you mean '{close[0]}'?"
    if elsewhere:
        reason += f" here ('{key}' belongs under {' or '.join(elsewhere)})"
    if allowed:
        reason += f"; allowed keys: {', '.join(allowed)}"
    return reason


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model inside ``X``, ``list[X]``, ``X | None``, ``Annotated[X, ...]``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (list, tuple, Union, Annotated, types.UnionType):
        for arg in get_args(annotation):
            model = _unwrap_model(arg)
            if model is not None:
                return model
    return None


def _model_at(loc: Sequence[Any]) -> type[BaseModel] | None:
    """The model whose keys live at ``loc`` (list indices skipped), or None."""
    model: type[BaseModel] | None = Settings
    for part in loc:
        if isinstance(part, int):
            continue
        if model is None or part not in model.model_fields:
            return None
        model = _unwrap_model(model.model_fields[part].annotation)
    return model


def _field_at(loc: Sequence[Any]) -> FieldInfo | None:
    names = list(loc)
    while names and isinstance(names[-1], int):
        names.pop()
    if not names:
        return None
    model = _model_at(names[:-1])
    return model.model_fields.get(names[-1]) if model is not None else None


def _bounds_text(field: FieldInfo) -> str:
    parts = []
    for meta in field.metadata:
        if isinstance(meta, annotated_types.Gt):
            parts.append(f"> {meta.gt}")
        elif isinstance(meta, annotated_types.Ge):
            parts.append(f">= {meta.ge}")
        elif isinstance(meta, annotated_types.Lt):
            parts.append(f"< {meta.lt}")
        elif isinstance(meta, annotated_types.Le):
            parts.append(f"<= {meta.le}")
    kind = {float: "a number", int: "an integer"}.get(field.annotation)  # type: ignore[call-overload]
    if not parts or kind is None:
        return ""
    return f"{kind} {' and '.join(parts)}"


def _quotable(loc: tuple[Any, ...], value: Any) -> bool:
    if isinstance(value, dict | list | tuple):
        return False
    return not any(isinstance(p, str) and _SENSITIVE_FIELD.search(p) for p in loc)


def key_path(loc: Sequence[Any], data: Any) -> str:
    """``("cameras", 1, "sample_fps")`` -> ``cameras[gate].sample_fps`` (or ``cameras[1]...``)."""
    out = ""
    node = data
    for part in loc:
        if isinstance(part, int):
            label = str(part)
            if isinstance(node, list) and 0 <= part < len(node):
                name = _item_name(node, part)
                if name is not None:
                    label = name
            out += f"[{label}]"
        else:
            out += f".{part}" if out else str(part)
        node = _child(node, part)
    return out


def _item_name(items: list[Any], index: int) -> str | None:
    """The ``name`` of a list item when it is a valid, unique, non-numeric name."""
    item = items[index]
    name = item.get("name") if isinstance(item, dict) else None
    if not isinstance(name, str) or not CAMERA_NAME.match(name) or name.isdigit():
        return None
    same = sum(1 for other in items if isinstance(other, dict) and other.get("name") == name)
    return name if same == 1 else None


def _child(node: Any, part: Any) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return node[part]
    return None


_SECTIONS: dict[str, type[BaseModel]] = {
    "cameras[]": CameraConfig,
    "cameras[].motion": MotionConfig,
    "triton": TritonConfig,
    "tracker": TrackerConfig,
    "events": EventsConfig,
    "web": WebConfig,
    "metrics": MetricsConfig,
    "log": LogConfig,
    "webhooks[]": WebhookTargetConfig,
    "outbox": OutboxConfig,
}
